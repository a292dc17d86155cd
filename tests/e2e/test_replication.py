"""Replication with real processes: three storage pods (`cairn-storage node`) and a
test driver that plays the controller through the coordination API.

Writers put unique keys (our own gRPC calls, and the unmodified `oxia` PyPI
client in a process of its own) while the leader is killed with SIGKILL at random
moments; each time the driver fences the survivors, elects the highest head and
restarts the dead pod on its old ports, where it rejoins as a follower. At the end
every acknowledged write is on the last leader with its value and version, and
every replica's KV compares equal, byte for byte.
"""

from __future__ import annotations

import asyncio
import random
import re
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import oxia
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from cairn.client.client import AsyncClient
from cairn.client.options import ClientOptions
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc
from cairn.proto import replication_pb2 as rpb
from cairn.storage.core.meta import INCARNATION_KEY, LOG_BASE_KEY, TERM_KEY
from cairn.storage.kv import Column, RocksKv
from support.driver import Driver
from support.oxia_writer import OxiaWriter
from support.processes import NodeProcess
from support.promtool import samples, scrape

pytestmark = pytest.mark.e2e

SHARD = 0
SESSION_TIMEOUT_MS = 4000
# Small segments and retention so that leaders trim their logs within seconds.
SMALL_WAL = ("--wal-segment-bytes", "65536", "--wal-retention-bytes", "262144")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Callable[..., list[NodeProcess]]]:
    started: list[NodeProcess] = []

    def start(count: int = 3, *extra: str) -> list[NodeProcess]:
        nodes = [NodeProcess(tmp_path / f"node-{i}", tuple(extra)) for i in range(count)]
        for node in nodes:
            node.start()
        started.extend(nodes)
        return nodes

    yield start
    for node in started:
        node.kill()


class Writers:
    """Threads putting unique keys to the current leader; remembers what was
    acknowledged (key -> (value, version))."""

    def __init__(self, driver: Driver, count: int = 3) -> None:
        self.driver = driver
        self.acked: dict[str, tuple[bytes, int]] = {}
        self.failures = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(index,), daemon=True) for index in range(count)
        ]

    def __enter__(self) -> Writers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _run(self, index: int) -> None:
        counter = 0
        channels: dict[str, grpc.Channel] = {}
        while not self._stop.is_set():
            leader = self.driver.shards[SHARD].leader
            assert leader is not None
            channel = channels.get(leader.address)
            if channel is None:
                channel = channels[leader.address] = grpc.insecure_channel(leader.address)
            key = f"/w{index}/{counter:06d}"
            value = f"{key}:{random.random()}".encode()
            counter += 1
            request = pb.WriteRequest(shard=SHARD, puts=[pb.PutRequest(key=key, value=value)])
            try:
                response = pb_grpc.OxiaClientStub(channel).Write(request, timeout=2)
            except grpc.RpcError:
                with self._lock:
                    self.failures += 1
                time.sleep(0.05)
                continue
            (put,) = response.puts
            assert put.status == pb.OK
            with self._lock:
                self.acked[key] = (value, put.version.version_id)
        for channel in channels.values():
            channel.close()

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def wait_for_more(self, extra: int, stall_s: float = 30.0) -> None:
        """Until `extra` more writes were acknowledged; fails if none is for `stall_s`
        (a stall; how long they all take depends on how busy the machine is)."""
        target = self.count() + extra
        seen = self.count()
        deadline = time.monotonic() + stall_s
        while seen < target:
            time.sleep(0.02)
            if self.count() > seen:
                seen = self.count()
                deadline = time.monotonic() + stall_s
            assert time.monotonic() < deadline, f"writes stalled at {seen}"


def read_all(address: str, keys: list[str]) -> dict[str, pb.GetResponse]:
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.OxiaClientStub(channel)
        found: dict[str, pb.GetResponse] = {}
        for start in range(0, len(keys), 500):
            batch = keys[start : start + 500]
            request = pb.ReadRequest(
                shard=SHARD, gets=[pb.GetRequest(key=key, include_value=True) for key in batch]
            )
            responses = [get for chunk in stub.Read(request, timeout=30) for get in chunk.gets]
            found.update(zip(batch, responses, strict=True))
        return found


