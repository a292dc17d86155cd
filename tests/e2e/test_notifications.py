"""Change notifications through the real `oxia` client and raw gRPC."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import oxia
import pytest

from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc
from support.grpc_client import Router
from support.processes import StandaloneProcess

pytestmark = pytest.mark.e2e
T = oxia.NotificationType


class Collector:
    """Drains an oxia notification iterator on a thread."""

    def __init__(self, source: Iterator[oxia.Notification]) -> None:
        self.items: list[oxia.Notification] = []
        self._thread = threading.Thread(target=self._drain, args=(source,), daemon=True)
        self._thread.start()

    def _drain(self, source: Iterator[oxia.Notification]) -> None:
        for item in source:
            self.items.append(item)

    def wait_for(self, count: int, timeout_s: float = 120.0) -> list[oxia.Notification]:
        # A bound, not a pace: it returns as soon as `count` arrived. On a busy
        # machine the oxia client's notification thread took over 10 s.
        deadline = time.monotonic() + timeout_s
        while len(self.items) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return list(self.items)


@pytest.mark.parametrize("shards", [1, 3, 10])
def test_every_kind_of_change_arrives_in_order(
    standalone_factory: Callable[..., StandaloneProcess], shards: int
) -> None:
    server = standalone_factory(shards)
    with oxia.Client(server.address) as client:
        notifications = client.get_notifications()
        collector = Collector(notifications)
        _, v1 = client.put("/n/a", b"1")
        _, v2 = client.put("/n/a", b"2")
        client.delete("/n/a")
        owner = oxia.Client(server.address)
        _, ev = owner.put("/n/ephemeral", b"e", ephemeral=True)
        owner.close()
        client.delete_range("/n/r/", "/n/r//")  # sent to every shard
        items = collector.wait_for(5 + shards)
        notifications.close()
    by_key: dict[str, list[tuple[T, int, str | None]]] = {}
    for item in items:
        by_key.setdefault(item.key(), []).append(
            (item.notification_type(), item.version_id(), item.key_range_end())
        )
    assert by_key["/n/a"] == [
        (T.KEY_CREATED, v1.version_id(), None),
        (T.KEY_MODIFIED, v2.version_id(), None),
        (T.KEY_DELETED, 0, None),
    ]
    assert by_key["/n/ephemeral"] == [
        (T.KEY_CREATED, ev.version_id(), None),
        (T.KEY_DELETED, 0, None),
    ]
    assert by_key["/n/r/"] == [(T.KEY_RANGE_DELETED, 0, "/n/r//")] * shards
    assert len(items) == 5 + shards


def read_batches(
    stub: pb_grpc.OxiaClientStub, shard: int, start: int | None, count: int
) -> list[pb.NotificationBatch]:
    request = pb.NotificationsRequest(shard=shard)
    if start is not None:
        request.start_offset_exclusive = start
    call = stub.GetNotifications(request, timeout=10)
    batches = []
    try:
        for batch in call:
            batches.append(batch)
            if len(batches) == count:
                break
    finally:
        call.cancel()
    return batches


def test_new_subscriber_gets_the_commit_offset_then_resumes_from_any_offset(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    server = standalone_factory(1)
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.OxiaClientStub(channel)
        offsets = []
        for i in range(5):
            request = pb.WriteRequest(shard=0, puts=[pb.PutRequest(key=f"/k{i}", value=b"v")])
            offsets.append(stub.Write(request).puts[0].version.version_id)
        first = read_batches(stub, 0, None, 1)[0]
        assert (first.offset, len(first.notifications)) == (offsets[-1], 0)
        replay = read_batches(stub, 0, -1, 5)
        assert [b.offset for b in replay] == offsets
        assert [next(iter(b.notifications)) for b in replay] == [f"/k{i}" for i in range(5)]
        resumed = read_batches(stub, 0, offsets[1], 3)
        assert [b.offset for b in resumed] == offsets[2:]
        assert resumed == replay[2:]


def test_subscribers_resume_after_kill_9_without_gap_or_duplicate(tmp_path: Path) -> None:
    server = StandaloneProcess(tmp_path / "data", shards=2)
    try:
        server.start()
        acked: dict[int, list[int]] = {}
        with grpc.insecure_channel(server.address) as channel:
            router = Router(channel)
            for i in range(40):
                key = f"/crash/{i}"
                shard = router.shard_for(key)
                request = pb.WriteRequest(shard=shard, puts=[pb.PutRequest(key=key, value=b"v")])
                acked.setdefault(shard, []).append(
                    router.stub.Write(request).puts[0].version.version_id
                )
            seen = {shard: read_batches(router.stub, shard, -1, 5)[-1].offset for shard in acked}
        server.kill()
        server.start()
        with grpc.insecure_channel(server.address) as channel:
            router = Router(channel)
            for shard, offsets in acked.items():
                expected = [o for o in offsets if o > seen[shard]]
                batches = read_batches(router.stub, shard, seen[shard], len(expected))
                assert [b.offset for b in batches] == expected
    finally:
        server.kill()


def test_notifications_are_refused_for_unknown_shards(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    server = standalone_factory(1)
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.OxiaClientStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            read_batches(stub, 42, None, 1)
        assert raised.value.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]


def test_a_namespace_can_turn_notifications_off(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    server = standalone_factory(
        None,
        None,
        "--namespace-spec",
        "default:1",
        "--namespace-spec",
        "quiet:1:notifications=off",
    )
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.OxiaClientStub(channel)
        assignments = next(stub.GetShardAssignments(pb.ShardAssignmentsRequest(namespace="quiet")))
        quiet_shard = assignments.namespaces["quiet"].assignments[0].shard
        stub.Write(pb.WriteRequest(shard=quiet_shard, puts=[pb.PutRequest(key="/q", value=b"v")]))
        with pytest.raises(grpc.RpcError) as raised:
            read_batches(stub, quiet_shard, None, 1)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
        assert "disabled" in (raised.value.details() or "")  # type: ignore[attr-defined]
        # the default namespace still notifies
        assert read_batches(stub, 0, None, 1)[0].shard == 0


def test_shutdown_does_not_wait_for_open_streams(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    server = standalone_factory(2)
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.OxiaClientStub(channel)
        calls = [stub.GetNotifications(pb.NotificationsRequest(shard=shard)) for shard in (0, 1)]
        calls.append(stub.GetShardAssignments(pb.ShardAssignmentsRequest(namespace="default")))
        for call in calls:
            next(call)
        started = time.monotonic()
        assert server.stop() == 0
        # The gRPC grace period is 5 s: open-ended streams must not use it up.
        assert time.monotonic() - started < 3.0
