"""The bounded holders of applied changes: the leader's (for its followers) and a
follower's stash (until its applier reaches them)."""

from __future__ import annotations

from cairn.proto import replication_pb2 as rpb
from cairn.storage.core.replication.applied_changes import (
    ChangesStash,
    ChangesUse,
    KeptChanges,
    commit_for_followers,
    use_of,
)


def _group(first: int, last: int, size: int = 10, term: int = 1) -> rpb.AppliedChanges:
    return rpb.AppliedChanges(
        first_offset=first, last_offset=last, last_term=term, changes=b"x" * size
    )


def test_the_leader_keeps_its_latest_groups_within_both_bounds() -> None:
    kept = KeptChanges(max_groups=3, max_bytes=100)
    for first in range(0, 10, 2):
        kept.record(first, first + 1, 1, b"x" * 10)
    # Five recorded, three kept: the oldest go first.
    assert [group.first_offset for group in kept.between(-1, 100, 1000)] == [4, 6, 8]
    kept.record(10, 11, 1, b"x" * 90)
    # 90 + 10 bytes fit the 100-byte bound; the group before them does not.
    assert [group.first_offset for group in kept.between(-1, 100, 1000)] == [8, 10]
    kept.record(12, 12, 1, b"x" * 101)
    # Larger than the bound: not kept at all (followers apply it themselves),
    # and nothing else was evicted for it.
    assert [group.first_offset for group in kept.between(-1, 100, 1000)] == [8, 10]


def test_the_leader_hands_out_groups_after_those_sent_up_to_a_bound() -> None:
    kept = KeptChanges(max_groups=10, max_bytes=1000)
    for first in range(0, 8, 2):
        kept.record(first, first + 1, 1, b"x" * 10)
    # Groups end at 1, 3, 5, 7: those ending after 1 and by 5 (the commit offset).
    assert [group.last_offset for group in kept.between(1, 5, 1000)] == [3, 5]
    # At most 15 bytes: one group, and always at least one.
    assert [group.last_offset for group in kept.between(1, 7, 15)] == [3]
    assert [group.last_offset for group in kept.between(1, 7, 5)] == [3]
    assert kept.between(7, 100, 1000) == []
    # Every follower's stream carried the groups ending by 3: those go.
    kept.drop_through(3)
    assert [group.last_offset for group in kept.between(-1, 100, 1000)] == [5, 7]
    kept.clear()
    assert kept.between(-1, 100, 1000) == [] and len(kept) == 0


def test_a_follower_stashes_groups_ahead_of_what_it_applied_within_both_bounds() -> None:
    stash = ChangesStash(max_groups=3, max_bytes=35)
    # A group at or before the applied offset, or malformed, is not kept.
    stash.add([_group(3, 4), _group(5, 4), _group(5, 6), _group(7, 8)], applied_offset=4)
    assert len(stash) == 2
    stash.add([_group(9, 10), _group(11, 12)], applied_offset=4)
    # Four groups of 10 bytes exceed both bounds: the oldest (5) is evicted.
    assert stash.take(5) is None
    assert len(stash) == 3
    # A group sent again replaces the one held (same first offset).
    stash.add([_group(7, 8, size=5, term=2)], applied_offset=4)
    group = stash.take(7)
    assert group is not None and group.last_term == 2
    assert stash.take(7) is None
    stash.drop_before(11)
    assert stash.take(9) is None
    assert stash.take(11) is not None
    assert len(stash) == 0


def test_a_follower_stash_bound_in_bytes_counts_what_it_holds() -> None:
    stash = ChangesStash(max_groups=100, max_bytes=30)
    for first in range(10):
        stash.add([_group(first * 2, first * 2 + 1)], applied_offset=-1)
        stash.take(first * 2)  # applied: its bytes no longer count
    stash.add([_group(100, 101), _group(102, 103), _group(104, 105)], applied_offset=-1)
    assert len(stash) == 3  # 30 bytes: within the bound
    stash.clear()
    assert len(stash) == 0


def test_followers_are_told_the_commit_offset_only_as_far_as_the_leader_applied() -> None:
    assert commit_for_followers(commit_offset=9, applied_offset=7) == 7
    assert commit_for_followers(commit_offset=9, applied_offset=9) == 9


def test_a_follower_writes_a_group_only_for_the_entries_it_holds_once_appliable() -> None:
    group = _group(5, 8, term=3)
    # Right after what it applied, its log ending in the leader's term there,
    # committed and durable: written.
    assert use_of(group, 4, apply_limit=8, last_logged_offset=9, term_at_group_end=3) is (
        ChangesUse.WRITE
    )
    # Not yet committed or durable here: wait for it.
    assert use_of(group, 4, apply_limit=6, last_logged_offset=9, term_at_group_end=3) is (
        ChangesUse.WAIT
    )
    # Another term at the group's end (other entries), the entries not all held, or
    # a group that does not start right after what is applied: apply the entries.
    assert use_of(group, 4, apply_limit=8, last_logged_offset=9, term_at_group_end=2) is (
        ChangesUse.APPLY
    )
    assert use_of(group, 4, apply_limit=8, last_logged_offset=7, term_at_group_end=None) is (
        ChangesUse.APPLY
    )
    assert use_of(group, 3, apply_limit=8, last_logged_offset=9, term_at_group_end=3) is (
        ChangesUse.APPLY
    )


def test_a_follower_looks_at_a_stashed_group_without_taking_it() -> None:
    """A group for entries not yet appliable stays where it is until they are."""
    stash = ChangesStash(max_groups=10, max_bytes=1000)
    stash.add([_group(5, 6), _group(7, 8)], applied_offset=4)
    seen = stash.get(5)
    assert seen is not None and seen.last_offset == 6
    assert stash.get(9) is None
    assert len(stash) == 2
    assert stash.take(5) is seen
