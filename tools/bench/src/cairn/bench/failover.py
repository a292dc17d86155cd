"""Failover time, measured: kill (or hang) a leader pod of a local cluster
while every shard is written continuously, and time how long each of its shards
takes to accept a write again.

    cairn-failover --runs 10 --mode crash
    cairn-failover --runs 10 --mode hang
    cairn-failover --runs 3 --mode scale-out

A probe per shard writes keys of that shard back to back (each with a short
deadline), following NOT_LEADER redirects and retrying other pods on errors.
Failover time is from the signal to the first acknowledged write on the slowest
of the pod's shards. After each run the pod is restarted (crash: by the launcher,
as a kubelet would) or continued (hang), and the cluster is left to settle
before the next. At the end every acknowledged write is read back.

`scale-out` times rebalancing instead: from raising the pod count by one to the
new pod holding its share of members and leaders (counts within one of every
other pod's) with every shard settled, under the same write load; each run on a
fresh cluster. The controller waits `--rebalance-after-ms` (2 s here) after a
pod comes up before it moves anything (damping flapping pods); that is included.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from cairn.bench import DISTRIBUTION
from cairn.common.errors import LEADER_HINT_KEY
from cairn.common.hashing import HashRange, key_hash
from cairn.common.version import add_version_option
from cairn.controller.local.launcher import LocalCluster
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc
from cairn.proto import replication_pb2 as rpb
from cairn.proto import replication_pb2_grpc as rpb_grpc

WRITE_TIMEOUT_S = 0.5
# Successes remembered per probe (timestamps, for finding the first after a kill).
MAX_SAMPLES = 200_000
SETTLE_TIMEOUT_S = 120.0
FAILOVER_TIMEOUT_S = 60.0

# Failure detection tuned for a test cluster on one machine: heartbeats every
# 200 ms, a pod missing 1 s of them is dead.
FAST_CONTROLLER_ARGS = (
    "--heartbeat-timeout-ms=1000",
    "--status-interval-ms=500",
    "--replace-after-ms=60000",
    "--rebalance-after-ms=2000",
    "--startup-grace-ms=1500",
)
FAST_SIDECAR_ARGS = (
    "--probe-interval-ms=100",
    "--probe-timeout-ms=300",
    "--heartbeat-interval-ms=200",
    "--heartbeat-timeout-ms=500",
)


def key_in(hash_range: HashRange, prefix: str) -> str:
    """A key of the shard with this hash range (found by trying suffixes)."""
    for attempt in range(1_000_000):
        key = f"{prefix}{attempt}"
        if hash_range.contains(key_hash(key)):
            return key
    raise AssertionError(f"no key hashes into {hash_range}")


def leader_hint(error: grpc.RpcError) -> str | None:
    status = rpc_status.from_call(error)
    if status is None:
        return None
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info.metadata.get(LEADER_HINT_KEY) or None
    return None


class ShardProbe(threading.Thread):
    """Writes keys of one shard back to back; remembers what was acknowledged."""

    def __init__(self, shard: int, hash_range: HashRange, addresses: Sequence[str]) -> None:
        super().__init__(daemon=True, name=f"probe-{shard}")
        self.shard = shard
        self.hash_range = hash_range
        self.addresses = list(addresses)
        # (sent, acknowledged) times of acknowledged writes.
        self.successes: deque[tuple[float, float]] = deque(maxlen=MAX_SAMPLES)
        self.acked: dict[str, tuple[bytes, int]] = {}
        self.errors = 0
        self._stop_event = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        channels: dict[str, grpc.Channel] = {}
        target = self.addresses[0]
        counter = 0
        try:
            while not self._stop_event.is_set():
                channel = channels.get(target)
                if channel is None:
                    channel = channels[target] = grpc.insecure_channel(target)
                key = key_in(self.hash_range, f"/probe/{self.shard}/{counter}/")
                value = f"{key}@{time.time()}".encode()
                counter += 1
                request = pb.WriteRequest(
                    shard=self.shard, puts=[pb.PutRequest(key=key, value=value)]
                )
                sent = time.monotonic()
                try:
                    response = pb_grpc.OxiaClientStub(channel).Write(
                        request, timeout=WRITE_TIMEOUT_S
                    )
                except grpc.RpcError as error:
                    self.errors += 1
                    hint = leader_hint(error)
                    target = hint or random.choice(
                        [a for a in self.addresses if a != target] or [target]
                    )
                    time.sleep(0.01)
                    continue
                (put,) = response.puts
                if put.status == pb.OK:
                    with self._lock:
                        self.successes.append((sent, time.monotonic()))
                        self.acked[key] = (value, put.version.version_id)
        finally:
            for channel in channels.values():
                channel.close()

    def first_success_after(self, moment: float) -> float | None:
        """When the first write sent after `moment` was acknowledged (a write
        sent before it may be answered after it by the old leader: not a
        failover)."""
        with self._lock:
            return next((acked for sent, acked in self.successes if sent > moment), None)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)


@dataclass
class RunResult:
    mode: str
    pod: str
    shards: list[int]
    failover_ms: float
    per_shard_ms: dict[int, float] = field(default_factory=dict)


class FailoverBench:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        # The local cluster's admin token: its admin API needs one (local/auth.py).
        headers = (
            {"Authorization": f"Bearer {cluster.auth.admin_token.read_text().strip()}"}
            if cluster.auth is not None
            else {}
        )
        self.http = httpx.Client(base_url=cluster.controller_url, timeout=5.0, headers=headers)
        self.probes: dict[int, ShardProbe] = {}

    def close(self) -> None:
        for probe in self.probes.values():
            probe.stop()
        self.http.close()

    def shards(self) -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = self.http.get("/v1/shards").raise_for_status().json()
        return answer

    def nodes(self) -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = self.http.get("/v1/nodes").raise_for_status().json()
        return answer

    def settled(self) -> bool:
        try:
            shards, nodes = self.shards(), self.nodes()
        except httpx.HTTPError:
            return False
        if not shards or not all(node["alive"] for node in nodes if node["wanted"]):
            return False
        for shard in shards:
            followers = shard["followers"]
            if shard["state"] != "steady" or shard["leaving"]:
                return False
            if len(followers) != len(shard["ensemble"]) - 1:
                return False
            if not all(f["voting"] and f["state"] == "streaming" for f in followers):
                return False
        return True

    def wait_settled(self, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.settled():
            if time.monotonic() > deadline:
                raise TimeoutError(f"cluster did not settle: {self._unsettled_report()}")
            time.sleep(0.2)

    def _unsettled_report(self) -> str:
        """What an unsettled cluster looks like: shards, nodes, and the last log
        lines of each process that had to be restarted."""
        try:
            views = json.dumps({"shards": self.shards(), "nodes": self.nodes()})[:2000]
        except httpx.HTTPError as error:
            views = f"(controller unreachable: {error})"
        restarted = [
            child
            for pair in self.cluster.pods.values()
            for child in pair
            if child.restarts or child.exited() is not None
        ]
        tails = [
            f"\n--- {child.name} (restarts {child.restarts}):\n{_log_tail(child.log_path)}"
            for child in restarted
        ]
        return views + "".join(tails)

    def start_probes(self) -> None:
        addresses = [self.cluster.public_address(name) for name in sorted(self.cluster.pods)]
        for shard in self.shards():
            low, high = shard["hashRange"]
            probe = ShardProbe(shard["id"], HashRange(low, high), addresses)
            probe.start()
            self.probes[shard["id"]] = probe

    def pod_statuses(self) -> dict[str, list[rpb.ShardStatus]]:
        """Every live pod's own view of its replicas (GetStatus on its internal port)."""
        answer = {}
        cluster = self.cluster
        for name in sorted(cluster.pods):
            internal = f"{cluster.host}:{cluster.ports.pods[name].internal}"
            with grpc.insecure_channel(internal) as channel:
                try:
                    reply = rpb_grpc.CoordinationStub(channel).GetStatus(
                        rpb.GetStatusRequest(), timeout=5
                    )
                except grpc.RpcError:
                    continue
                answer[name] = list(reply.shards)
        return answer

    def pids(self, pod: str) -> tuple[int, int]:
        document = json.loads((self.cluster.directory / "processes.json").read_text())
        entry = document["pods"][pod]
        return int(entry["storage"]), int(entry["health"])

    def one_run(self, mode: str) -> RunResult:
        leaders: dict[str, list[int]] = {}
        for record in self.shards():
            leaders.setdefault(record["leader"], []).append(record["id"])
        pod = max(leaders, key=lambda name: (len(leaders[name]), random.random()))
        led = sorted(leaders[pod])
        storage_pid, health_pid = self.pids(pod)
        moment = time.monotonic()
        if mode == "crash":
            os.kill(storage_pid, signal.SIGKILL)
        else:
            os.kill(storage_pid, signal.SIGSTOP)
            os.kill(health_pid, signal.SIGSTOP)
        per_shard: dict[int, float] = {}
        deadline = moment + FAILOVER_TIMEOUT_S
        try:
            while len(per_shard) < len(led):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"shards {led} of {pod} did not fail over: {per_shard}")
                for shard in led:
                    if shard not in per_shard:
                        first = self.probes[shard].first_success_after(moment)
                        if first is not None:
                            per_shard[shard] = (first - moment) * 1000
                time.sleep(0.01)
        finally:
            if mode == "hang":
                os.kill(storage_pid, signal.SIGCONT)
                os.kill(health_pid, signal.SIGCONT)
        return RunResult(mode, pod, led, max(per_shard.values()), per_shard)

    def verify(self) -> int:
        """Read back every write the probes had acknowledged; how many."""
        acked: dict[str, tuple[bytes, int]] = {}
        for probe in self.probes.values():
            acked.update(probe.acked)
        return self.read_back(acked)

    def read_back(
        self,
        acked: dict[str, tuple[bytes, int]],
        hash_key: Callable[[str], int] = key_hash,
    ) -> int:
        """Check that every acknowledged write is there, with its value and
        version, read through its shard's leader; how many were checked.
        `hash_key` is the writer's routing hash (the shard is the one it chose)."""
        shards = [(s["id"], HashRange(*s["hashRange"])) for s in self.shards()]
        by_shard: dict[int, list[str]] = {}
        for key in acked:
            hashed = hash_key(key)
            shard = next(shard for shard, bounds in shards if bounds.contains(hashed))
            by_shard.setdefault(shard, []).append(key)
        addresses = [self.cluster.public_address(name) for name in sorted(self.cluster.pods)]
        checked = 0
        for shard, keys in sorted(by_shard.items()):
            keys.sort()
            for start in range(0, len(keys), 500):
                batch = keys[start : start + 500]
                for got, key in zip(self._read(shard, batch, addresses), batch, strict=True):
                    value, version = acked[key]
                    if got.status != pb.OK or got.value != value:
                        raise AssertionError(f"acknowledged write {key} lost or changed")
                    if got.version.version_id != version:
                        raise AssertionError(f"acknowledged write {key} has another version")
                    checked += 1
        return checked

    def _read(self, shard: int, keys: list[str], addresses: list[str]) -> list[pb.GetResponse]:
        request = pb.ReadRequest(
            shard=shard, gets=[pb.GetRequest(key=key, include_value=True) for key in keys]
        )
        target = addresses[0]
        for _ in range(len(addresses) * 5):
            try:
                with grpc.insecure_channel(target) as channel:
                    stub = pb_grpc.OxiaClientStub(channel)
                    return [get for chunk in stub.Read(request, timeout=10) for get in chunk.gets]
            except grpc.RpcError as error:
                target = leader_hint(error) or random.choice(addresses)
                time.sleep(0.05)
        raise TimeoutError(f"shard {shard}: no leader answered reads")


