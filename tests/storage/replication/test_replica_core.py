"""The replica's role/term rules and the leader's follower bookkeeping."""

from __future__ import annotations

import pytest

from cairn.common.errors import InvalidTerm, NotLeader
from cairn.storage.core.replication.leader import FollowerPhase, LeaderCore, NotAFollower
from cairn.storage.core.replication.replica import (
    Member,
    OutOfOrderEntries,
    ReplicaCore,
    ReplicationInvariantError,
    Role,
)
from cairn.storage.core.replication.terms import EntryId, TermHistory

A = Member("a:1", "a:2")
B = Member("b:1", "b:2")
C = Member("c:1", "c:2")


def log_of(terms: list[int]) -> TermHistory:
    log = TermHistory()
    for offset, term in enumerate(terms):
        log.append(term, offset)
    return log


def test_fencing_refuses_older_terms_and_a_second_fence_of_a_live_role() -> None:
    replica = ReplicaCore(0, term=3, log=log_of([1, 3]))
    assert replica.role is Role.FENCED
    with pytest.raises(InvalidTerm):
        replica.fence(2)
    assert replica.fence(3) is False  # a retry of the same fence
    assert replica.fence(4) is True
    replica.become_leader(4, A)
    with pytest.raises(InvalidTerm, match="already leader"):
        replica.fence(4)
    assert replica.fence(5) is True
    assert replica.role is Role.FENCED and replica.leader is None


def test_leadership_only_from_fenced_in_the_same_term() -> None:
    replica = ReplicaCore(0, term=2, log=log_of([1, 1, 2]))
    with pytest.raises(InvalidTerm):
        replica.become_leader(3, A)
    assert replica.become_leader(2, A) == EntryId(2, 3)
    with pytest.raises(InvalidTerm):
        replica.become_leader(2, A)
    replica.check_leader()


def test_a_follower_takes_newer_terms_from_a_leader_but_not_a_rival_in_its_term() -> None:
    replica = ReplicaCore(0, term=2, log=log_of([1]))
    assert replica.follow(5, A) is True
    assert replica.role is Role.FOLLOWER
    assert replica.follow(5, A) is False
    with pytest.raises(InvalidTerm, match="is led by"):
        replica.follow(5, B)
    with pytest.raises(InvalidTerm):
        replica.follow(4, B)
    with pytest.raises(NotLeader) as raised:
        replica.check_leader()
    assert raised.value.leader_hint == "a:1"


def test_entries_must_continue_the_log_in_the_current_term() -> None:
    replica = ReplicaCore(0, term=1, log=log_of([1, 1]))
    with pytest.raises(InvalidTerm):
        replica.check_entries(1, 2)  # not following anyone yet
    replica.follow(1, A)
    replica.check_entries(1, 2)
    with pytest.raises(OutOfOrderEntries):
        replica.check_entries(1, 4)
    with pytest.raises(InvalidTerm):
        replica.check_entries(2, 2)


def test_truncation_keeps_the_shared_prefix_and_never_a_committed_entry_is_dropped() -> None:
    follower = ReplicaCore(0, term=2, log=log_of([1, 1, 1, 1]), commit_offset=1)
    assert follower.truncation_point(log_of([1, 1, 2])) == 1
    assert follower.truncation_point(log_of([1, 1, 1, 2, 2])) == 2
    committed_too_far = ReplicaCore(0, term=2, log=log_of([1, 1, 1, 1]), commit_offset=3)
    with pytest.raises(ReplicationInvariantError):
        committed_too_far.truncation_point(log_of([1, 1, 2, 2]))


def test_follower_commit_is_bounded_by_what_it_holds_durably_and_never_goes_back() -> None:
    replica = ReplicaCore(0, term=1, log=log_of([1] * 10), commit_offset=2)
    assert replica.learn_commit(leader_commit_offset=8, durable_offset=5) == 5
    assert replica.learn_commit(leader_commit_offset=3, durable_offset=9) == 5
    assert replica.learn_commit(leader_commit_offset=9, durable_offset=9) == 9


def test_leader_streams_in_a_bounded_window_and_commits_on_a_majority() -> None:
    leader = LeaderCore(3, A, [B, C], commit_offset=4, term_start_offset=5, max_in_flight_entries=4)
    assert leader.on_truncated(B.internal_address, EntryId(2, 4), our_first_offset=0) is (
        FollowerPhase.STREAMING
    )
    assert leader.to_send(B.internal_address, our_last_offset=20) == (5, 8)
    leader.on_sent(B.internal_address, 8)
    assert leader.to_send(B.internal_address, our_last_offset=20) is None  # window full
    assert leader.on_local_durable(20) == 4
    assert leader.on_ack(B.internal_address, leader.term, 6) == 6
    assert leader.to_send(B.internal_address, our_last_offset=20) == (9, 10)
    # C is behind our trimmed WAL: it needs a snapshot.
    assert leader.on_truncated(C.internal_address, EntryId(1, 1), our_first_offset=3) is (
        FollowerPhase.SNAPSHOT
    )
    assert leader.to_send(C.internal_address, 20) is None
    leader.on_snapshot_installed(C.internal_address, EntryId(3, 12))
    assert leader.commit_offset == 12
    assert leader.to_send(C.internal_address, 20) == (13, 16)