def assert_acknowledged_present(address: str, acked: dict[str, tuple[bytes, int]]) -> None:
    found = read_all(address, sorted(acked))
    for key, (value, version) in acked.items():
        got = found[key]
        assert got.status == pb.OK, f"acknowledged {key} is missing"
        assert got.value == value and got.version.version_id == version, key


def kv_contents(data_dir: Path) -> tuple[dict[bytes, bytes], dict[bytes, bytes]]:
    """Both columns of the shard's KV; the term, log base and incarnation are per
    replica."""
    kv = RocksKv(data_dir / "shards" / str(SHARD) / "kv")
    try:
        records = dict(kv.scan(Column.RECORDS, b"", None))
        meta = dict(kv.scan(Column.META, b"", None))
    finally:
        kv.close()
    for per_replica in (TERM_KEY, LOG_BASE_KEY, INCARNATION_KEY):
        meta.pop(per_replica, None)
    return records, meta


def assert_replicas_equal(driver: Driver, nodes: list[NodeProcess]) -> None:
    driver.wait_caught_up(SHARD)
    for node in nodes:
        assert node.stop() == 0
    contents = [kv_contents(node.data_dir) for node in nodes]
    assert contents[0][0], "no records"
    for other in contents[1:]:
        assert other == contents[0]


def wait_for_trim(driver: Driver, leader: NodeProcess, after: int) -> None:
    """Until the leader's WAL starts past offset `after`."""
    deadline = time.monotonic() + 60
    while driver.status(leader, SHARD).first_offset <= after:
        assert time.monotonic() < deadline, "the leader never trimmed its WAL"
        time.sleep(0.2)


def test_leader_killed_at_random_moments_loses_no_acknowledged_write(
    cluster: Callable[..., list[NodeProcess]],
) -> None:
    nodes = cluster(3)
    driver = Driver()
    rng = random.Random(7)
    oxia_writer: OxiaWriter | None = None
    try:
        driver.elect(SHARD, nodes)
        driver.push_map(nodes)
        # The PyPI client, unchanged, against the replicated shard.
        with oxia.Client(driver.shards[SHARD].leader.address) as client:  # type: ignore[union-attr]
            _, version = client.put("/oxia/first", b"one")
            _, value, got = client.get("/oxia/first")
            assert (value, got.version_id()) == (b"one", version.version_id())
        kills = 5
        oxia_writer = OxiaWriter([node.address for node in nodes])
        oxia_writer.wait_until_writing()
        with Writers(driver) as writers:
            writers.wait_for_more(200)
            for _ in range(kills):
                time.sleep(rng.uniform(0.1, 1.0))
                victim = driver.shards[SHARD].leader
                assert victim is not None
                victim.kill()
                started = time.monotonic()
                driver.elect(SHARD)
                driver.push_map([n for n in nodes if n is not victim])
                writers.wait_for_more(50)
                driver.shards[SHARD].elections.append(time.monotonic() - started)
                victim.start()  # same ports: the ensemble knows it by them
            writers.wait_for_more(200)
        oxia_writer.stop()
        leader = driver.shards[SHARD].leader
        assert leader is not None
        assert writers.count() > 1000
        assert_acknowledged_present(leader.address, writers.acked)
        oxia_acked = oxia_writer.acked()
        assert len(oxia_acked) > 100, oxia_writer.lines[-20:]
        # It felt the failovers and went on writing through a new client.
        lines = oxia_writer.lines
        failed_at = next(i for i, line in enumerate(lines) if line.startswith("ERR"))
        assert any(line.startswith("ACK") for line in lines[failed_at:])
        assert_acknowledged_present(leader.address, oxia_acked)
        with oxia.Client(leader.address) as client:
            _, value, got = client.get("/oxia/first")
            assert (value, got.version_id()) == (b"one", version.version_id())
            client.put("/oxia/after", b"two")
        assert_replicas_equal(driver, nodes)
    finally:
        if oxia_writer is not None:
            oxia_writer.stop()
        driver.close()


