"""A call's retry budget: backoff between attempts, and the whole deadline used."""

from __future__ import annotations

import asyncio
from typing import cast

import grpc
import pytest

from cairn.client import attempts as attempts_module
from cairn.client import errors
from cairn.client.attempts import Attempts
from cairn.client.failures import Retry, ServerStatus
from cairn.client.options import ClientOptions

UNAVAILABLE = Retry(ServerStatus(grpc.StatusCode.UNAVAILABLE, "", "leader moving", None))


class Clock:
    """The event loop's clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def time(self) -> float:
        return self.now


def budget(clock: Clock, timeout_s: float, initial_s: float, max_s: float) -> Attempts:
    options = ClientOptions(
        request_timeout_s=timeout_s,
        retry_initial_backoff_s=initial_s,
        retry_max_backoff_s=max_s,
    )
    return Attempts("put", "/k", options, cast(asyncio.AbstractEventLoop, clock))


@pytest.fixture
def longest_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Full jitter drawing its upper bound every time."""
    monkeypatch.setattr(attempts_module.random, "uniform", lambda low, high: high)


@pytest.mark.usefixtures("longest_waits")
def test_backoff_doubles_up_to_its_bound() -> None:
    clock = Clock()
    attempts = budget(clock, timeout_s=60.0, initial_s=0.1, max_s=0.5)
    assert [attempts.next_delay_s(UNAVAILABLE) for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]


@pytest.mark.usefixtures("longest_waits")
def test_a_wait_past_the_deadline_becomes_one_last_attempt_before_it() -> None:
    clock = Clock()
    attempts = budget(clock, timeout_s=1.0, initial_s=0.8, max_s=1.0)
    assert attempts.next_delay_s(UNAVAILABLE) == pytest.approx(0.8)
    clock.now += 0.8 + 0.05  # the wait, then an attempt that failed again
    # The next wait (up to 1.6 s, bounded to 1 s) would pass the deadline 0.15 s
    # away: the call waits half of that and tries once more instead of giving up.
    assert attempts.next_delay_s(UNAVAILABLE) == pytest.approx(0.075)
    clock.now += 0.075 + 0.01
    with pytest.raises(errors.RequestTimeout, match="UNAVAILABLE leader moving"):
        attempts.next_delay_s(UNAVAILABLE)


def test_no_time_left_is_a_timeout() -> None:
    clock = Clock()
    attempts = budget(clock, timeout_s=1.0, initial_s=0.01, max_s=1.0)
    clock.now += 1.0
    with pytest.raises(errors.RequestTimeout, match="put '/k' did not succeed"):
        attempts.next_delay_s(UNAVAILABLE)
