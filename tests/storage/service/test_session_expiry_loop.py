"""A leader's session expiry keeps going when closing one expired session
fails: the leader stopped leading part way (NotLeader), or anything else. The
session that failed is left to the next leader (which re-arms it); the others
expired in the same round are still closed, and so are later ones. A loop that
ended at the first such failure would leave this replica, for the rest of its
life, leading without ever expiring a session."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from cairn.common.errors import NotLeader
from cairn.storage.config import Limits, ShardSpec
from cairn.storage.core.replication.replica import Member
from cairn.storage.core.sessions import stored_sessions
from cairn.storage.kv import RocksKv
from cairn.storage.replication.leader import lead_alone
from cairn.storage.shard import ShardReplica
from cairn.storage.wal import Wal
from support.polling import eventually

ME = Member("127.0.0.1:1", "127.0.0.1:2")
TIMEOUT_MS = 2_000


async def _expiry_survives(tmp_path: Path, failure: Exception) -> None:
    now = [1_000_000]
    replica = ShardReplica(
        0,
        ShardSpec(),
        RocksKv(tmp_path / "kv"),
        Wal.open(tmp_path / "wal"),
        Limits(),
        session_clock_ms=lambda: now[0],
    )
    try:
        await lead_alone(replica, ME)
        first = await replica.sessions.create(TIMEOUT_MS, "first")
        second = await replica.sessions.create(TIMEOUT_MS, "second")
        sessions = replica.sessions
        real_close = sessions._close
        failed: list[int] = []

        async def failing_once(session_id: int, reason: int) -> None:
            if not failed:
                failed.append(session_id)
                sessions.tracker.forget(session_id)  # as the real close does on any failure
                raise failure
            await real_close(session_id, reason)

        sessions._close = failing_once  # type: ignore[method-assign]
        now[0] += TIMEOUT_MS + 1
        assert await eventually(lambda: bool(failed)), "no expired session was closed"
        survivor = {first, second} - set(failed)
        await _until_gone(replica, survivor)
        # Later expiries are still served.
        third = await replica.sessions.create(TIMEOUT_MS, "third")
        now[0] += TIMEOUT_MS + 1
        await _until_gone(replica, {third})
        assert set(failed) <= {first, second}
        assert _stored(replica) == set(failed)
    finally:
        await replica.close()


def _stored(replica: ShardReplica) -> set[int]:
    return {session for session, _ in stored_sessions(replica.kv)}


async def _until_gone(replica: ShardReplica, sessions: set[int]) -> None:
    gone = await eventually(lambda: not _stored(replica) & sessions)
    assert gone, f"sessions {sessions} never expired; stored: {_stored(replica)}"


@pytest.mark.parametrize(
    "failure",
    [NotLeader(0), RuntimeError("unforeseen")],
    ids=["not-leader", "unforeseen"],
)
def test_expiry_goes_on_after_closing_one_session_fails(tmp_path: Path, failure: Any) -> None:
    asyncio.run(_expiry_survives(tmp_path, failure))