def test_a_wiped_follower_is_rebuilt_from_a_snapshot_while_writes_continue(
    cluster: Callable[..., list[NodeProcess]],
) -> None:
    nodes = cluster(3, *SMALL_WAL)
    driver = Driver()
    try:
        leader = driver.elect(SHARD, nodes)
        driver.push_map(nodes)
        follower = next(node for node in nodes if node is not leader)
        with Writers(driver) as writers:
            writers.wait_for_more(3000)  # well past the leader's WAL retention
            wait_for_trim(driver, leader, after=0)
            driver.remove_follower(SHARD, follower)
            follower.kill()
            shutil.rmtree(follower.data_dir)
            follower.start()
            driver.add_follower(SHARD, follower)
            writers.wait_for_more(500)
        driver.wait_caught_up(SHARD)
        assert "installed a snapshot" in follower.log_text(), leader.log_text()[-3000:]
        assert_acknowledged_present(leader.address, writers.acked)
        assert_replicas_equal(driver, nodes)
    finally:
        driver.close()


def test_a_paused_follower_catches_up_by_snapshot_after_the_leader_trimmed(
    cluster: Callable[..., list[NodeProcess]],
) -> None:
    nodes = cluster(3, *SMALL_WAL)
    driver = Driver()
    try:
        leader = driver.elect(SHARD, nodes)
        driver.push_map(nodes)
        follower = next(node for node in nodes if node is not leader)
        with Writers(driver) as writers:
            writers.wait_for_more(300)
            follower.signal(signal.SIGSTOP)
            # Writes go on with a majority of two; wait until the leader trimmed
            # past what the paused follower has.
            wait_for_trim(driver, leader, after=driver.status(leader, SHARD).head.offset)
            follower.signal(signal.SIGCONT)
            writers.wait_for_more(300)
        driver.wait_caught_up(SHARD)
        assert "installed a snapshot" in follower.log_text()
        assert_acknowledged_present(leader.address, writers.acked)
        # The leader's metrics tell the snapshot it sent, and its WAL appends (read
        # before the replicas are compared: that stops the pods).
        page = scrape(_metrics_address(leader.log_text()))
        for name in (
            "cairn_snapshot_sent_total",
            "cairn_snapshot_sent_completed_total",
            "cairn_snapshot_send_duration_seconds_count",
        ):
            assert sum(samples(page, name).values()) >= 1, name
        assert sum(samples(page, "cairn_snapshot_sent_bytes_total").values()) > 0
        assert sum(samples(page, "cairn_wal_append_duration_seconds_count").values()) >= 300
        assert_replicas_equal(driver, nodes)
    finally:
        driver.close()


def test_a_restarted_leader_commits_although_its_followers_lag_past_the_window(
    cluster: Callable[..., list[NodeProcess]],
) -> None:
    """A follower paused while the leader commits thousands of entries with the
    other; that other loses its disk; the leader is killed and restarts knowing
    little of what it committed (its KV had not flushed). Elected again (it holds
    everything), its followers lag by more than twice the send window, and its
    term's first entry lies past all of it: the shard must serve again within
    seconds of the majority being up, with every acknowledged write."""
    window = 1024  # ReplicationSettings.max_in_flight_entries
    nodes = cluster(3)
    driver = Driver()
    try:
        leader = driver.elect(SHARD, nodes)
        driver.push_map(nodes)
        paused, wiped = (node for node in nodes if node is not leader)
        with Writers(driver, count=6) as writers:
            writers.wait_for_more(100)
            paused_head = driver.status(paused, SHARD).head.offset
            paused.signal(signal.SIGSTOP)
            deadline = time.monotonic() + 120
            while driver.status(leader, SHARD).head.offset < paused_head + 2 * window + 500:
                assert time.monotonic() < deadline, "the leader never logged enough entries"
                time.sleep(0.1)
        wiped.kill()
        shutil.rmtree(wiped.data_dir)
        wiped.start()
        leader.kill()
        leader.start()
        paused.signal(signal.SIGCONT)
        assert driver.elect(SHARD) is leader
        restarted = driver.status(leader, SHARD)
        assert restarted.head.offset - max(paused_head, restarted.commit_offset) > 2 * window
        driver.push_map(nodes)
        with grpc.insecure_channel(leader.address) as channel:
            stub = pb_grpc.OxiaClientStub(channel)
            request = pb.WriteRequest(shard=SHARD, puts=[pb.PutRequest(key="/after", value=b"x")])
            # Only the live-lock keeps it failing: a bound far above the catch-up
            # of a few thousand small entries.
            deadline = time.monotonic() + 60
            answer: pb.WriteResponse | grpc.RpcError | None = None
            while not isinstance(answer, pb.WriteResponse) and time.monotonic() < deadline:
                try:
                    answer = stub.Write(request, timeout=5)
                except grpc.RpcError as error:
                    answer = error
                    time.sleep(0.2)
            assert isinstance(answer, pb.WriteResponse), f"the shard never served: {answer}"
            assert [put.status for put in answer.puts] == [pb.OK]
        assert_acknowledged_present(leader.address, writers.acked)
        assert_replicas_equal(driver, nodes)
    finally:
        driver.close()


