"""Notifications filtered by key prefix on the storage pods, through the client library.

A filtered subscriber must get exactly the changes an unfiltered one gets, cut
down to its prefixes, in the same order (puts, deletes, range deletions that can
cover a key with the prefix in the namespace's key order, and the deletions of a
session's expiry), and resume from the last offset it saw, after a restart or a
leader failover, without a gap or a duplicate.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncGenerator, Callable
from pathlib import Path

import grpc
import pytest

from cairn.bench.failover import running_cluster
from cairn.client import errors
from cairn.client.client import AsyncClient
from cairn.client.options import ClientOptions
from cairn.client.records import NotificationBatch, NotificationType
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc
from support.grpc_client import Router
from support.polling import eventually
from support.processes import StandaloneProcess

pytestmark = pytest.mark.e2e

WATCHED = "/brokers/"
Change = tuple[str, NotificationType, int | None, str | None]


class Subscriber:
    """Drains a notification iterator into per-shard lists of batches."""

    def __init__(self, batches: AsyncGenerator[NotificationBatch]) -> None:
        self.batches: dict[int, list[NotificationBatch]] = {}
        self._source = batches
        self._task = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        async for batch in self._source:
            self.batches.setdefault(batch.shard, []).append(batch)

    def reached(self, offsets: dict[int, int]) -> bool:
        return all(
            self.batches.get(shard) and self.batches[shard][-1].offset >= offset
            for shard, offset in offsets.items()
        )

    def changes(self, shard: int) -> list[tuple[int, list[Change]]]:
        """(offset, changes) of each batch that carries changes."""
        return [
            (batch.offset, [_change(n) for n in batch.notifications])
            for batch in self.batches.get(shard, [])
            if batch.notifications
        ]

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self._source.aclose()


def _change(notification: object) -> Change:
    return (
        notification.key,  # type: ignore[attr-defined]
        notification.type,  # type: ignore[attr-defined]
        notification.version_id,  # type: ignore[attr-defined]
        notification.key_range_last,  # type: ignore[attr-defined]
    )


# Range deletions and whether each can cover a key under /brokers/ in hierarchical
# order: "/brokers" .. "/brokerz" holds one-segment keys only, and "/" .. "//" the
# children of the root, so neither can.
RANGES = {
    ("/brokers/b", "/brokers/d"): True,
    ("/ledgers/", "/ledgers//"): False,
    ("/brokers", "/brokerz"): False,
    ("/", "//"): False,
}


def _wanted(change: Change) -> bool:
    key, kind, _, end = change
    if kind is NotificationType.RANGE_DELETED:
        assert end is not None
        return RANGES[(key, end)]
    return key.startswith(WATCHED)


async def _expire_a_session_holding(client: AsyncClient, key: str) -> None:
    shard = client.shard_for(key)
    session = await client.create_session(shard, timeout_ms=2000)
    await client.put(key, b"held", session_id=session)
    # Not kept alive: the session expires and its record is deleted.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            await client.get(key)
        except errors.KeyNotFound:  # once the session expired
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the session holding {key} did not expire")


async def _exact_selection(address: str) -> None:
    client = await AsyncClient.connect([address])
    async with client:
        everything = Subscriber(client.notifications())
        filtered = Subscriber(client.notifications(key_prefixes=[WATCHED]))
        bare = Subscriber(client.notifications(key_prefixes=[WATCHED], include_stat=False))
        shards = client.shard_map.shard_ids()
        started = {shard: -1 for shard in shards}
        for subscriber in (everything, filtered, bare):
            assert await eventually(lambda s=subscriber: s.reached(started)), "feeds started"
        for i in range(12):
            await client.put(f"/brokers/b{i % 4}", str(i).encode())
            await client.put(f"/ledgers/l{i}", b"x")
        await client.delete("/brokers/b1")
        await client.delete("/ledgers/l1")
        for start, end in RANGES:
            await client.delete_range(start, end)
        await asyncio.gather(
            _expire_a_session_holding(client, "/brokers/ephemeral"),
            _expire_a_session_holding(client, "/ledgers/ephemeral"),
        )
        # Where each shard is now: a write to every shard that no filter wants.
        last: dict[int, int] = {}
        i = 0
        while len(last) < len(shards):
            key = f"/other/{i}"
            last[client.shard_for(key)] = (await client.put(key, b"end")).version.version_id
            i += 1
        for subscriber in (everything, filtered, bare):
            # A filtered feed learns it passed the last entries by an empty batch.
            assert await eventually(lambda s=subscriber: s.reached(last), timeout_s=30), "caught up"
        for shard in shards:
            expected = [
                (offset, wanted)
                for offset, changes in everything.changes(shard)
                if (wanted := [c for c in changes if _wanted(c)])
            ]
            assert filtered.changes(shard) == expected, shard
            without_versions = [
                (offset, [(k, t, None, e) for k, t, _, e in changes])
                for offset, changes in expected
            ]
            assert bare.changes(shard) == without_versions, shard
        kinds = {c[1] for shard in shards for _, cs in filtered.changes(shard) for c in cs}
        assert kinds == set(NotificationType)
        for subscriber in (everything, filtered, bare):
            await subscriber.close()


def test_a_filtered_subscriber_gets_exactly_the_matching_changes_in_order(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    server = standalone_factory(3)
    asyncio.run(_exact_selection(server.address))


def _filtered(
    stub: pb_grpc.OxiaClientStub, shard: int, after: int, until: int
) -> list[pb.NotificationBatch]:
    """The filtered batches after offset `after`, read until one reaches `until`."""
    request = pb.NotificationsRequest(
        shard=shard, start_offset_exclusive=after, key_prefixes=[WATCHED]
    )
    call = stub.GetNotifications(request, timeout=30)
    batches = []
    try:
        for batch in call:
            batches.append(batch)
            if batch.offset >= until:
                break
    finally:
        call.cancel()
    return batches


def test_a_filtered_subscriber_resumes_after_kill_9_without_gap_or_duplicate(
    tmp_path: Path,
) -> None:
    server = StandaloneProcess(tmp_path / "data", shards=1)
    watched: list[int] = []  # offsets of the writes the filter wants

    def write(stub: pb_grpc.OxiaClientStub, count: int, start: int) -> int:
        offset = -1
        for i in range(start, start + count):
            key = f"{WATCHED}{i}" if i % 3 == 0 else f"/ledgers/{i}"
            request = pb.WriteRequest(shard=0, puts=[pb.PutRequest(key=key, value=b"v")])
            offset = stub.Write(request).puts[0].version.version_id
            if key.startswith(WATCHED):
                watched.append(offset)
        return offset

    try:
        server.start()
        with grpc.insecure_channel(server.address) as channel:
            stub = Router(channel).stub
            last = write(stub, 30, 0)
            seen = _filtered(stub, 0, -1, last)
        # Every batch sent carries a wanted change, except those telling the offset
        # reached; the last one reached the last write.
        assert [b.offset for b in seen if b.notifications] == watched
        resume_after = seen[-1].offset
        assert resume_after == last
        server.kill()
        server.start()
        with grpc.insecure_channel(server.address) as channel:
            stub = Router(channel).stub
            before = len(watched)
            last = write(stub, 30, 30)
            resumed = _filtered(stub, 0, resume_after, last)
        assert [b.offset for b in resumed if b.notifications] == watched[before:]
    finally:
        server.kill()


async def _through_a_failover(addresses: list[str], kill_leader: Callable[[], None]) -> None:
    client = await AsyncClient.connect(addresses, options=ClientOptions(request_timeout_s=30.0))
    async with client:
        filtered = Subscriber(client.notifications(key_prefixes=[WATCHED]))
        assert await eventually(lambda: filtered.reached({0: -1}), timeout_s=30)
        acknowledged: list[str] = []
        for i in range(60):
            if i == 30:
                await asyncio.to_thread(kill_leader)
            key = f"{WATCHED}{i}" if i % 2 == 0 else f"/ledgers/{i}"
            await client.put(key, b"v")
            if key.startswith(WATCHED):
                acknowledged.append(key)
        last = (await client.put("/ledgers/end", b"v")).version.version_id
        assert await eventually(lambda: filtered.reached({0: last}), timeout_s=60)
        delivered = [c[0] for _, changes in filtered.changes(0) for c in changes]
        # Each acknowledged put once, in order: nothing skipped, nothing repeated
        # (a put retried across the failover is applied once).
        assert delivered == acknowledged
        await filtered.close()


@pytest.mark.timeout(300)
def test_a_filtered_subscriber_follows_a_leader_failover_without_gap_or_duplicate(
    tmp_path: Path,
) -> None:
    with running_cluster(tmp_path, pods=3, shards=1) as bench:

        def kill_leader() -> None:
            leader = bench.shards()[0]["leader"]
            os.kill(bench.pids(leader)[0], signal.SIGKILL)

        addresses = [bench.cluster.public_address(name) for name in sorted(bench.cluster.pods)]
        asyncio.run(_through_a_failover(addresses, kill_leader))
