"""The leader's lease: when a leader may answer reads and session keep-alives.

Storage pods never elect: the controller fences a shard (NewTerm) and names a new
leader at once. An old leader cut off from the controller is not told, and would
go on answering reads from a state that no longer grows: stale reads, and an
ephemeral record's session kept alive on two leaders. Reads are linearizable
instead, by a lease that rests on the voters' answers:

- Every message a leader sends a follower carries the time it was sent (the
  leader's monotonic clock); the follower echoes the latest such time in its
  answers, and answers only while it still follows that leader's term (a fenced
  follower ends the stream instead).
- The lease starts at the latest time that a majority of the voters (the leader
  counting as one, at "now") have echoed, and lasts `duration_ms`. While it
  holds, no other leader can have been elected: an election fences a majority,
  which includes one of those voters, and that voter was fenced only after it
  echoed.
- A new leader serves nothing (no write is acknowledged, no read answered)
  until any older leader's lease must have run out: `takeover_wait_ms` after it
  was made leader, a wait that covers clocks whose rates differ by up to
  `max_clock_drift` (each way). A leader without followers is the whole ensemble:
  every earlier leader was a member it replaced, fenced when it answered the
  NewTerm that elected this one, so it waits for nothing.

The clock-drift bound is an assumption: monotonic clocks that NTP slews stay far
within the 5% the defaults allow, but a VM paused and resumed can break it, as it
breaks every lease. Pure: the runtime passes the time in.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field

NEVER_MS = -(2**62)


def takeover_wait_ms(duration_ms: int, max_clock_drift: float) -> int:
    """How long a new leader with followers waits before it serves: an old lease
    of `duration_ms` by a clock running slow by `max_clock_drift` ends within
    duration / (1 - drift) of real time, and our wait, by a clock running fast by
    the same bound, is at least wait / (1 + drift) of it."""
    if not 0 <= max_clock_drift < 1:
        raise ValueError("the clock drift bound must be in [0, 1)")
    return math.ceil(duration_ms * (1 + max_clock_drift) / (1 - max_clock_drift))


@dataclass
class LeaderLease:
    """One leadership's lease. `me` is the leader's member name."""

    me: str
    duration_ms: int
    # member -> the latest send time (our clock) of a message it answered.
    echoes: dict[str, int] = field(default_factory=dict)

    def on_echo(self, member: str, sent_ms: int) -> None:
        """`member` answered, still following us, a message we sent at `sent_ms`."""
        if sent_ms > self.echoes.get(member, NEVER_MS):
            self.echoes[member] = sent_ms

    def forget(self, member: str) -> None:
        """A member left the ensemble (or came back as another replica)."""
        self.echoes.pop(member, None)

    def expires_at_ms(
        self, voters: Collection[str], now_ms: int, majority: int | None = None
    ) -> int:
        """When the lease ends, judged by the voters the leader's quorum counts
        (learners do not: they do not count toward commits either), `majority`
        of which must have echoed: by default a majority of them; the quorum's
        own, which also counts members readmitted after losing their data, is
        never smaller."""
        needed = len(voters) // 2 + 1 if majority is None else majority
        if needed > len(voters):
            return NEVER_MS
        times = sorted(
            (now_ms if voter == self.me else self.echoes.get(voter, NEVER_MS) for voter in voters),
            reverse=True,
        )
        return times[needed - 1] + self.duration_ms

    def holds(self, voters: Collection[str], now_ms: int, majority: int | None = None) -> bool:
        return now_ms < self.expires_at_ms(voters, now_ms, majority)
