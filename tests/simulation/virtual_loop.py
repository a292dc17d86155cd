"""An asyncio event loop on simulated time, for running the project's own asyncio
code inside the simulation: deterministic (no threads, no sockets, one order
of callbacks for one seed) and as fast as the code runs (no real sleep).

Its clock is its own (`advance_to` moves it, timer by timer), or the world's
(`clock_s`: the loop only runs what is due, `run_until_idle`). Either way it
runs a callback only when simulated time has reached it. (`_ready` and
`_scheduled` are asyncio's private queues: the one thing here that leans on
asyncio's internals.) The loop does no I/O: ports stand in for the disk
(disk.py) and the network (grpc_net.py, network.py).
"""

from __future__ import annotations

import asyncio
import itertools
import selectors
import weakref
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class VirtualClock:
    def __init__(self, start_ms: float = 0.0) -> None:
        self.now_s = start_ms / 1000

    @property
    def now_ms(self) -> int:
        return round(self.now_s * 1000)


class _NoIO(selectors.BaseSelector):
    """A selector with nothing to wait for: waiting `timeout` seconds moves the
    loop's own clock instead (only `run`, which runs a coroutine to its end,
    ever waits). It keeps registrations (the loop registers its self-pipe)
    but never reports one ready."""

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock
        self._keys: dict[Any, selectors.SelectorKey] = {}

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        key = selectors.SelectorKey(fileobj, _fd(fileobj), events, data)
        self._keys[fileobj] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._keys.pop(fileobj)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise RuntimeError("the virtual loop has nothing to run and no timer to wait for")
        self._clock.now_s += timeout
        return []

    def close(self) -> None:
        self._keys.clear()

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._keys


def _fd(fileobj: Any) -> int:
    return fileobj if isinstance(fileobj, int) else int(fileobj.fileno())


class VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self, start_ms: float = 0.0, clock_s: Callable[[], float] | None = None) -> None:
        """On its own clock from `start_ms`, or on the world's (`clock_s`)."""
        self.clock = VirtualClock(start_ms)
        self._clock_s = clock_s
        super().__init__(_NoIO(self.clock))
        # Tasks in the order they were made: `asyncio.all_tasks` is a set,
        # ordered by where the tasks sit in memory, which differs between runs.
        self._tasks_made: weakref.WeakKeyDictionary[asyncio.Task[Any], int] = (
            weakref.WeakKeyDictionary()
        )
        self._made = itertools.count()
        self.set_task_factory(self._make_task)
        # A frozen loop runs nothing (its process is paused); what is due waits.
        self.frozen = False

    def _make_task(
        self, loop: asyncio.AbstractEventLoop, coroutine: Any, **kwargs: Any
    ) -> asyncio.Task[Any]:
        task = asyncio.Task(coroutine, loop=loop, **kwargs)
        self._tasks_made[task] = next(self._made)
        return task

    def tasks(self) -> list[asyncio.Task[Any]]:
        """The loop's unfinished tasks, in the order they were made."""
        return sorted(asyncio.all_tasks(self), key=lambda task: self._tasks_made.get(task, -1))

    def time(self) -> float:
        return self._clock_s() if self._clock_s is not None else self.clock.now_s

    def run_until_idle(self, max_rounds: int = 100_000) -> None:
        """Run what is due now: ready callbacks, and timers whose time has come
        (and what they make ready), without moving the clock."""
        for _ in range(max_rounds):
            if self.frozen or not self._due():
                return
            self.stop()
            self.run_forever()  # one round: stop() before run_forever
        raise AssertionError(f"the loop is still busy after {max_rounds} rounds")

    def advance_to(self, ms: float) -> None:
        """Run what is due up to the time `ms`, each timer at its own time; the
        clock (its own) ends there."""
        assert self._clock_s is None, "this loop runs on the world's clock"
        target = ms / 1000
        while not self.frozen:
            self.run_until_idle()
            when = self._next_timer()
            if when is None or when > target:
                break
            self.clock.now_s = max(self.clock.now_s, when)
        if not self.frozen:
            self.clock.now_s = max(self.clock.now_s, target)

    def advance(self, ms: float) -> None:
        self.advance_to(self.clock.now_s * 1000 + ms)

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_ms: float = 60_000) -> T:
        """Run `coroutine` to its end (within `timeout_ms` of simulated time),
        the clock moving to each timer it waits for."""
        return self.run_until_complete(asyncio.wait_for(coroutine, timeout_ms / 1000))

    def end_process(self) -> None:
        """The process is gone: its tasks are cancelled (in the order they were
        made) and run to their end, then the loop closes."""
        tasks = self.tasks()
        for task in tasks:
            task.cancel()
        if tasks:
            self.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self.close()

    def _due(self) -> bool:
        ready: Any = self._ready  # type: ignore[attr-defined]
        when = self._next_timer()
        return bool(ready) or (when is not None and when <= self.time())

    def _next_timer(self) -> float | None:
        """When the earliest timer is due (a cancelled one too: the round run
        then drops it, as asyncio does)."""
        scheduled: Any = self._scheduled  # type: ignore[attr-defined]
        return float(scheduled[0].when()) if scheduled else None