def test_writes_folded_while_followers_pause_replicate_and_apply_alike(
    cluster: Callable[..., list[NodeProcess]],
) -> None:
    """Both followers paused: nothing commits, so after two entries the leader
    folds what comes. Resumed, the folds commit, every request is answered with
    its own version, and the followers (which apply FOLDED_WRITES entries from
    the stream) end with exactly the leader's records."""
    nodes = cluster(3)
    driver = Driver()
    try:
        leader = driver.elect(SHARD, nodes)
        driver.push_map(nodes)
        followers = [node for node in nodes if node is not leader]
        for follower in followers:
            follower.signal(signal.SIGSTOP)
        requests = [
            pb.WriteRequest(
                shard=SHARD,
                puts=[pb.PutRequest(key=f"/fold/{i}/{j}", value=b"v%d" % i) for j in range(3)],
            )
            for i in range(12)
        ]
        with grpc.insecure_channel(leader.address) as channel:
            stub = pb_grpc.OxiaClientStub(channel)
            pending = [stub.Write.future(request, timeout=60) for request in requests]
            time.sleep(1.0)  # all in: two entries logged, the rest folded
            assert not any(future.done() for future in pending)
            for follower in followers:
                follower.signal(signal.SIGCONT)
            answers = [future.result() for future in pending]
        versions = [
            {put.status for put in answer.puts} == {pb.OK} and answer.puts[0].version.version_id
            for answer in answers
        ]
        assert all(versions), answers
        # Fewer distinct versions than requests: requests shared entries.
        assert len(set(versions)) < len(requests)
        assert_replicas_equal(driver, nodes)
        records = kv_contents(leader.data_dir)[0]
        assert sum(1 for key in records if b"fold" in key) == 12 * 3
    finally:
        driver.close()


