"""The controller with a real local cluster (`cairn-local`'s launcher): the
controller, three storage pods and their health sidecars as processes, failure
detection tuned short. Probes write every shard continuously (and the unmodified
`oxia` client writes in a process of its own); every acknowledged write is read
back at the end of each test.

Starting and stopping a cluster is much of each test's time, so the tests that
leave a 3-pod, 4-shard cluster as they found it (healthy: every process back,
every shard steady with three members) share one, in the order of this file;
each checks that state first and gets a fresh cluster if a test before it left
the shared one otherwise. The tests that need another shape start their own.

Figures (failover time over many runs, rebalance time) come from the
`cairn-failover` program, not from these tests; the tests bound them loosely.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import xxhash

from cairn.bench.failover import FailoverBench, running_cluster
from cairn.proto import replication_pb2 as rpb
from support.oxia_writer import OxiaWriter

pytestmark = pytest.mark.e2e


def oxia_key_hash(key: str) -> int:
    return int(xxhash.xxh64(key).intdigest()) & 0xFFFFFFFF


# Far above what the runs measure (about 0.1 s for a crash, 1.5 s for a hang):
# a bound that catches a controller that does not fail over at all.
FAILOVER_BOUND_MS = 10_000


SHARED_PODS = 3
SHARED_SHARDS = 4


class Harness:
    """A running local cluster (see `running_cluster`), its bench, and oxia
    writers to stop at teardown."""

    def __init__(self, bench: FailoverBench) -> None:
        self.bench = bench
        self.cluster = bench.cluster
        self._writers: list[OxiaWriter] = []
        # Each shard's term when the test began: its elections are the later ones.
        self.start_terms = {shard["id"]: shard["term"] for shard in bench.shards()}

    def oxia_writer(self) -> OxiaWriter:
        """The oxia client writing through any pod (stopped at teardown at the latest),
        returned once its first put was acknowledged (writes flow before faults)."""
        writer = OxiaWriter(
            [self.cluster.public_address(name) for name in sorted(self.cluster.pods)]
        )
        self._writers.append(writer)
        writer.wait_until_writing()
        return writer

    def stop_writers(self) -> None:
        for writer in self._writers:
            writer.stop()

    def stop_probes(self) -> None:
        for probe in self.bench.probes.values():
            probe.stop()
        self.bench.probes.clear()

    def elections_since_start(self) -> list[dict[str, Any]]:
        """The elections of this test (a shared cluster also lists earlier tests')."""
        elections: list[dict[str, Any]] = self.admin().get("/v1/elections").json()
        return [e for e in elections if e["term"] > self.start_terms.get(e["shard"], 0)]

    def admin(self) -> httpx.Client:
        return self.bench.http

    def shards(self) -> list[dict[str, Any]]:
        return self.bench.shards()

    def pod_statuses(self) -> dict[str, list[rpb.ShardStatus]]:
        return self.bench.pod_statuses()

    def assert_one_leader_per_shard(self, timeout_s: float = 30.0) -> None:
        """Each shard has exactly one replica leading its recorded term, where the
        status says. Elections may start at any time (balancing), so this looks
        at a moment when every shard is steady and nothing changed while the pods
        were asked; two replicas leading one term is wrong at any moment."""
        deadline = time.monotonic() + timeout_s
        while True:
            before = self.shards()
            statuses = self.pod_statuses()
            leading: dict[int, list[tuple[str, int]]] = {}
            for name, replicas in statuses.items():
                for status in replicas:
                    if status.role == rpb.LEADER:
                        leading.setdefault(status.shard, []).append((name, status.term))
            for shard, leaders in leading.items():
                terms = [term for _, term in leaders]
                assert len(terms) == len(set(terms)), f"shard {shard}: two leaders {leaders}"
            steady = all(shard["state"] == "steady" for shard in before)
            if steady and _leadership(self.shards()) == _leadership(before):
                for shard in before:
                    current = [n for n, t in leading.get(shard["id"], []) if t == shard["term"]]
                    assert current == [shard["leader"]], (shard, leading.get(shard["id"]))
                return
            assert time.monotonic() < deadline, f"shards never steady: {before}"
            time.sleep(0.1)


def _leadership(shards: list[dict[str, Any]]) -> list[tuple[int, int, str, str]]:
    return [(s["id"], s["term"], s["state"], s["leader"]) for s in shards]


class SharedCluster:
    """The module's shared cluster, started on first use and replaced when a test
    finds it unhealthy."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._stack: contextlib.ExitStack | None = None
        self._bench: FailoverBench | None = None
        self.started = 0

    def healthy(self) -> FailoverBench:
        if self._bench is not None and not _healthy(self._bench):
            self.close()
        if self._bench is None:
            self.started += 1
            self._stack = contextlib.ExitStack()
            directory = self._directory / f"cluster-{self.started}"
            self._bench = self._stack.enter_context(
                running_cluster(directory, SHARED_PODS, SHARED_SHARDS)
            )
        return self._bench

    def close(self) -> None:
        if self._stack is not None:
            self._stack.close()
        self._stack = self._bench = None


def _healthy(bench: FailoverBench) -> bool:
    """What every sharing test starts from: all processes running, the pods and
    shards it was started with, each shard steady with its three members streaming."""
    try:
        bench.wait_settled(timeout_s=60.0)
    except TimeoutError:
        return False
    cluster = bench.cluster
    running = [cluster.controller, *(child for pair in cluster.pods.values() for child in pair)]
    shards = bench.shards()
    return (
        all(child is not None and child.exited() is None for child in running)
        and len(cluster.pods) == SHARED_PODS
        and len(shards) == SHARED_SHARDS
        and all(len(shard["ensemble"]) == SHARED_PODS for shard in shards)
    )


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedCluster]:
    shared = SharedCluster(tmp_path_factory.mktemp("controller-e2e"))
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture
def shared(shared_cluster: SharedCluster) -> Iterator[Harness]:
    """The shared cluster, healthy, for a test that leaves it so."""
    h = Harness(shared_cluster.healthy())
    try:
        yield h
    finally:
        h.stop_writers()
        h.stop_probes()


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Callable[..., Harness]]:
    """A cluster of the test's own (for a shape other than the shared one's)."""
    with contextlib.ExitStack() as stack:
        started: list[Harness] = []

        def start(pods: int = 3, shards: int = 4) -> Harness:
            bench = stack.enter_context(running_cluster(tmp_path / "cluster", pods, shards))
            harness = Harness(bench)
            stack.callback(harness.stop_writers)
            started.append(harness)
            return harness

        yield start


def test_a_fourth_pod_gets_shards_and_leaders_and_a_drained_pod_is_emptied_first(
    harness: Callable[..., Harness],
) -> None:
    h = harness(shards=6)
    h.bench.start_probes()
    assert h.admin().put("/v1/storage-pods", json={"replicas": 4}).status_code == 200

    def spread() -> bool:
        shards = h.shards()
        members = sum(1 for s in shards if "storage-3" in s["ensemble"])
        leaders = sum(1 for s in shards if s["leader"] == "storage-3")
        return members >= 4 and leaders >= 1 and h.bench.settled()

    _wait(spread, "shards and leaders on storage-3", harness=h)
    h.assert_one_leader_per_shard()
    # A drain by name empties a pod that stays in the pod count; undone, it
    # takes shards again.
    assert h.admin().put("/v1/nodes/storage-0/drain").status_code == 200

    def drained() -> bool:
        shards = h.shards()
        return all("storage-0" not in s["ensemble"] for s in shards) and h.bench.settled()

    _wait(drained, "storage-0 drained", harness=h)
    h.assert_one_leader_per_shard()
    assert h.admin().delete("/v1/nodes/storage-0/drain").status_code == 200
    # Back to three pods: storage-3 is drained (its shards move to the others
    # first), then released by the launcher.
    assert h.admin().put("/v1/storage-pods", json={"replicas": 3}).status_code == 200

    def released() -> bool:
        shards = h.shards()
        return (
            "storage-3" not in h.cluster.pods
            and all("storage-3" not in s["ensemble"] + s["leaving"] for s in shards)
            and h.bench.settled()
        )

    _wait(released, "storage-3 drained and released", harness=h)
    h.assert_one_leader_per_shard()
    _writes_flow(h)
    for probe in h.bench.probes.values():
        probe.stop()
    assert h.bench.verify() == _acked(h)


def test_a_leader_lost_before_a_wiped_follower_caught_up_loses_no_acknowledged_write(
    harness: Callable[..., Harness],
) -> None:
    """Writes running; one follower hung (SIGSTOP of its pod and sidecar) so it
    lags; the other killed, its disk wiped, restarted and re-added by the
    controller; the leader killed as soon as that follower holds a replica again
    (racing its catch-up); the hung follower resumed. The wiped member lost what
    it had acknowledged, so it must not count toward the next election: the
    shard either elects a member holding every committed entry or waits (the
    admin API saying why) until one is back. Every acknowledged write is read
    back at the end."""
    h = harness(shards=1)
    h.bench.start_probes()
    probe = h.bench.probes[0]
    _wait(lambda: len(probe.acked) > 50, "the probe's first writes", harness=h)
    (shard,) = h.shards()
    leader = shard["leader"]
    lagging, wiped = (name for name in shard["ensemble"] if name != leader)
    hung = h.bench.pids(lagging)
    for pid in hung:
        os.kill(pid, signal.SIGSTOP)
    try:
        acked = len(probe.acked)
        _wait(lambda: len(probe.acked) > acked + 300, "writes committed without the hung follower")
        old_storage, _ = h.bench.pids(wiped)
        os.kill(old_storage, signal.SIGKILL)
        # The launcher restarts it no sooner than half a second later.
        shutil.rmtree(h.cluster.directory / "pods" / wiped)
        (h.cluster.directory / "pods" / wiped).mkdir()

        def wiped_holds_a_replica() -> bool:
            with contextlib.suppress(Exception):
                return h.bench.pids(wiped)[0] != old_storage and bool(h.pod_statuses()[wiped])
            return False

        _wait(wiped_holds_a_replica, f"{wiped} back with a replica", harness=h)
        os.kill(h.bench.pids(leader)[0], signal.SIGKILL)
    finally:
        for pid in hung:
            os.kill(pid, signal.SIGCONT)
    _wait(lambda: h.shards()[0]["term"] > shard["term"], "an election after the leader died")
    _wait(h.bench.settled, "the shard settled again", harness=h)
    h.assert_one_leader_per_shard()
    probe.stop()
    assert h.bench.verify() == len(probe.acked) > 300


def test_leader_crashes_fail_over_and_lose_no_acknowledged_write(
    shared: Harness,
) -> None:
    """kill -9 of the pod leading the most shards, twice: each of its shards takes
    writes again within the bound, the launcher restarts the pod, it rejoins and
    catches up; everything acknowledged (our probes and the oxia client) is there."""
    h = shared
    oxia_writer = h.oxia_writer()
    try:
        h.bench.start_probes()
        for _ in range(2):
            _writes_flow(h)
            result = h.bench.one_run("crash")
            assert result.failover_ms < FAILOVER_BOUND_MS, result
            h.bench.wait_settled()
            h.assert_one_leader_per_shard()
    finally:
        oxia_writer.stop()
    _writes_flow(h)
    for probe in h.bench.probes.values():
        probe.stop()
    assert h.bench.verify() == _acked(h)
    oxia_acked = oxia_writer.acked()
    assert len(oxia_acked) > 20, oxia_writer.lines[-20:]
    # The PyPI client 0.2.1 routes by XXH64, not the map's XXH3 (see
    # cairn.common.hashing and docs/clients.md): its
    # keys are on the shards its own hash chose.
    assert h.bench.read_back(oxia_acked, oxia_key_hash) == len(oxia_acked)
    elections = h.elections_since_start()
    assert any("unreachable" in election["reason"] for election in elections), elections


def test_a_hung_pod_is_detected_by_missed_heartbeats_and_replaced_as_leader(
    shared: Harness,
) -> None:
    """SIGSTOP of a whole pod (storage and sidecar): no crash to see, only silence.
    Its shards fail over; when it continues it steps down and catches up."""
    h = shared
    oxia_writer = h.oxia_writer()
    try:
        h.bench.start_probes()
        _writes_flow(h)
        result = h.bench.one_run("hang")
        assert result.failover_ms < FAILOVER_BOUND_MS, result
        h.bench.wait_settled()
        h.assert_one_leader_per_shard()
        _writes_flow(h)
    finally:
        oxia_writer.stop()
    _writes_flow(h)
    for probe in h.bench.probes.values():
        probe.stop()
    assert h.bench.verify() == _acked(h)
    oxia_acked = oxia_writer.acked()
    assert h.bench.read_back(oxia_acked, oxia_key_hash) == len(oxia_acked)
    reasons = [e["reason"] for e in h.elections_since_start()]
    assert any(result.pod in reason and "unreachable" in reason for reason in reasons), reasons


def test_the_controller_killed_mid_election_finishes_it_after_restart(
    shared: Harness,
) -> None:
    """A leader pod and, moments later, the controller are killed; the launcher
    restarts both. The restarted controller resumes from the recorded status: the
    elections complete and no shard ends with two leaders or none."""
    h = shared
    h.bench.start_probes()
    for delay_s in (0.0, 0.05, 0.15):
        processes = json.loads((h.cluster.directory / "processes.json").read_text())
        leaders: dict[str, int] = {}
        for shard in h.shards():
            leaders[shard["leader"]] = leaders.get(shard["leader"], 0) + 1
        pod = max(leaders, key=lambda name: leaders[name])
        os.kill(processes["pods"][pod]["storage"], signal.SIGKILL)
        time.sleep(delay_s)
        os.kill(processes["controller"], signal.SIGKILL)
        h.bench.wait_settled()
        h.assert_one_leader_per_shard()
    _writes_flow(h)
    for probe in h.bench.probes.values():
        probe.stop()
    assert h.bench.verify() == _acked(h)


def _acked(h: Harness) -> int:
    """Writes the probes have had acknowledged so far."""
    return sum(len(probe.acked) for probe in h.bench.probes.values())


def _writes_flow(h: Harness, count: int = 50) -> None:
    """Wait until the probes have had `count` more writes acknowledged."""
    start = _acked(h)
    _wait(lambda: _acked(h) >= start + count, f"{count} more acknowledged writes", harness=h)


def _wait(
    condition: Callable[[], bool],
    what: str,
    timeout_s: float = 120.0,
    harness: Harness | None = None,
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            state = _state_of(harness) if harness is not None else ""
            raise AssertionError(f"timed out waiting for {what}{state}")
        time.sleep(0.2)


def _state_of(h: Harness) -> str:
    """What the controller and the pods say, for a timeout's message: which shard
    or follower is stuck, and where the logs are."""
    lines = [f"\nlogs: {h.cluster.directory}"]
    with contextlib.suppress(httpx.HTTPError):
        lines.append(f"nodes: {json.dumps(h.bench.nodes())}")
        for shard in h.shards():
            lines.append(f"shard: {json.dumps(shard)}")
    for name, replicas in h.pod_statuses().items():
        for status in replicas:
            lines.append(f"{name}: {' '.join(str(status).split())}")
    return "\n".join(lines)


def test_replication_factor_goes_3_to_1_to_3_on_a_live_namespace(
    shared: Harness,
) -> None:
    h = shared
    oxia_writer = h.oxia_writer()
    h.bench.start_probes()
    for factor in (1, 3):
        answer = h.admin().put(
            "/v1/namespaces/default/replication-factor", json={"replicationFactor": factor}
        )
        assert answer.status_code == 200, answer.text

        def reached(factor: int = factor) -> bool:
            shards = h.shards()
            return all(len(s["ensemble"]) == factor for s in shards) and h.bench.settled()

        _wait(reached, f"replication factor {factor}", harness=h)
        h.assert_one_leader_per_shard()
    # The members removed at 1 had their replicas deleted, the ones added at 3 got
    # the data: every acknowledged write reads back through every leader.
    oxia_writer.stop()
    _writes_flow(h)
    for probe in h.bench.probes.values():
        probe.stop()
    assert h.bench.verify() == _acked(h)
    oxia_acked = oxia_writer.acked()
    # 0.2.1 reads the shard map once and its puts have no deadline: after a
    # leader moves it may wait for good, so how many it got through varies.
    assert oxia_acked, oxia_writer.lines[-20:]
    assert h.bench.read_back(oxia_acked, oxia_key_hash) == len(oxia_acked)
    bad = h.admin().put("/v1/namespaces/default/replication-factor", json={"replicationFactor": 0})
    assert bad.status_code == 400 and bad.json()["code"] == "invalid-argument", bad.text
    assert (
        h.admin()
        .put("/v1/namespaces/nope/replication-factor", json={"replicationFactor": 1})
        .status_code
        == 404
    )


def test_a_pod_that_returns_wiped_is_rebuilt(shared: Harness) -> None:
    """A pod killed and restarted with an empty disk: its replicas are created
    again and rebuilt from the leaders (snapshot or log), and every shard ends
    with its full ensemble streaming."""
    h = shared
    h.bench.start_probes()
    _writes_flow(h)
    processes = json.loads((h.cluster.directory / "processes.json").read_text())
    victim = "storage-1"
    os.kill(processes["pods"][victim]["storage"], signal.SIGKILL)
    # The launcher restarts it no sooner than half a second later.
    shutil.rmtree(h.cluster.directory / "pods" / victim)
    (h.cluster.directory / "pods" / victim).mkdir()

    def restarted() -> bool:
        now = json.loads((h.cluster.directory / "processes.json").read_text())
        return bool(now["pods"][victim]["storage"] != processes["pods"][victim]["storage"])

    _wait(restarted, f"the launcher restarting {victim}", harness=h)
    h.bench.wait_settled()
    h.assert_one_leader_per_shard()
    statuses = h.pod_statuses()
    assert len(statuses[victim]) == len(h.shards()), statuses[victim]
    _writes_flow(h)
    for probe in h.bench.probes.values():
        probe.stop()
    assert h.bench.verify() == _acked(h)


def test_a_leader_moves_on_request_while_writes_flow(shared: Harness) -> None:
    h = shared
    h.bench.start_probes()
    _wait(lambda: _acked(h) >= 50, "writes flowing before the move", harness=h)
    shard = h.shards()[0]
    target = next(name for name in shard["ensemble"] if name != shard["leader"])
    answer = h.admin().post(f"/v1/shards/{shard['id']}/leader", json={"node": target})
    assert answer.status_code == 202, answer.text
    _wait(
        lambda: next(s for s in h.shards() if s["id"] == shard["id"])["leader"] == target,
        f"shard {shard['id']} led by {target}",
        timeout_s=60.0,
    )
    h.bench.wait_settled()
    h.assert_one_leader_per_shard()
    outsider = h.admin().post(f"/v1/shards/{shard['id']}/leader", json={"node": "storage-9"})
    assert outsider.status_code == 409
    assert h.admin().post("/v1/shards/999/leader", json={"node": target}).status_code == 404
    # The moved shard takes writes again, through its new leader.
    moved = h.bench.probes[shard["id"]]
    moved_at = len(moved.acked)
    _wait(lambda: len(moved.acked) >= moved_at + 20, "writes to the moved shard", harness=h)
    for probe in h.bench.probes.values():
        probe.stop()
    assert h.bench.verify() == _acked(h)
