"""Folding client writes into one log entry, in process: a leader whose
commits wait on a follower the test plays (so entries stay uncommitted as long
as the test likes) folds what arrives meanwhile, logs it at the next commit
step, answers each request on its own, and a replica that replays the log ends
with exactly the leader's records."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from cairn.common.errors import Unavailable, WriteOutcomeUnknown
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import replication_pb2 as rpb
from cairn.storage.config import Limits, ShardSpec
from cairn.storage.core.entries import (
    CLIENT_WRITE,
    FOLDED_WRITES,
    TERM_START,
    Folded,
    decode_entry,
)
from cairn.storage.core.fastpath import has_plain_puts
from cairn.storage.core.replication.leader import LeaderCore
from cairn.storage.core.replication.replica import Member
from cairn.storage.kv import Column, RocksKv
from cairn.storage.replication.leader import lead_alone
from cairn.storage.shard import ShardReplica
from cairn.storage.wal import Wal

ME = Member("127.0.0.1:1", "127.0.0.1:2")
LIMITS = Limits(fold_writes_after_uncommitted_entries=2)


FOLLOWER = Member("127.0.0.1:3", "127.0.0.1:4")


class FollowerPlayedByTest:
    """A leader role with one follower whose acknowledgements the test gives: an
    entry commits once the leader has it durable and the test acknowledged it
    (the term's quorum, LeaderCore, counts both)."""

    def __init__(self, shard: ShardReplica, core: LeaderCore) -> None:
        self.shard = shard
        self.core = core

    def entries_appended(self) -> None:
        pass

    def own_durability_counted(self) -> None:
        pass

    def acknowledge(self, offset: int) -> None:
        self.core.on_ack(FOLLOWER.internal_address, self.core.term, offset)
        self.shard.commit_counted()

    async def stop(self) -> None:
        pass

    def follower_status(self) -> list[rpb.FollowerStatus]:
        return []

    # The lease is not what these tests are about: it always holds, at once.
    serves_from_ms = 0

    def clock_ms(self) -> int:
        return 0

    def lease_holds(self) -> bool:
        return True

    async def renew_lease(self, timeout_s: float) -> bool:
        return True


@asynccontextmanager
async def leader(
    path: Path, limits: Limits = LIMITS
) -> AsyncIterator[tuple[ShardReplica, FollowerPlayedByTest]]:
    replica = ShardReplica(0, ShardSpec(), RocksKv(path / "kv"), Wal.open(path / "wal"), limits)
    roles: list[FollowerPlayedByTest] = []

    def make_role(shard: ShardReplica, core: LeaderCore) -> FollowerPlayedByTest:
        roles.append(FollowerPlayedByTest(shard, core))
        return roles[0]

    await replica.new_term(replica.term + 1)
    term_start = await replica.become_leader(replica.term, ME, make_role, [FOLLOWER])
    roles[0].acknowledge(term_start.offset)
    await replica.wait_serving(timeout_s=5)
    try:
        yield replica, roles[0]
    finally:
        if not replica.closing:
            await replica.close()


async def settled(replica: ShardReplica) -> None:
    """Until every entry logged so far is durable (so only the test holds commits)."""
    for _ in range(500):
        if replica.durable_offset >= replica.log.last_offset:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the leader's own fsync did not come")


async def submit(replica: ShardReplica, request: pb.WriteRequest) -> asyncio.Future[bytes]:
    # Plainness judged as the client API does.
    raw = request.SerializeToString()
    return await replica.submit(raw, request, has_plain_puts(raw))


def logged_kinds(wal: Wal) -> list[tuple[int, int]]:
    """(kind, requests in it) of every WAL entry."""
    kinds = []
    for entry in wal.read(wal.first_offset):
        kind, body = decode_entry(entry.payload)
        kinds.append((kind, len(body.requests) if isinstance(body, Folded) else 1))
    return kinds


def records(kv: RocksKv) -> dict[bytes, bytes]:
    return dict(kv.scan(Column.RECORDS, b"", None))


def version_of(response: bytes, index: int = 0) -> pb.Version:
    return pb.WriteResponse.FromString(response).puts[index].version


def put(*keys: str, value: bytes = b"v") -> pb.WriteRequest:
    return pb.WriteRequest(shard=0, puts=[pb.PutRequest(key=key, value=value) for key in keys])


async def _folds_while_uncommitted(tmp_path: Path) -> None:
    async with leader(tmp_path / "leader") as (replica, follower):
        first = await submit(replica, put("/a"))
        second = await submit(replica, put("/b"))
        # Two entries uncommitted: plain writes on other keys fold together.
        folded_c = await submit(replica, put("/c", value=b"c1"))
        folded_d = await submit(replica, put("/d", "/e"))
        # The same key again cannot share the fold's version id: a new fold.
        again_c = await submit(replica, put("/c", value=b"c2"))
        # Not foldable (a delete range): logged after the fold, in arrival order.
        ranged = await submit(
            replica,
            pb.WriteRequest(
                shard=0,
                delete_ranges=[pb.DeleteRangeRequest(start_inclusive="/x", end_exclusive="/y")],
            ),
        )
        await settled(replica)
        assert not folded_c.done()
        # Each acknowledgement moves the commit offset, and logs the fold so far.
        while not ranged.done():
            follower.acknowledge(replica.log.last_offset)
            await asyncio.sleep(0.01)
            await settled(replica)
        answers = await asyncio.gather(first, second, folded_c, folded_d, again_c, ranged)

        assert logged_kinds(replica.wal) == [
            (TERM_START, 1),
            (CLIENT_WRITE, 1),
            (CLIENT_WRITE, 1),
            (FOLDED_WRITES, 2),
            (CLIENT_WRITE, 1),  # a fold of one goes out as a plain write
            (CLIENT_WRITE, 1),
        ]
        offsets = [entry.offset for entry in replica.wal.read(replica.wal.first_offset)]
        assert version_of(answers[0]).version_id == offsets[1]
        assert version_of(answers[1]).version_id == offsets[2]
        # Each folded request gets its own response, all under the fold's offset.
        assert version_of(answers[2]).version_id == offsets[3]
        assert [p.version.version_id for p in pb.WriteResponse.FromString(answers[3]).puts] == [
            offsets[3],
            offsets[3],
        ]
        rewritten = version_of(answers[4])
        assert rewritten.version_id == offsets[4]
        assert rewritten.modifications_count == 1
        assert pb.WriteResponse.FromString(answers[5]).delete_ranges[0].status == pb.OK
        leader_records = records(replica.kv)
        assert len(leader_records) == 5

    # A replica replaying the log (as a follower applies it) ends identical: the
    # KV is wiped and rebuilt from the WAL.
    replay = tmp_path / "replay"
    replay.mkdir()
    (tmp_path / "leader" / "wal").rename(replay / "wal")
    rebuilt = ShardReplica(0, ShardSpec(), RocksKv(replay / "kv"), Wal.open(replay / "wal"), LIMITS)
    await lead_alone(rebuilt, ME)
    try:
        assert records(rebuilt.kv) == leader_records
    finally:
        await rebuilt.close()


def test_writes_arriving_while_entries_are_uncommitted_fold_into_one_entry(
    tmp_path: Path,
) -> None:
    asyncio.run(_folds_while_uncommitted(tmp_path))


async def _fold_fails_cleanly_on_close(tmp_path: Path) -> None:
    async with leader(tmp_path) as (replica, _):
        logged = [await submit(replica, put(f"/logged/{i}")) for i in range(2)]
        folded = [await submit(replica, put(f"/folded/{i}")) for i in range(3)]
        await settled(replica)
        assert [kind for kind, _ in logged_kinds(replica.wal)] == [
            TERM_START,
            CLIENT_WRITE,
            CLIENT_WRITE,
        ]
        await replica.close()
        # Folded requests were never logged: plainly not accepted, safe to send
        # again. Logged ones, never acknowledged, may yet commit elsewhere.
        for future in folded:
            with pytest.raises(Unavailable):
                await future
        for future in logged:
            with pytest.raises(WriteOutcomeUnknown):
                await future


def test_a_fold_not_yet_logged_fails_as_not_accepted_when_the_shard_closes(
    tmp_path: Path,
) -> None:
    asyncio.run(_fold_fails_cleanly_on_close(tmp_path))


async def _bounds(tmp_path: Path, limits: Limits, requests: int, entries: int) -> None:
    async with leader(tmp_path, limits) as (replica, follower):
        futures = [await submit(replica, put(f"/k/{i}", f"/j/{i}")) for i in range(requests)]
        while not all(future.done() for future in futures):
            await settled(replica)
            follower.acknowledge(replica.log.last_offset)
            await asyncio.sleep(0.01)
        await asyncio.gather(*futures)
        kinds = logged_kinds(replica.wal)
        assert len(kinds) == entries
        assert sum(count for _, count in kinds[1:]) == requests


@pytest.mark.parametrize(
    ("limits", "requests", "entries"),
    [
        # Folding once 2 entries wait: 2 logged directly, then folds of at most 3
        # requests (6 operations).
        (Limits(fold_writes_after_uncommitted_entries=2, max_operations_per_fold=6), 10, 1 + 2 + 3),
        # Once 1 waits: 1 logged directly, then the other 9 in folds of 3.
        (Limits(fold_writes_after_uncommitted_entries=1, max_operations_per_fold=6), 10, 1 + 1 + 3),
        # Bytes bound: each request is about 20 bytes, so one per fold.
        (Limits(fold_writes_after_uncommitted_entries=2, max_bytes_per_fold=1), 5, 1 + 5),
        # Folding only once 100 entries wait: never here.
        (Limits(fold_writes_after_uncommitted_entries=100), 8, 1 + 8),
    ],
)
def test_folds_stay_within_their_bounds(
    tmp_path: Path, limits: Limits, requests: int, entries: int
) -> None:
    asyncio.run(_bounds(tmp_path, limits, requests, entries))


def test_folding_bounds_are_validated() -> None:
    with pytest.raises(ValueError, match="folding bounds"):
        Limits(fold_writes_after_uncommitted_entries=0)
    with pytest.raises(ValueError, match="folding bounds"):
        Limits(max_bytes_per_fold=0)


async def _alone(tmp_path: Path) -> None:
    replica = ShardReplica(
        0, ShardSpec(), RocksKv(tmp_path / "kv"), Wal.open(tmp_path / "wal"), LIMITS
    )
    await lead_alone(replica, ME)
    try:
        # Fifty requests logged back to back, before any fsync completes: many
        # entries uncommitted, yet nothing folds (the next fsync covers them all).
        futures = [await submit(replica, put(f"/alone/{i}")) for i in range(50)]
        await asyncio.gather(*futures)
        kinds = logged_kinds(replica.wal)
        assert kinds[-50:] == [(CLIENT_WRITE, 1)] * 50
    finally:
        await replica.close()


def test_a_leader_without_followers_never_folds(tmp_path: Path) -> None:
    asyncio.run(_alone(tmp_path))