def balanced(shards: Sequence[dict[str, Any]], pods: Sequence[str]) -> bool:
    members = {pod: sum(1 for s in shards if pod in s["ensemble"]) for pod in pods}
    leaders = {pod: sum(1 for s in shards if s["leader"] == pod) for pod in pods}
    return (
        max(members.values()) - min(members.values()) <= 1
        and max(leaders.values()) - min(leaders.values()) <= 1
    )


@contextlib.contextmanager
def running_cluster(
    directory: Path, pods: int, shards: int, auth: bool = False
) -> Iterator[FailoverBench]:
    """A local cluster tuned for quick detection, supervised (restarts, scaling)
    from a thread as `cairn-local` would, settled, with a bench on it. Without
    auth by default: the bench's writers include the released oxia client, which
    sends no token (its admin calls carry the admin token when `auth`)."""
    cluster = LocalCluster(
        directory,
        pods=pods,
        shards=shards,
        auth=auth,
        controller_args=FAST_CONTROLLER_ARGS,
        sidecar_args=FAST_SIDECAR_ARGS,
        preferred_ports=False,
        # Its probes dial plaintext channels; the cost of failover is measured without TLS.
        tls=False,
        # Nothing here goes through the REST gateway (the admin API is the controller's).
        gateway=False,
    )
    stop = threading.Event()

    def supervise() -> None:
        while not stop.is_set():
            cluster.supervise_once()
            time.sleep(0.1)

    cluster.start()
    supervisor = threading.Thread(target=supervise, daemon=True)
    supervisor.start()
    bench = FailoverBench(cluster)
    try:
        bench.wait_settled()
        yield bench
    finally:
        bench.close()
        stop.set()
        supervisor.join()
        cluster.stop()


