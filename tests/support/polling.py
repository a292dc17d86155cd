"""Waiting, in async tests, for something other tasks bring about."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def eventually(
    condition: Callable[[], bool], timeout_s: float = 15.0, interval_s: float = 0.02
) -> bool:
    """Poll `condition` until it holds or `timeout_s` has passed (generous by
    default: a loaded CI machine); whether it held. The caller asserts, with a
    message of its own."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return condition()
        await asyncio.sleep(interval_s)
    return True
