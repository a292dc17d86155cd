"""The released `oxia` client (0.2.1) as this test process uses it, with its
start-up race worked around from outside the package.

`ServiceDiscovery.__init__` starts the thread that reads the shard map before
it makes the barrier that thread meets it at. On a loaded machine the
constructor can be descheduled in between; a thread that gets the first map
then dies with AttributeError, and the constructor waits its 30 s for nothing
(issue 38 saw this fail tests). `install` makes the barrier a shared slot:
whichever side asks first creates it, and both meet the same one; nothing else
of the client changes. The writer process (oxia_writer.py) runs the client
exactly as released, and works around the race by racing clients instead.
"""

from __future__ import annotations

import threading
from typing import Any

from oxia.internal.service_discovery import ServiceDiscovery

_SLOT = "_cairn_init_barrier"
_CREATING = threading.Lock()


class _FirstComerBarrier:
    """A data descriptor for `ServiceDiscovery._init_barrier`: the first read
    or write fixes the instance's barrier; later writes keep it."""

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        with _CREATING:
            barrier = instance.__dict__.get(_SLOT)
            if barrier is None:
                barrier = instance.__dict__[_SLOT] = threading.Barrier(2)
        return barrier

    def __set__(self, instance: Any, value: threading.Barrier) -> None:
        with _CREATING:
            instance.__dict__.setdefault(_SLOT, value)


def install() -> None:
    """Idempotent: the class attribute is replaced once per process."""
    if not isinstance(ServiceDiscovery.__dict__.get("_init_barrier"), _FirstComerBarrier):
        setattr(ServiceDiscovery, "_init_barrier", _FirstComerBarrier())  # noqa: B010