def scale_out_once(directory: Path, pods: int, shards: int) -> float:
    """Seconds from asking for one more pod to a balanced, settled cluster."""
    with running_cluster(directory, pods, shards) as bench:
        bench.start_probes()
        time.sleep(2.0)
        names = [f"storage-{i}" for i in range(pods + 1)]
        started = time.monotonic()
        bench.http.put("/v1/storage-pods", json={"replicas": pods + 1}).raise_for_status()
        deadline = started + SETTLE_TIMEOUT_S
        while not (bench.settled() and balanced(bench.shards(), names)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no balance after scaling out: {bench.shards()}")
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        for probe in bench.probes.values():
            probe.stop()
        bench.verify()
        return elapsed


def summarize(results: Sequence[RunResult]) -> str:
    times = [result.failover_ms for result in results]
    lines = [
        f"  run {i + 1:2d}: {r.mode} {r.pod} (leading shards {r.shards}): {r.failover_ms:7.1f} ms"
        for i, r in enumerate(results)
    ]
    lines.append(
        f"failover ({results[0].mode}), {len(times)} runs:"
        f" median {statistics.median(times):.1f} ms,"
        f" max {max(times):.1f} ms, min {min(times):.1f} ms"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="cairn-failover", description=__doc__.split("\n")[0])
    add_version_option(parser, DISTRIBUTION)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--mode", choices=["crash", "hang", "scale-out"], default="crash")
    parser.add_argument("--pods", type=int, default=3)
    parser.add_argument("--shards", type=int, default=6)
    parser.add_argument("--dir", type=Path, default=None, help="cluster directory (default: temp)")
    args = parser.parse_args(argv)
    if args.mode == "scale-out":
        times = []
        for run in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="cairn-scale-") as temporary:
                times.append(scale_out_once(Path(temporary), args.pods, args.shards))
            print(f"  run {run + 1:2d}: {args.pods} -> {args.pods + 1} pods: {times[-1]:.2f} s")
        print(
            f"rebalance after adding a pod, {len(times)} runs: median"
            f" {statistics.median(times):.2f} s, max {max(times):.2f} s"
            f" (includes the {FAST_CONTROLLER_ARGS[3].split('=')[1]} ms damping delay)"
        )
        return
    with tempfile.TemporaryDirectory(prefix="cairn-failover-") as temporary:
        directory = args.dir or Path(temporary)
        with running_cluster(directory, args.pods, args.shards) as bench:
            bench.start_probes()
            results = []
            for _ in range(args.runs):
                time.sleep(1.0)
                results.append(bench.one_run(args.mode))
                print(f"  {results[-1].pod}: {results[-1].failover_ms:.1f} ms", flush=True)
                bench.wait_settled()
            for probe in bench.probes.values():
                probe.stop()
            checked = bench.verify()
            print(summarize(results))
            print(f"acknowledged writes read back: {checked} (all present)")


if __name__ == "__main__":
    main()


def _log_tail(path: Path, lines: int = 8) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as error:
        return f"(no log: {error})"
