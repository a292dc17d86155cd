"""Sessions and ephemeral records, through the real `oxia` client and raw gRPC."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import oxia
import oxia.ex
import pytest

from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc
from support.grpc_client import Router
from support.processes import StandaloneProcess

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("shards", [1, 3, 10])
def test_ephemeral_records_vanish_when_the_session_closes(
    standalone_factory: Callable[..., StandaloneProcess], shards: int
) -> None:
    server = standalone_factory(shards)
    with oxia.Client(server.address) as observer:
        owner = oxia.Client(server.address, client_identifier="broker-1")
        keys = [f"/brokers/b{i}" for i in range(8)]
        for key in keys:
            _, version = owner.put(key, b"owned", ephemeral=True)
            assert version.is_ephemeral()
            assert version.client_identity() == "broker-1"
        owner.put("/brokers/config", b"persistent")
        for key in keys:
            _, value, version = observer.get(key)
            assert value == b"owned"
            assert version.is_ephemeral()
            assert version.session_id() is not None
        assert observer.list("/brokers/", "/brokers//") == sorted([*keys, "/brokers/config"])

        owner.close()  # CloseSession on every shard it used, before returning
        for key in keys:
            with pytest.raises(oxia.ex.KeyNotFound):
                observer.get(key)
        assert observer.get("/brokers/config")[1] == b"persistent"


def test_persistent_put_detaches_and_another_session_takes_over(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    server = standalone_factory(3)
    with oxia.Client(server.address) as observer:
        first = oxia.Client(server.address, client_identifier="first")
        second = oxia.Client(server.address, client_identifier="second")
        first.put("/detached", b"1", ephemeral=True)
        first.put("/taken", b"1", ephemeral=True)
        observer.put("/detached", b"now persistent")
        _, version = second.put("/taken", b"2", ephemeral=True)
        assert version.client_identity() == "second"
        first.close()
        assert observer.get("/detached")[1] == b"now persistent"
        assert observer.get("/taken")[1] == b"2"
        second.close()
        with pytest.raises(oxia.ex.KeyNotFound):
            observer.get("/taken")
        assert observer.get("/detached")[1] == b"now persistent"


def _raw_session(stub: pb_grpc.OxiaClientStub, shard: int, timeout_ms: int) -> int:
    response = stub.CreateSession(
        pb.CreateSessionRequest(shard=shard, session_timeout_ms=timeout_ms, client_identity="raw")
    )
    return int(response.session_id)


def _put(stub: pb_grpc.OxiaClientStub, shard: int, key: str, session_id: int | None) -> int:
    put = pb.PutRequest(key=key, value=b"e")
    if session_id is not None:
        put.session_id = session_id
    return int(stub.Write(pb.WriteRequest(shard=shard, puts=[put])).puts[0].status)


def _exists(stub: pb_grpc.OxiaClientStub, shard: int, key: str) -> bool:
    get = pb.GetRequest(key=key, include_value=False)
    return bool(next(stub.Read(pb.ReadRequest(shard=shard, gets=[get]))).gets[0].status == pb.OK)


def test_expiry_after_a_full_timeout_and_heartbeats_keep_sessions_alive(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    server = standalone_factory(1)
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.OxiaClientStub(channel)
        silent = _raw_session(stub, 0, 2000)
        kept = _raw_session(stub, 0, 2000)
        started = time.monotonic()
        assert _put(stub, 0, "/silent", silent) == pb.OK
        assert _put(stub, 0, "/kept", kept) == pb.OK
        # Heartbeat one session every 400 ms across five timeout windows.
        gone_at = None
        while time.monotonic() - started < 10.0:
            stub.KeepAlive(pb.SessionHeartbeat(shard=0, session_id=kept))
            if gone_at is None and not _exists(stub, 0, "/silent"):
                gone_at = time.monotonic() - started
            time.sleep(0.4)
        assert gone_at is not None, "the silent session never expired"
        # A full timeout, then at most a check interval (generous upper bound for a
        # loaded machine).
        assert 2.0 <= gone_at <= 5.0, gone_at
        assert _exists(stub, 0, "/kept")
        # The expired session is gone for good.
        assert _put(stub, 0, "/late", silent) == pb.SESSION_DOES_NOT_EXIST
        with pytest.raises(grpc.RpcError) as raised:
            stub.KeepAlive(pb.SessionHeartbeat(shard=0, session_id=silent))
        assert raised.value.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
        with pytest.raises(grpc.RpcError) as raised:
            stub.CloseSession(pb.CloseSessionRequest(shard=0, session_id=silent))
        assert raised.value.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def one_shard_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """A server for the tests that change nothing on it (refused requests)."""
    server = StandaloneProcess(tmp_path_factory.mktemp("sessions"), 1)
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.mark.parametrize("timeout_ms", [0, 1999, 300_001])
def test_session_timeouts_outside_2s_to_5min_are_refused(
    one_shard_server: StandaloneProcess, timeout_ms: int
) -> None:
    server = one_shard_server
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.OxiaClientStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            _raw_session(stub, 0, timeout_ms)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]


def test_sessions_survive_kill_9_with_a_fresh_timeout(tmp_path: Path) -> None:
    server = StandaloneProcess(tmp_path / "data", shards=3)
    try:
        server.start()
        with grpc.insecure_channel(server.address) as channel:
            router = Router(channel)
            shard = router.shard_for("/survivor")
            survivor = _raw_session(router.stub, shard, 3000)
            assert _put(router.stub, shard, "/survivor", survivor) == pb.OK
            abandoned_shard = router.shard_for("/abandoned")
            abandoned = _raw_session(router.stub, abandoned_shard, 3000)
            assert _put(router.stub, abandoned_shard, "/abandoned", abandoned) == pb.OK
        server.kill()
        time.sleep(1.0)
        server.start()
        restarted = time.monotonic()
        with grpc.insecure_channel(server.address) as channel:
            router = Router(channel)
            # Both records are back, and the surviving client resumes heartbeats.
            assert _exists(router.stub, shard, "/survivor")
            assert _exists(router.stub, abandoned_shard, "/abandoned")
            gone_at = None
            while time.monotonic() - restarted < 7.0:
                router.stub.KeepAlive(pb.SessionHeartbeat(shard=shard, session_id=survivor))
                if gone_at is None and not _exists(router.stub, abandoned_shard, "/abandoned"):
                    gone_at = time.monotonic() - restarted
                time.sleep(0.3)
            # The abandoned session got a full timeout from the restart, then expired.
            assert gone_at is not None
            # (minus the few hundred ms between loading sessions and listening)
            assert gone_at >= 2.5, gone_at
            assert _exists(router.stub, shard, "/survivor")
            router.stub.CloseSession(pb.CloseSessionRequest(shard=shard, session_id=survivor))
            assert not _exists(router.stub, shard, "/survivor")
    finally:
        server.kill()


_FIRST_AND_LAST = ("/many/000000", "/many/019999")


def test_closing_a_large_session_does_not_stall_reads(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    server = standalone_factory(1)
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.OxiaClientStub(channel)
        session = _raw_session(stub, 0, 30_000)
        for start in range(0, 20_000, 1000):
            puts = [
                pb.PutRequest(key=f"/many/{i:06d}", value=b"e", session_id=session)
                for i in range(start, start + 1000)
            ]
            stub.Write(pb.WriteRequest(shard=0, puts=puts))
        first, last = (pb.GetRequest(key=k, include_value=False) for k in _FIRST_AND_LAST)
        closed = threading.Event()
        # What reads answered while the close went on: (first key, last key) present.
        seen: set[tuple[bool, bool]] = set()

        def read_while_closing() -> None:
            while not closed.is_set():
                answer = next(stub.Read(pb.ReadRequest(shard=0, gets=[first, last])))
                first_found, last_found = (get.status == pb.OK for get in answer.gets)
                seen.add((first_found, last_found))

        reader = threading.Thread(target=read_while_closing)
        reader.start()
        stub.CloseSession(pb.CloseSessionRequest(shard=0, session_id=session))
        closed.set()
        reader.join(timeout=30)
        assert not _exists(stub, 0, "/many/000000")
        assert not _exists(stub, 0, "/many/019999")
        # The close is applied in bounded entries (records in key order), and reads
        # are served in between: one saw the first records gone and the last still
        # there. A close in one entry could never be seen half done.
        assert (False, True) in seen, seen


def test_oxia_client_heartbeats_keep_a_session_through_several_timeouts(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    server = standalone_factory(3)
    with oxia.Client(server.address) as observer:
        # The client heartbeats every 2 s for a 3 s timeout; hold for over 3 windows.
        owner = oxia.Client(server.address, session_timeout_ms=3000)
        owner.put("/held/a", b"x", ephemeral=True)
        owner.put("/held/b", b"x", ephemeral=True)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            assert observer.get("/held/a")[1] == b"x"
            assert observer.get("/held/b")[1] == b"x"
            time.sleep(0.5)
        owner.close()
        with pytest.raises(oxia.ex.KeyNotFound):
            observer.get("/held/a")


OWNER_SCRIPT = """
import sys, time, oxia
client = oxia.Client(sys.argv[1], session_timeout_ms=2000, client_identifier="doomed")
for i in range(5):
    client.put(f"/doomed/{i}", b"x", ephemeral=True)
print("ready", flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("shards", [1, 3, 10])
def test_records_of_a_killed_oxia_client_expire_after_its_timeout(
    standalone_factory: Callable[..., StandaloneProcess], shards: int
) -> None:
    server = standalone_factory(shards)
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER_SCRIPT, server.address], stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline().strip() == "ready"
        with oxia.Client(server.address) as observer:
            assert all(observer.get(f"/doomed/{i}")[1] == b"x" for i in range(5))
            owner.kill()  # no CloseSession, no more heartbeats
            owner.wait(timeout=30)
            killed = time.monotonic()
            while time.monotonic() - killed < 10.0:
                if observer.list("/doomed/", "/doomed//") == []:
                    break
                time.sleep(0.1)
            gone_after = time.monotonic() - killed
            assert observer.list("/doomed/", "/doomed//") == []
            # Not before a full timeout since the last heartbeat (the client sends one
            # every 1999 ms for a 2000 ms timeout), and not long after.
            assert 0.0 < gone_after <= 5.0, gone_after
    finally:
        owner.kill()
        owner.wait(timeout=30)
        if owner.stdout is not None:
            owner.stdout.close()