def test_a_new_term_commits_although_its_followers_lag_twice_the_window() -> None:
    """A leader restarted with a long tail it does not know to be committed
    (commit 1429, head 2686: the live-lock found with real processes) and
    followers far behind (one wiped, one lagging): the window moves with their
    durable acknowledgements, though they apply nothing past the commit offset
    until the term's first entry (2687) reaches one of them."""
    window = 1024
    commit, term_start = 1429, 2687
    leader = LeaderCore(
        5,
        A,
        [B, C],
        commit_offset=commit,
        term_start_offset=term_start,
        max_in_flight_entries=window,
    )
    leader.on_local_durable(term_start)
    heads = {B.internal_address: -1, C.internal_address: 180}
    assert all(term_start - head >= 2 * window for head in heads.values())
    for member, head in heads.items():
        leader.on_truncated(member, EntryId(4 if head >= 0 else -1, head), our_first_offset=0)
    for _ in range(10):  # far more rounds than the lag needs
        for member in heads:
            span = leader.to_send(member, our_last_offset=term_start)
            if span is None:
                continue
            leader.on_sent(member, span[1])
            # Durable at once; applied only as far as the commit offset it learned.
            leader.on_ack(member, leader.term, span[1], min(span[1], leader.commit_offset))
    assert leader.commit_offset == term_start


def test_nothing_commits_before_the_term_start_entry_is_on_a_majority() -> None:
    leader = LeaderCore(3, A, [B, C], commit_offset=1, term_start_offset=6, max_in_flight_entries=8)
    leader.on_local_durable(6)
    leader.on_truncated(B.internal_address, EntryId(2, 5), our_first_offset=0)
    assert leader.commit_offset == 1
    assert leader.on_ack(B.internal_address, leader.term, 6) == 6


def test_an_added_follower_votes_once_caught_up_and_a_removed_one_stops_counting() -> None:
    leader = LeaderCore(1, A, [B], commit_offset=-1, term_start_offset=0, max_in_flight_entries=8)
    leader.on_local_durable(10)
    leader.on_truncated(B.internal_address, EntryId(1, -1), our_first_offset=0)
    leader.on_ack(B.internal_address, leader.term, 10)
    assert leader.commit_offset == 10
    leader.add_follower(C)
    assert not leader.is_voting(C.internal_address)
    leader.on_truncated(C.internal_address, EntryId(-1, -1), our_first_offset=0)
    leader.on_ack(C.internal_address, leader.term, 10)
    assert leader.is_voting(C.internal_address)
    leader.on_local_durable(12)
    assert leader.on_ack(B.internal_address, leader.term, 12) == 12
    # 11..12 are on A and B only: without B they would be on one of {A, C}.
    leader.remove_follower(B.internal_address)
    assert leader.is_leaving(B.internal_address)
    assert leader.is_voting(B.internal_address)
    leader.on_ack(C.internal_address, leader.term, 12)
    assert not leader.is_voting(B.internal_address)
    assert B.internal_address not in leader.followers
    leader.on_local_durable(15)
    assert leader.commit_offset == 12  # A and C: both needed now
    assert leader.on_ack(C.internal_address, leader.term, 15) == 15


def test_a_late_truncate_of_the_same_leader_keeps_the_entries_of_its_term() -> None:
    """A Truncate that arrives after entries streamed in (a retried call delivered
    late) carries an older copy of the leader's log; entries of the current term
    came from that same leader and stay."""
    replica = ReplicaCore(0, term=2, log=log_of([1, 1, 2, 2, 2]), commit_offset=1)
    replica.follow(2, A)
    stale_leader_log = log_of([1, 1, 2])
    assert replica.truncation_point(stale_leader_log) == 4


def test_ensemble_changes_and_deletions_check_the_term() -> None:
    replica = ReplicaCore(0, term=3, log=log_of([1, 3]))
    with pytest.raises(InvalidTerm, match="not leader of term 3"):
        replica.check_leading(3)
    replica.become_leader(3, A)
    replica.check_leading(3)
    with pytest.raises(InvalidTerm):
        replica.check_leading(2)
    replica.check_not_older(3)
    with pytest.raises(InvalidTerm):
        replica.check_not_older(2)


def test_answers_of_a_member_whose_removal_finished_end_its_stream() -> None:
    """B's removal waits for C to hold everything committed, and finishes on
    C's acknowledgement while B's answers are still on their way: they refer to
    a follower the leader no longer has (its stream ends), not to a crash."""
    leader = LeaderCore(
        1, A, [B, C], commit_offset=-1, term_start_offset=0, max_in_flight_entries=8
    )
    leader.on_local_durable(5)
    leader.on_truncated(B.internal_address, EntryId(1, 5), our_first_offset=0)
    assert leader.commit_offset == 5
    leader.remove_follower(B.internal_address)
    assert leader.is_leaving(B.internal_address)
    leader.on_truncated(C.internal_address, EntryId(1, 5), our_first_offset=0)
    assert B.internal_address not in leader.followers
    for answer in (
        lambda: leader.on_truncated(B.internal_address, EntryId(1, 5), our_first_offset=0),
        lambda: leader.on_snapshot_installed(B.internal_address, EntryId(1, 5)),
        lambda: leader.on_sent(B.internal_address, 6),
        lambda: leader.progress(B.internal_address),
    ):
        with pytest.raises(NotAFollower):
            answer()
    assert leader.on_ack(B.internal_address, 1, 6) == 5  # counted for nothing


def test_a_snapshot_is_installed_only_while_its_leader_is_still_followed() -> None:
    replica = ReplicaCore(0, term=3, log=log_of([1, 3]))
    replica.follow(3, A)
    replica.check_still_following(3, A)
    replica.fence(4)  # a newer term began during the transfer
    with pytest.raises(InvalidTerm, match="began during the snapshot of term 3"):
        replica.check_still_following(3, A)
    replica.follow(4, B)
    with pytest.raises(InvalidTerm):
        replica.check_still_following(4, A)
