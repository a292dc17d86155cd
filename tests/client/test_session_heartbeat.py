"""A client session's keep-alives: a failure the client did not foresee is
retried like a transient one, and the session is declared lost only once no
keep-alive got through for its whole timeout. A heartbeat task that ended at
such a failure would let the server expire the session (and delete its
ephemeral records) while the client still called it alive."""

from __future__ import annotations

import asyncio

from cairn.client.sessions import ManagedSession
from support.polling import eventually

TIMEOUT_MS = 1_500  # keep-alives every 0.5 s


async def _keeps_going() -> None:
    calls: list[float] = []

    async def keep_alive(shard: int, session_id: int) -> None:
        calls.append(asyncio.get_running_loop().time())
        if len(calls) == 1:
            raise RuntimeError("a failure nobody planned for")

    session = ManagedSession(0, 7, TIMEOUT_MS, keep_alive)
    try:
        await eventually(lambda: len(calls) >= 3, interval_s=0.1)
        assert len(calls) >= 3, calls
        assert not session.lost
    finally:
        await session.stop()


async def _lost_after_its_timeout() -> None:
    async def keep_alive(shard: int, session_id: int) -> None:
        raise RuntimeError("never gets through")

    session = ManagedSession(0, 7, TIMEOUT_MS, keep_alive)
    try:
        await eventually(lambda: session.lost, interval_s=0.1)
        assert session.lost
    finally:
        await session.stop()


def test_an_unforeseen_keep_alive_failure_is_retried() -> None:
    asyncio.run(_keeps_going())


def test_a_session_whose_keep_alives_all_fail_is_lost_after_its_timeout() -> None:
    asyncio.run(_lost_after_its_timeout())
