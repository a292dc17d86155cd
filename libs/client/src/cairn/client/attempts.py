"""The retry budget of one call: a deadline, and exponential backoff with full
jitter between attempts. The whole budget is used: when a jittered wait would
reach past the deadline, the call waits half of what is left and makes one last
attempt in the other half, rather than giving up with time to spare. Cheap to
make (every call makes one): the message is formatted only if the deadline
passes."""

from __future__ import annotations

import asyncio
import random

from cairn.client import errors
from cairn.client.failures import Retry
from cairn.client.options import ClientOptions


class Attempts:
    __slots__ = (
        "_backoff_s",
        "_last_attempt_due",
        "_loop",
        "_options",
        "deadline",
        "last",
        "subject",
        "verb",
    )

    def __init__(
        self,
        verb: str,
        subject: object,
        options: ClientOptions,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        # On the event loop's clock, for timeout_at and call_at.
        self._loop = loop = loop or asyncio.get_running_loop()
        self.deadline = loop.time() + options.request_timeout_s
        self._options = options
        self._backoff_s = -1.0  # set at the first retry: most calls never retry
        self._last_attempt_due = False
        self.verb = verb
        self.subject = subject
        self.last: Retry | None = None

    @classmethod
    def of(cls, verb: str, subject: object, options: ClientOptions) -> Attempts:
        return cls(verb, subject, options)

    def remaining_s(self) -> float:
        return self.deadline - self._loop.time()

    def timeout(self) -> errors.RequestTimeout:
        last = f": {self.last.status.code.name} {self.last.status.message}" if self.last else ""
        what = f"{self.verb} {self.subject!r}" if self.subject is not None else self.verb
        return errors.RequestTimeout(f"{what} did not succeed before its deadline{last}")

    def check(self) -> float:
        """The time left; RequestTimeout when none is."""
        remaining = self.remaining_s()
        if remaining <= 0:
            raise self.timeout()
        return remaining

    def next_delay_s(self, retry: Retry) -> float:
        """How long to wait before the next attempt (RequestTimeout once the last
        attempt the deadline leaves room for has been made)."""
        self.last = retry
        remaining = self.check()
        if self._backoff_s < 0:
            self._backoff_s = self._options.retry_initial_backoff_s
        delay = random.uniform(0, self._backoff_s)
        self._backoff_s = min(self._backoff_s * 2, self._options.retry_max_backoff_s)
        if delay < remaining:
            return delay
        if self._last_attempt_due:
            raise self.timeout()
        self._last_attempt_due = True
        return remaining / 2
