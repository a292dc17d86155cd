"""A leader's applied changes, kept for its followers, and a follower's stash of them.

Applying entries is deterministic, so a follower holding the same entries as its
leader (the same term at the same offset: the logs then agree up to there)
would write exactly the KV changes the leader wrote. The leader therefore sends
what each of its apply groups wrote (AppliedChanges in replication.proto) along
with the commit offset, and a follower writes those bytes instead of running the
apply step itself, which was most of a follower's CPU (a put's version, its
notification, the header lookups). A follower without them, for whatever
reason (fallen behind what the leader keeps, a group that does not line up with
its own applied offset, another term at the group's end), applies its entries
itself, as it always could: these are an optimisation, never a requirement.

Both sides are bounded in groups and bytes. The two rules that make this safe
are here too, with no I/O: what commit offset a leader tells its followers, and
when a follower may use a group.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable

from cairn.proto import replication_pb2 as rpb


def commit_for_followers(commit_offset: int, applied_offset: int) -> int:
    """The commit offset a leader tells its followers: as far as it applied, so
    that a follower learns a commit together with the changes written for it,
    not before them (when it would apply those entries itself)."""
    return min(commit_offset, applied_offset)


class ChangesUse(enum.Enum):
    """What a follower does with the group that starts right after its applied
    offset."""

    WRITE = "write"  # write its changes: the group's entries are then applied
    APPLY = "apply"  # not usable: apply the entries
    WAIT = "wait"  # usable once its entries are committed and durable here


def use_of(
    group: rpb.AppliedChanges,
    applied_offset: int,
    apply_limit: int,
    last_logged_offset: int,
    term_at_group_end: int | None,
) -> ChangesUse:
    """Whether a follower (applied up to `applied_offset`, allowed to apply up to
    `apply_limit`: committed and durable, holding entries up to
    `last_logged_offset`, with `term_at_group_end` the term of its entry at the
    group's last offset) may write the group's changes.

    The group must start right after what is applied, and the follower must hold
    the group's last entry with the leader's term there: the logs then agree up to
    it, so the follower's entries are the ones the changes were made from."""
    last = group.last_offset
    if (
        group.first_offset != applied_offset + 1
        or last_logged_offset < last
        or term_at_group_end != group.last_term
    ):
        return ChangesUse.APPLY
    return ChangesUse.WAIT if last > apply_limit else ChangesUse.WRITE


class KeptChanges:
    """The leader's side: the changes of its latest apply groups, oldest first."""

    def __init__(self, max_groups: int, max_bytes: int) -> None:
        self.max_groups = max_groups
        self.max_bytes = max_bytes
        self._groups: deque[rpb.AppliedChanges] = deque()
        self._bytes = 0

    def record(self, first_offset: int, last_offset: int, last_term: int, changes: bytes) -> None:
        if len(changes) > self.max_bytes:
            return  # too large to keep: followers apply this group themselves
        self._groups.append(
            rpb.AppliedChanges(
                first_offset=first_offset,
                last_offset=last_offset,
                last_term=last_term,
                changes=changes,
            )
        )
        self._bytes += len(changes)
        while len(self._groups) > self.max_groups or self._bytes > self.max_bytes:
            self._bytes -= len(self._groups.popleft().changes)

    def between(
        self, after_offset: int, through_offset: int, max_bytes: int
    ) -> list[rpb.AppliedChanges]:
        """Groups ending in (after_offset, through_offset], oldest first, up to
        `max_bytes` of changes (at least one group if any)."""
        found: list[rpb.AppliedChanges] = []
        size = 0
        for group in self._groups:
            if group.last_offset <= after_offset:
                continue
            if group.last_offset > through_offset:
                break
            if found and size + len(group.changes) > max_bytes:
                break
            found.append(group)
            size += len(group.changes)
        return found

    def drop_through(self, offset: int) -> None:
        """Forget the groups ending at or before `offset` (every follower's stream
        carried them)."""
        groups = self._groups
        while groups and groups[0].last_offset <= offset:
            self._bytes -= len(groups.popleft().changes)

    def clear(self) -> None:
        self._groups.clear()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._groups)


class ChangesStash:
    """The follower's side: groups received from its leader, by first offset, until
    applied, dropped as stale, or evicted (oldest first) by the bounds."""

    def __init__(self, max_groups: int, max_bytes: int) -> None:
        self.max_groups = max_groups
        self.max_bytes = max_bytes
        self._groups: dict[int, rpb.AppliedChanges] = {}
        self._bytes = 0

    def add(self, groups: Iterable[rpb.AppliedChanges], applied_offset: int) -> None:
        for group in groups:
            first = group.first_offset
            if first <= applied_offset or group.last_offset < first:
                continue
            self.take(first)  # a group sent again replaces the one held
            self._groups[first] = group
            self._bytes += len(group.changes)
        while len(self._groups) > self.max_groups or self._bytes > self.max_bytes:
            self.take(next(iter(self._groups)))

    def get(self, first_offset: int) -> rpb.AppliedChanges | None:
        """The group starting at `first_offset`, kept."""
        return self._groups.get(first_offset)

    def take(self, first_offset: int) -> rpb.AppliedChanges | None:
        group = self._groups.pop(first_offset, None)
        if group is not None:
            self._bytes -= len(group.changes)
        return group

    def drop_before(self, offset: int) -> None:
        """Forget the groups starting before `offset` (applied some other way)."""
        for first in [first for first in self._groups if first < offset]:
            self.take(first)

    def clear(self) -> None:
        self._groups.clear()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._groups)
