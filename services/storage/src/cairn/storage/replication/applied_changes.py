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

Both sides are bounded in groups and bytes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from cairn.proto import replication_pb2 as rpb


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