def test_sessions_notifications_and_sequences_carry_over_a_failover(
    cluster: Callable[..., list[NodeProcess]],
) -> None:
    """The new leader holds the old leader's sessions (with a fresh full timeout),
    its ephemeral records, its stored notifications and its sequence counters."""
    nodes = cluster(3)
    driver = Driver()
    try:
        old = driver.elect(SHARD, nodes)
        driver.push_map(nodes)
        with grpc.insecure_channel(old.address) as channel:
            stub = pb_grpc.OxiaClientStub(channel)
            kept, silent = (
                stub.CreateSession(
                    pb.CreateSessionRequest(
                        shard=SHARD, session_timeout_ms=SESSION_TIMEOUT_MS, client_identity=name
                    )
                ).session_id
                for name in ("kept", "silent")
            )
            before = stub.Write(
                pb.WriteRequest(
                    shard=SHARD,
                    puts=[
                        pb.PutRequest(key="/eph/kept", value=b"k", session_id=kept),
                        pb.PutRequest(key="/eph/silent", value=b"s", session_id=silent),
                        pb.PutRequest(
                            key="/seq", value=b"1", partition_key="p", sequence_key_delta=[1]
                        ),
                    ],
                )
            )
            assert [put.status for put in before.puts] == [pb.OK] * 3
            first_offset = before.puts[0].version.version_id
            # Both sessions were heartbeaten until the leader died.
            for session in (kept, silent):
                stub.KeepAlive(pb.SessionHeartbeat(shard=SHARD, session_id=session))
        # Heartbeats go to the new leader; the silent session gets none.
        old.kill()
        new = driver.elect(SHARD)
        elected_at = time.monotonic()
        driver.push_map([n for n in nodes if n is not old])
        with grpc.insecure_channel(new.address) as channel:
            stub = pb_grpc.OxiaClientStub(channel)
            got = read_all(new.address, ["/eph/kept", "/eph/silent"])
            assert got["/eph/kept"].version.session_id == kept
            assert got["/eph/silent"].status == pb.OK
            # The sequence counter continues from the stored key.
            after = stub.Write(
                pb.WriteRequest(
                    shard=SHARD,
                    puts=[
                        pb.PutRequest(
                            key="/seq", value=b"2", partition_key="p", sequence_key_delta=[1]
                        )
                    ],
                )
            )
            assert after.puts[0].key == "/seq-" + f"{2:020d}"
            # Notifications written under the old leader are served by the new one.
            call = stub.GetNotifications(
                pb.NotificationsRequest(shard=SHARD, start_offset_exclusive=first_offset - 1)
            )
            batch = next(call)
            call.cancel()
            assert batch.offset == first_offset
            assert set(batch.notifications) >= {"/eph/kept", "/eph/silent"}
            deadline = time.monotonic() + 15
            while read_all(new.address, ["/eph/silent"])["/eph/silent"].status == pb.OK:
                stub.KeepAlive(pb.SessionHeartbeat(shard=SHARD, session_id=kept))
                assert time.monotonic() < deadline, "the silent session never expired"
                time.sleep(0.3)
            # A full timeout from the new leader's start, not from the last
            # heartbeat the old leader saw.
            assert time.monotonic() - elected_at >= SESSION_TIMEOUT_MS / 1000
            assert read_all(new.address, ["/eph/kept"])["/eph/kept"].status == pb.OK
            stub.CloseSession(pb.CloseSessionRequest(shard=SHARD, session_id=kept))
            assert read_all(new.address, ["/eph/kept"])["/eph/kept"].status == pb.KEY_NOT_FOUND
    finally:
        driver.close()


def test_followers_and_fenced_replicas_redirect_clients_to_the_leader(
    cluster: Callable[..., list[NodeProcess]],
) -> None:
    """Reads and writes sent to a follower fail with NODE_IS_NOT_LEADER and the
    leader's address in the ErrorInfo metadata (what Oxia clients redirect by);
    a replica fenced by a newer term refuses the old leader's entries."""
    nodes = cluster(3)
    driver = Driver()
    try:
        leader = driver.elect(SHARD, nodes)
        driver.push_map(nodes)
        # A follower learns its leader's address from the leader's first message;
        # until then it refuses without a hint (a fresh-clone run caught that race).
        driver.wait_caught_up(SHARD)
        follower = next(node for node in nodes if node is not leader)
        with grpc.insecure_channel(follower.address) as channel:
            stub = pb_grpc.OxiaClientStub(channel)
            for call in (
                lambda: list(
                    stub.Read(pb.ReadRequest(shard=SHARD, gets=[pb.GetRequest(key="/a")]))
                ),
                lambda: stub.Write(
                    pb.WriteRequest(shard=SHARD, puts=[pb.PutRequest(key="/a", value=b"v")])
                ),
            ):
                with pytest.raises(grpc.RpcError) as raised:
                    call()
                error = raised.value
                assert isinstance(error, grpc.Call)
                assert error.code() == grpc.StatusCode.UNAVAILABLE
                status = rpc_status.from_call(error)
                assert status is not None
                info = error_details_pb2.ErrorInfo()
                assert status.details[0].Unpack(info)
                assert info.reason == "NODE_IS_NOT_LEADER"
                assert info.metadata["leader"] == leader.address
        # Fencing: a follower fenced at a newer term refuses the old leader's entries
        # (an older term is refused too); with one follower fenced the leader still
        # commits with the other, with both fenced it cannot commit at all.
        stale_term = driver.shards[SHARD].term
        fenced, other = [node for node in nodes if node is not leader]
        epoch = driver.epoch
        driver.stub(fenced).NewTerm(
            rpb.NewTermRequest(shard=SHARD, term=stale_term + 1, controller_epoch=epoch), timeout=5
        )
        with pytest.raises(grpc.RpcError) as refused:
            driver.stub(fenced).NewTerm(
                rpb.NewTermRequest(shard=SHARD, term=stale_term, controller_epoch=epoch), timeout=5
            )
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION  # type: ignore[attr-defined]
        with grpc.insecure_channel(leader.address) as channel:
            stub = pb_grpc.OxiaClientStub(channel)
            put = pb.WriteRequest(shard=SHARD, puts=[pb.PutRequest(key="/after", value=b"1")])
            offset = stub.Write(put, timeout=10).puts[0].version.version_id
            assert driver.status(fenced, SHARD).head.offset < offset
            assert driver.status(other, SHARD).head.offset >= offset
            driver.stub(other).NewTerm(
                rpb.NewTermRequest(shard=SHARD, term=stale_term + 1, controller_epoch=epoch),
                timeout=5,
            )
            with pytest.raises(grpc.RpcError) as unanswered:
                stub.Write(put, timeout=2)
            assert unanswered.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED  # type: ignore[attr-defined]
    finally:
        driver.close()


