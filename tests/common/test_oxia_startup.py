"""The test process's work-around for the released oxia client's start-up race
(support/oxia_startup.py)."""

from __future__ import annotations

import threading

from oxia.internal.service_discovery import ServiceDiscovery

from support import oxia_startup


def test_the_map_thread_and_the_constructor_meet_at_one_barrier_whoever_comes_first() -> None:
    oxia_startup.install()
    thread_first = ServiceDiscovery.__new__(ServiceDiscovery)
    seen_by_thread = thread_first._init_barrier  # the map arrived first
    thread_first._init_barrier = threading.Barrier(2)  # the constructor, late
    assert thread_first._init_barrier is seen_by_thread

    constructor_first = ServiceDiscovery.__new__(ServiceDiscovery)
    made = threading.Barrier(2)
    constructor_first._init_barrier = made
    assert constructor_first._init_barrier is made


def test_the_shared_barrier_releases_both_sides() -> None:
    oxia_startup.install()
    discovery = ServiceDiscovery.__new__(ServiceDiscovery)
    released = threading.Event()

    def map_thread() -> None:
        discovery._init_barrier.wait(timeout=30)
        released.set()

    thread = threading.Thread(target=map_thread)
    thread.start()
    discovery._init_barrier = threading.Barrier(2)
    discovery._init_barrier.wait(timeout=30)
    thread.join(timeout=30)
    assert released.is_set()
