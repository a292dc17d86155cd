"""What happens to a shard replica, as its core is told (ShardCore.step).

Each event is a value: the driver builds it from a request or from what its
I/O finished, and carries out the core's answer (ready.py). Events that only
report progress (durable, applied, acknowledged up to an offset) are still
`on_*` calls of the core; these are the ones whose answer is a list of things
to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cairn.storage.core.replication.replica import Member
from cairn.storage.core.replication.terms import TermHistory


@dataclass(frozen=True, slots=True)
class NewTerm:
    """The controller fences the replica at `term` before it elects a leader;
    the answer is the replica's head and commit offset."""

    term: int


@dataclass(frozen=True, slots=True)
class BecomeLeader:
    """The controller makes the fenced replica (`me`) leader of `term`, with
    `followers` (`incarnations`: of their data, as the controller recorded
    them); each follower's stream has at most `window` entries in flight."""

    term: int
    me: Member
    followers: tuple[Member, ...]
    incarnations: Mapping[str, int] | None
    window: int


@dataclass(frozen=True, slots=True)
class Truncate:
    """The leader of `term` opens a stream: follow it, and keep what of the log
    agrees with the leader's (`leader_log`); the answer is the head."""

    term: int
    leader: Member
    leader_log: TermHistory


@dataclass(frozen=True, slots=True)
class SnapshotOffered:
    """The leader of `term` starts sending a snapshot: follow it (the snapshot
    itself replaces the log and KV once received whole)."""

    term: int
    leader: Member


@dataclass(frozen=True, slots=True)
class Closing:
    """The replica shuts down: it stops leading, if it did."""


Event = NewTerm | BecomeLeader | Truncate | SnapshotOffered | Closing