def test_a_hung_leader_that_resumes_after_a_new_term_commits_nothing_more(
    cluster: Callable[..., list[NodeProcess]],
) -> None:
    """A leader hangs (SIGSTOP); its followers are fenced and one of them leads a
    newer term, writing far past the old leader's head. When the old leader
    resumes, nothing the followers report about the new term may count as an
    acknowledgement of its own entries at the same offsets: it commits nothing
    beyond what they held when fenced, and answers no write as done (a write it
    did answer would be lost: the new leader's log holds other entries there)."""
    nodes = cluster(3)
    driver = Driver()
    try:
        old = driver.elect(SHARD, nodes)
        new, other = [node for node in nodes if node is not old]
        with Writers(driver, count=4) as writers:
            writers.wait_for_more(200)
        assert old.process is not None
        old.process.send_signal(signal.SIGSTOP)
        try:
            term = driver.shards[SHARD].term + 1
            spec = rpb.ShardSpec(namespace="default")
            fenced_heads = [
                driver.stub(node)
                .NewTerm(
                    rpb.NewTermRequest(
                        shard=SHARD, term=term, spec=spec, controller_epoch=driver.epoch
                    ),
                    timeout=5,
                )
                .head.offset
                for node in (new, other)
            ]
            driver.stub(new).BecomeLeader(
                rpb.BecomeLeaderRequest(
                    shard=SHARD,
                    term=term,
                    controller_epoch=driver.epoch,
                    leader=rpb.Node(
                        public_address=new.address, internal_address=new.internal_address
                    ),
                    followers=[
                        rpb.Node(
                            public_address=other.address, internal_address=other.internal_address
                        )
                    ],
                ),
                timeout=5,
            )
            with grpc.insecure_channel(new.address) as channel:
                stub = pb_grpc.OxiaClientStub(channel)
                for index in range(300):
                    request = pb.WriteRequest(
                        shard=SHARD, puts=[pb.PutRequest(key=f"/new/{index}", value=b"n")]
                    )
                    assert stub.Write(request, timeout=10).puts[0].status == pb.OK
        finally:
            old.process.send_signal(signal.SIGCONT)
        answered = 0
        with grpc.insecure_channel(old.address) as channel:
            stub = pb_grpc.OxiaClientStub(channel)
            for index in range(10):
                request = pb.WriteRequest(
                    shard=SHARD, puts=[pb.PutRequest(key=f"/stale/{index}", value=b"s")]
                )
                try:
                    stub.Write(request, timeout=0.5)
                    answered += 1
                except grpc.RpcError:
                    pass
        status = driver.status(old, SHARD)
        assert answered == 0, f"the old leader answered {answered} writes it could not commit"
        assert status.commit_offset <= max(fenced_heads), (status.commit_offset, fenced_heads)
    finally:
        driver.close()


