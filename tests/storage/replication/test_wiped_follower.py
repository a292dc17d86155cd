"""Issue 38, hole 1: a wiped follower re-added in place must not keep its vote
and its old acknowledgement at the leader (LeaderCore, QuorumTracker).

RF=3: leader A, followers B and C. B acknowledged up to 100 (committed with A),
C lags at 80. B loses its disk and comes back empty, with a new incarnation of
its data; the ensemble change's AddFollower is a no-op for a member the leader
tracks, so only the incarnation in B's answers tells the leader that what B
acknowledged is gone.
"""

from __future__ import annotations

import pytest

from cairn.storage.core.replication.leader import FollowerPhase, LeaderCore, StaleIncarnation
from cairn.storage.core.replication.quorum import QuorumTracker
from cairn.storage.core.replication.replica import Member
from cairn.storage.core.replication.terms import EntryId

A = Member("a:1", "a:2")
B = Member("b:1", "b:2")
C = Member("c:1", "c:2")
TERM = 3
B_BEFORE, B_AFTER, C_ONLY = 0x1111, 0x2222, 0x3333


def leader_with_b_at_100_and_c_at_80() -> LeaderCore:
    leader = LeaderCore(
        TERM, A, [B, C], commit_offset=-1, term_start_offset=0, max_in_flight_entries=500
    )
    leader.on_local_durable(100)
    leader.on_truncated(B.internal_address, EntryId(-1, -1), 0, incarnation=B_BEFORE)
    leader.on_truncated(C.internal_address, EntryId(-1, -1), 0, incarnation=C_ONLY)
    leader.on_ack(B.internal_address, TERM, 100, incarnation=B_BEFORE)
    leader.on_ack(C.internal_address, TERM, 80, incarnation=C_ONLY)
    assert leader.commit_offset == 100
    return leader


def test_a_wiped_follower_readded_in_place_loses_its_vote_and_its_old_acknowledgement() -> None:
    leader = leader_with_b_at_100_and_c_at_80()
    leader.on_disconnected(B.internal_address)  # B's pod died with its disk
    # Re-created empty by NewTerm; AddFollower of a tracked member changes nothing.
    leader.add_follower(B)
    phase = leader.on_truncated(B.internal_address, EntryId(-1, -1), 0, incarnation=B_AFTER)
    assert phase is FollowerPhase.STREAMING
    progress = leader.progress(B.internal_address)
    assert progress.incarnation == B_AFTER
    # Its pre-wipe acknowledgement is gone and it does not vote...
    assert progress.acked_offset == -1
    assert not leader.is_voting(B.internal_address)
    assert leader.quorum.acked.get(B.internal_address, -1) == -1
    # ...but it still counts in the majority's size: A alone commits nothing new.
    leader.on_local_durable(120)
    assert leader.commit_offset == 100
    # While B catches up, only A and C together commit (B's acks do not count
    # until it holds the commit offset).
    assert leader.on_ack(B.internal_address, TERM, 90, incarnation=B_AFTER) == 100
    assert not leader.is_voting(B.internal_address)
    assert leader.on_ack(C.internal_address, TERM, 110, incarnation=C_ONLY) == 110
    # Caught up with what is committed: B votes again.
    leader.on_ack(B.internal_address, TERM, 115, incarnation=B_AFTER)
    assert leader.is_voting(B.internal_address)
    assert leader.commit_offset == 115


def test_an_acknowledgement_of_another_incarnation_counts_for_nothing() -> None:
    """Only Truncate (which starts every stream) changes the incarnation the
    leader tracks: a late acknowledgement of data since lost, arriving after the
    new replica answered, must neither count nor undo the readmission."""
    leader = leader_with_b_at_100_and_c_at_80()
    leader.on_disconnected(B.internal_address)
    leader.on_truncated(B.internal_address, EntryId(-1, -1), 0, incarnation=B_AFTER)
    leader.on_local_durable(130)
    with pytest.raises(StaleIncarnation):
        leader.on_ack(B.internal_address, TERM, 130, incarnation=B_BEFORE)
    progress = leader.progress(B.internal_address)
    assert (progress.incarnation, progress.acked_offset) == (B_AFTER, -1)
    assert not leader.is_voting(B.internal_address)
    assert leader.commit_offset == 100


def test_a_follower_answering_with_its_own_incarnation_keeps_its_progress() -> None:
    leader = leader_with_b_at_100_and_c_at_80()
    leader.on_disconnected(B.internal_address)  # restarted, disk intact
    leader.on_truncated(B.internal_address, EntryId(TERM, 100), 0, incarnation=B_BEFORE)
    assert leader.is_voting(B.internal_address)
    assert leader.progress(B.internal_address).acked_offset == 100


def test_a_returning_member_votes_only_once_it_holds_the_terms_first_entry() -> None:
    """A commit offset inherited from an earlier term may lie below entries that
    term committed: holding it proves nothing; holding the term's first entry does."""
    quorum = QuorumTracker.for_new_term(5, "a", ["a", "b", "c"], 40, term_start_offset=50)
    quorum.acknowledge("b", 5, 50)
    quorum.readmit("b")
    assert quorum.majority == 2 and "b" in quorum.learners
    quorum.acknowledge("b", 5, 45)  # past the inherited commit offset (40), not 50
    assert "b" in quorum.learners
    quorum.acknowledge("b", 5, 50)
    assert "b" in quorum.voters
    assert quorum.acknowledge("a", 5, 50) == 50


def test_a_returning_member_of_two_is_needed_to_commit() -> None:
    quorum = QuorumTracker.for_new_term(1, "a", ["a", "b"], 10, term_start_offset=0)
    quorum.readmit("b")
    assert quorum.acknowledge("a", 1, 20) == 10
    assert quorum.acknowledge("b", 1, 10) == 10  # votes again
    assert quorum.acknowledge("b", 1, 20) == 20


def test_a_new_leader_readmits_a_follower_whose_data_is_not_what_the_controller_recorded() -> None:
    """At a new term every follower starts as a voter; one that answers with
    another incarnation than the controller recorded lost what it held, and must
    not vote (nor be reported voting) before it holds the term's first entry."""
    leader = LeaderCore(
        TERM,
        A,
        [B, C],
        commit_offset=80,
        term_start_offset=101,
        max_in_flight_entries=500,
        incarnations={B.internal_address: B_BEFORE, C.internal_address: C_ONLY},
    )
    leader.on_local_durable(101)
    leader.on_truncated(B.internal_address, EntryId(-1, -1), 0, incarnation=B_AFTER)
    assert not leader.is_voting(B.internal_address)
    leader.on_ack(B.internal_address, TERM, 95, incarnation=B_AFTER)
    assert not leader.is_voting(B.internal_address)  # past the commit offset, not 101
    assert leader.commit_offset == 80
    leader.on_truncated(C.internal_address, EntryId(2, 90), 0, incarnation=C_ONLY)
    assert leader.on_ack(C.internal_address, TERM, 101, incarnation=C_ONLY) == 101
    leader.on_ack(B.internal_address, TERM, 101, incarnation=B_AFTER)
    assert leader.is_voting(B.internal_address)
