"""Keeping a server's startup objects out of its garbage collections.

Modules, classes, functions, the app and the servers live as long as the process.
CPython's full collections scan every object still tracked, so with them in the
heap each full collection held the event loop for tens of milliseconds: the
requests waiting behind it made the p99 (measurements: docs/performance.md,
"Frozen startup objects"). Frozen, they are never scanned again.
"""

from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    """Collect what startup left as garbage, then freeze every surviving object.

    Call once, when the process has built what it serves with and before it takes
    load: objects created later are collected as usual.
    """
    gc.collect()
    gc.freeze()
