"""An asyncio event loop on a virtual clock, for running the storage pod's own
asyncio code inside the simulation: deterministic (no threads, no sockets, one
order of callbacks for one seed) and as fast as the code runs (waiting for a
timer moves the clock to it instead of sleeping).

`advance(ms)` runs everything due up to `now + ms`, timers in order, with the
clock at each timer's time as it runs. The loop does no I/O: ports stand in for
the disk (tests/simulation/disk.py) and the network.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class _NoIO(selectors.BaseSelector):
    """A selector with nothing to wait for: waiting `timeout` seconds moves the
    loop's virtual clock instead. It keeps registrations (the loop registers
    its self-pipe) but never reports one ready."""

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


class VirtualClock:
    def __init__(self, start_ms: float = 0.0) -> None:
        self.now_s = start_ms / 1000

    @property
    def now_ms(self) -> int:
        return round(self.now_s * 1000)


class VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self, start_ms: float = 0.0) -> None:
        self.clock = VirtualClock(start_ms)
        super().__init__(_NoIO(self.clock))

    def time(self) -> float:
        return self.clock.now_s

    def advance(self, ms: float) -> None:
        """Run what is due up to `ms` from now; the clock ends there."""
        self.run_until_complete(asyncio.sleep(ms / 1000))

    def advance_to(self, ms: float) -> None:
        """Run what is due up to the time `ms`; the clock ends there."""
        if ms > self.clock.now_s * 1000:
            self.advance(ms - self.clock.now_s * 1000)
        else:
            self.run_until_complete(asyncio.sleep(0))

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_ms: float = 60_000) -> T:
        """Run `coroutine` to its end (within `timeout_ms` of virtual time)."""
        return self.run_until_complete(asyncio.wait_for(coroutine, timeout_ms / 1000))
