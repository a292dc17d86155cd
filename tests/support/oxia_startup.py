"""The released `oxia` client (0.2.1) as this test process uses it, with its
start-up race worked around from outside the package.

`ServiceDiscovery.__init__` starts the thread that reads the shard map before
it makes the barrier that thread meets it at. On a loaded machine the
constructor can be descheduled in between; a thread that gets the first map
then dies with AttributeError, and the constructor waits its 30 s for nothing
(issue 38 saw this fail tests). The same thread meets that barrier again at every
later shard-map update, with no one on the other side, and blocks for good, so a
client that saw the map change (a leader elected after it connected) hangs in
close(). `install` makes the barrier a shared slot:
whichever side asks first creates it, both meet the same one, once; nothing else
of the client changes. The writer process (oxia_writer.py) runs the client
exactly as released, and works around the race by racing clients instead.
"""

from __future__ import annotations

import threading
from typing import Any

from oxia.internal.service_discovery import ServiceDiscovery

_SLOT = "_cairn_init_barrier"
_CREATING = threading.Lock()


class _OnceBarrier:
    """threading.Barrier(2) for the first meeting only. The client's shard-map
    thread waits on its start-up barrier again at every later shard-map update,
    with no one on the other side: it would block there for good, and the
    client's close() (which joins that thread) with it. Later waits return."""

    def __init__(self) -> None:
        self._barrier = threading.Barrier(2)
        self._met = threading.Event()

    def wait(self, timeout: float | None = None) -> int:
        if self._met.is_set():
            return 0
        index = self._barrier.wait(timeout)
        self._met.set()
        return index


class _FirstComerBarrier:
    """A data descriptor for `ServiceDiscovery._init_barrier`: the first read
    or write fixes the instance's barrier; later writes keep it."""

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        with _CREATING:
            barrier = instance.__dict__.get(_SLOT)
            if barrier is None:
                barrier = instance.__dict__[_SLOT] = _OnceBarrier()
        return barrier

    def __set__(self, instance: Any, value: threading.Barrier) -> None:
        # The constructor's own Barrier(2) is replaced by the shared one-time barrier.
        with _CREATING:
            instance.__dict__.setdefault(_SLOT, _OnceBarrier())


def install() -> None:
    """Idempotent: the class attribute is replaced once per process."""
    if not isinstance(ServiceDiscovery.__dict__.get("_init_barrier"), _FirstComerBarrier):
        setattr(ServiceDiscovery, "_init_barrier", _FirstComerBarrier())  # noqa: B010
