"""When a new leader starts to serve (the I/O of lease.py's rule, which ShardCore
decides): once its term's first entry is applied and any older leader's lease
is over, now or when a timer fires. Writers and readers wait here for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from cairn.common.errors import Unavailable
from cairn.storage.shard_context import ShardContext


class LeaderTakeover:
    def __init__(self, shard: ShardContext, on_taken_over: Callable[[], None]) -> None:
        """`on_taken_over` runs as the leader starts serving (sessions get a fresh
        timeout then)."""
        self._shard = shard
        self._on_taken_over = on_taken_over
        # Set while core.taken_over: a leader has applied its term's first entry.
        self._taken_over = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def serving(self) -> bool:
        """Answers reads now: taken over (its term's first entry applied, any older
        leader's lease over) and holding its own lease (lease.py)."""
        leader = self._shard.leader
        return leader is not None and self._shard.core.serves_reads(leader.lease_holds)

    def on_leading(self) -> None:
        self._taken_over.clear()

    def on_stepped_down(self) -> None:
        self._taken_over.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def on_first_entry_applied(self, term: int) -> None:
        """The first entry of `term` is applied: serve once any older leader's lease
        is over, now or when a timer says so."""
        shard = self._shard
        leader = shard.leader
        if leader is None or shard.core.term != term:
            return
        wait_ms = shard.core.takeover_wait_ms(leader.clock_ms(), leader.serves_from_ms)
        if wait_ms is None:
            return
        if wait_ms > 0:
            if self._timer is None:
                self._timer = shard.loop.call_later(wait_ms / 1000, self._timer_fired, term)
            return
        self._on_taken_over()
        self._taken_over.set()

    def _timer_fired(self, term: int) -> None:
        self._timer = None
        self.on_first_entry_applied(term)

    async def wait_taken_over(self, timeout_s: float | None = None) -> None:
        """Wait until this leader may acknowledge writes: its term's first entry is
        applied, and any older leader's lease is over."""
        shard = self._shard
        shard.core.check_leader()
        if self._taken_over.is_set():
            return
        try:
            await asyncio.wait_for(
                self._taken_over.wait(),
                shard.replication.leader_ready_timeout_s if timeout_s is None else timeout_s,
            )
        except TimeoutError:
            raise Unavailable(f"shard {shard.shard_id}: the leader is still taking over") from None
        shard.core.check_leader()

    async def wait_serving(self, timeout_s: float | None = None) -> None:
        """Wait until this leader answers reads: taken over, and holding its lease
        (renewed at once if it lapsed: a majority must answer this leader)."""
        shard = self._shard
        shard.core.check_leader()
        if self.serving:
            return
        if timeout_s is None:
            timeout_s = shard.replication.leader_ready_timeout_s
        deadline = shard.loop.time() + timeout_s
        await self.wait_taken_over(timeout_s)
        leader = shard.leader
        renewed = leader is not None and await leader.renew_lease(deadline - shard.loop.time())
        shard.core.check_leader()
        if not renewed:
            raise Unavailable(
                f"shard {shard.shard_id}: no majority of the ensemble confirmed this leader "
                f"within {timeout_s:g} s"
            )