def test_a_leader_partitioned_past_its_lease_answers_no_stale_read(
    cluster: Callable[..., list[NodeProcess]],
) -> None:
    """A leader hangs (SIGSTOP) and is not told that a newer term began: the new
    leader takes over (waiting out the old lease) and a key changes. When the old
    leader resumes, a read it answers must not return the old value: reads are
    linearizable, so it answers only while a majority still follows it, and that
    majority now follows the new leader."""
    nodes = cluster(3)
    driver = Driver()
    try:
        old = driver.elect(SHARD, nodes)
        driver.push_map(nodes)
        put = pb.WriteRequest(shard=SHARD, puts=[pb.PutRequest(key="/lock", value=b"old")])
        get = pb.ReadRequest(shard=SHARD, gets=[pb.GetRequest(key="/lock", include_value=True)])
        with grpc.insecure_channel(old.address) as channel:
            assert pb_grpc.OxiaClientStub(channel).Write(put, timeout=10).puts[0].status == pb.OK
        old.signal(signal.SIGSTOP)
        try:
            new = driver.elect(SHARD, [node for node in nodes if node is not old])
            assert new is not old
            changed = pb.WriteRequest(shard=SHARD, puts=[pb.PutRequest(key="/lock", value=b"new")])
            with grpc.insecure_channel(new.address) as channel:
                stub = pb_grpc.OxiaClientStub(channel)
                assert stub.Write(changed, timeout=30).puts[0].status == pb.OK
        finally:
            old.signal(signal.SIGCONT)
        answers: list[bytes] = []
        failures = 0
        with grpc.insecure_channel(old.address) as channel:
            stub = pb_grpc.OxiaClientStub(channel)
            for _ in range(5):
                try:
                    (chunk,) = list(stub.Read(get, timeout=1.0))
                    answers.append(chunk.gets[0].value)
                except grpc.RpcError:
                    failures += 1
        assert b"old" not in answers, f"the old leader answered a stale read: {answers}"
        assert failures + len(answers) == 5
        with grpc.insecure_channel(new.address) as channel:
            (chunk,) = list(pb_grpc.OxiaClientStub(channel).Read(get, timeout=10))
            assert chunk.gets[0].value == b"new"
    finally:
        driver.close()


def test_a_pod_sends_no_shard_map_before_the_controllers_first_push(
    cluster: Callable[..., list[NodeProcess]],
) -> None:
    """Pods started together with their controller know no namespace until its
    first push. A shard-map stream opened before it waits, then gets the whole
    map (NAMESPACE_NOT_FOUND instead would be final to our client, and to an
    application starting alongside a fresh cluster); once a map is known, a
    namespace it lacks is NOT_FOUND at once."""
    nodes = cluster(3)
    driver = Driver()
    request = pb.ShardAssignmentsRequest(namespace="default")
    connected: list[object] = []

    async def connect_and_put() -> None:
        async with await AsyncClient.connect(
            nodes[1].address, options=ClientOptions(connect_timeout_s=60)
        ) as client:
            connected.append(await client.put("/early", b"v"))

    early_client = threading.Thread(target=lambda: asyncio.run(connect_and_put()), daemon=True)
    try:
        with grpc.insecure_channel(nodes[0].address) as channel:
            stub = pb_grpc.OxiaClientStub(channel)
            early = stub.GetShardAssignments(request, timeout=60)
            early_client.start()
            with pytest.raises(grpc.RpcError) as unanswered:
                next(stub.GetShardAssignments(request, timeout=1))
            assert unanswered.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED  # type: ignore[attr-defined]
            leader = driver.elect(SHARD, nodes)
            driver.push_map(nodes)
            first = next(early)
            assignments = first.namespaces["default"].assignments
            assert [(a.shard, a.leader) for a in assignments] == [(SHARD, leader.address)]
            early.cancel()
            early_client.join(timeout=30)
            assert len(connected) == 1
            with pytest.raises(grpc.RpcError) as missing:
                next(stub.GetShardAssignments(pb.ShardAssignmentsRequest(namespace="x"), timeout=5))
            assert missing.value.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
    finally:
        driver.close()


def _metrics_address(log_text: str) -> str:
    match = re.search(r"metrics on http://(\S+)/metrics", log_text)
    assert match, log_text[-2000:]
    return match.group(1)
