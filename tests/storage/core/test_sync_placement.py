"""Where WAL fsyncs run: inline only while the device syncs fast on average."""

from __future__ import annotations

import pytest

from cairn.storage.core.sync_placement import SyncPlacement

THRESHOLD_S = 0.0003


def test_starts_in_the_thread_and_moves_inline_once_syncs_prove_fast() -> None:
    placement = SyncPlacement(THRESHOLD_S)
    assert not placement.inline
    for _ in range(30):
        placement.observe(0.00005)
    assert placement.inline


def test_one_stall_sends_syncs_back_to_the_thread_until_fast_ones_return() -> None:
    placement = SyncPlacement(THRESHOLD_S)
    for _ in range(50):
        placement.observe(0.00005)
    placement.observe(0.030)  # a 30 ms device stall
    assert not placement.inline
    steps = 0
    while not placement.inline:
        placement.observe(0.00005)
        steps += 1
    assert 10 < steps < 100


def test_slow_devices_stay_in_the_thread() -> None:
    placement = SyncPlacement(THRESHOLD_S)
    for _ in range(1000):
        placement.observe(0.002)
        assert not placement.inline


def test_zero_threshold_never_syncs_inline() -> None:
    placement = SyncPlacement(0)
    for _ in range(100):
        placement.observe(0.0)
    assert not placement.inline


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="smoothing"):
        SyncPlacement(THRESHOLD_S, smoothing=0)
