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
    constructor_first._init_barrier = threading.Barrier(2)
    seen_by_constructor = constructor_first._init_barrier
    assert constructor_first._init_barrier is seen_by_constructor  # the thread, late


def test_later_shard_map_updates_pass_the_barrier() -> None:
    """The map thread meets the start-up barrier at every update: after the first
    meeting it must not block (it would for good, and close() joins it)."""
    oxia_startup.install()
    discovery = ServiceDiscovery.__new__(ServiceDiscovery)
    updates_seen = threading.Event()

    def map_thread() -> None:
        for _ in range(3):  # the first map, then two updates
            discovery._init_barrier.wait()
        updates_seen.set()

    thread = threading.Thread(target=map_thread, daemon=True)
    thread.start()
    discovery._init_barrier = threading.Barrier(2)
    discovery._init_barrier.wait(timeout=30)
    assert updates_seen.wait(30)
    thread.join(timeout=30)


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
