"""The quorum tracker against a deliberately simple oracle, over many random cases."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.storage.core.replication.quorum import NO_OFFSET, QuorumTracker

MEMBERS = ["a", "b", "c", "d", "e", "f", "g"]


def oracle_commit(voters: set[str], acked: dict[str, int]) -> int:
    """The highest offset that a strict majority of the voters has acknowledged."""
    best = NO_OFFSET
    for candidate in {acked.get(m, NO_OFFSET) for m in voters}:
        holders = sum(1 for m in voters if acked.get(m, NO_OFFSET) >= candidate)
        if holders * 2 > len(voters):
            best = max(best, candidate)
    return best


operations = st.lists(
    st.one_of(
        st.tuples(st.just("ack"), st.sampled_from(MEMBERS), st.integers(0, 50), st.booleans()),
        st.tuples(st.just("learn"), st.sampled_from(MEMBERS), st.just(0), st.just(False)),
        st.tuples(st.just("remove"), st.sampled_from(MEMBERS), st.just(0), st.just(False)),
    ),
    max_size=60,
)


@settings(max_examples=2000, deadline=None)
@given(
    ensemble_size=st.sampled_from([1, 3, 5]),
    already_committed=st.integers(NO_OFFSET, 10),
    term_start=st.integers(NO_OFFSET, 30),
    steps=operations,
)
def test_commit_matches_the_oracle_and_never_goes_back(
    ensemble_size: int,
    already_committed: int,
    term_start: int,
    steps: list[tuple[str, str, int, bool]],
) -> None:
    voters = MEMBERS[:ensemble_size]
    tracker = QuorumTracker.for_new_term(7, "a", voters, already_committed, term_start)
    # The oracle's own bookkeeping, kept as simply as possible.
    model_voters, model_learners = set(voters), set()
    model_acked: dict[str, int] = {}
    model_commit = already_committed
    for kind, member, offset, stale_term in steps:
        before = tracker.commit_offset
        if kind == "ack":
            result = tracker.acknowledge(member, 6 if stale_term else 7, offset)
            if not stale_term and member in model_voters | model_learners:
                model_acked[member] = max(model_acked.get(member, NO_OFFSET), offset)
                caught_up = max(model_commit, term_start)
                if member in model_learners and model_acked[member] >= caught_up:
                    model_learners.remove(member)
                    model_voters.add(member)
        elif kind == "learn":
            if member in model_voters:
                with pytest.raises(ValueError, match="already a voter"):
                    tracker.add_learner(member)
                continue
            tracker.add_learner(member)
            model_learners.add(member)
            result = tracker.commit_offset
        else:
            if member == "a":
                with pytest.raises(ValueError, match="leader cannot be removed"):
                    tracker.remove(member)
                continue
            rest = model_voters - {member}
            needed = max(model_commit, term_start)
            holding = sum(1 for m in rest if model_acked.get(m, NO_OFFSET) >= needed)
            if member in model_voters and holding * 2 <= len(rest):
                # What was committed would be held by fewer than a majority of
                # the rest: it stays, leaving; called off here to keep the
                # oracle simple (joint commits: the tests below).
                tracker.remove(member)
                assert tracker.is_leaving(member)
                assert tracker.voters == model_voters
                result = tracker.cancel_removal(member)
                assert not tracker.is_leaving(member)
                assert result == tracker.commit_offset == model_commit
                continue
            result = tracker.remove(member)
            model_voters.discard(member)
            model_learners.discard(member)
            model_acked.pop(member, None)
        majority_holds = oracle_commit(model_voters, model_acked)
        # Nothing commits before a majority holds the term's first entry.
        if majority_holds >= term_start:
            model_commit = max(model_commit, majority_holds)
        assert result == tracker.commit_offset == model_commit
        assert tracker.commit_offset >= before
        assert tracker.voters == model_voters
        assert tracker.learners == model_learners
        # Whatever this term committed is held by a majority of the voters there
        # are now, whoever left since (else a majority of them could elect
        # without it).
        if tracker.commit_offset > already_committed:
            holders = sum(
                1 for m in tracker.voters if model_acked.get(m, NO_OFFSET) >= tracker.commit_offset
            )
            assert holders * 2 > len(tracker.voters)


def test_inherited_entries_commit_only_on_acknowledgements_of_the_new_term() -> None:
    tracker = QuorumTracker.for_new_term(2, "a", ["a", "b", "c"], committed_offset=10)
    # Acks addressed to the old leader's term prove nothing now.
    assert tracker.acknowledge("b", 1, 15) == 10
    assert tracker.acknowledge("a", 2, 15) == 10  # the leader alone is no majority
    assert tracker.acknowledge("b", 2, 15) == 15


def test_inherited_entries_wait_for_the_term_start_entry_on_a_majority() -> None:
    """Raft's figure 8: an older-term entry on a majority is not yet safe."""
    tracker = QuorumTracker.for_new_term(
        4, "a", ["a", "b", "c", "d", "e"], committed_offset=0, term_start_offset=3
    )
    for member in "abc":
        tracker.acknowledge(member, 4, 2)
    assert tracker.commit_offset == 0
    tracker.acknowledge("a", 4, 3)
    tracker.acknowledge("b", 4, 3)
    assert tracker.commit_offset == 0
    tracker.acknowledge("c", 4, 3)
    assert tracker.commit_offset == 3


def test_a_new_member_votes_only_once_caught_up() -> None:
    tracker = QuorumTracker.for_new_term(1, "a", ["a", "b", "c"], committed_offset=NO_OFFSET)
    for member in "abc":
        tracker.acknowledge(member, 1, 100)
    assert tracker.commit_offset == 100
    tracker.add_learner("d")
    tracker.add_learner("e")
    # The empty learners are not counted: 3 of 5 would otherwise be needed.
    tracker.acknowledge("a", 1, 120)
    tracker.acknowledge("b", 1, 120)
    assert tracker.commit_offset == 120
    tracker.acknowledge("d", 1, 50)
    assert "d" in tracker.learners
    tracker.acknowledge("d", 1, 120)
    assert "d" in tracker.voters


def test_a_learner_votes_only_once_it_holds_the_terms_first_entry() -> None:
    """Issue 38: a new term's leader may start from a commit offset lower than
    what the earlier term committed (here 0 while entry 1 was committed). A
    learner holding only that offset may lack entry 1, and as a voter it could
    make, with another member lacking it, a majority that elects without it."""
    tracker = QuorumTracker.for_new_term(
        2, "a", ["a", "b"], committed_offset=0, term_start_offset=2
    )
    tracker.add_learner("c")
    tracker.acknowledge("c", 2, 0)
    assert "c" in tracker.learners
    tracker.acknowledge("c", 2, 1)
    assert "c" in tracker.learners
    tracker.acknowledge("c", 2, 2)
    assert "c" in tracker.voters


def test_a_member_the_commit_needs_leaves_once_the_rest_hold_the_commit() -> None:
    """Issue 38, found by the simulation (churn seed 1021, reading seed 1026 at
    5000 steps): the controller saw b and c holding the commit offset and
    removed c; meanwhile a and c had committed more without b. Dropping c
    then left those entries on a alone, and b, with a majority of {a, b} that
    lacked them, could be elected. c now stays until b holds them."""
    tracker = QuorumTracker.for_new_term(3, "a", ["a", "b", "c"], committed_offset=NO_OFFSET)
    for member in "abc":
        tracker.acknowledge(member, 3, 8)
    tracker.acknowledge("a", 3, 11)
    assert tracker.acknowledge("c", 3, 11) == 11
    assert tracker.remove("c") == 11
    assert tracker.is_leaving("c")
    assert tracker.voters == {"a", "b", "c"}
    tracker.acknowledge("b", 3, 10)
    assert tracker.is_leaving("c")
    tracker.acknowledge("b", 3, 11)
    assert not tracker.is_member("c")
    assert tracker.voters == {"a", "b"}
    assert tracker.remove("c") == 11  # asked again: nothing to do


def test_while_a_member_leaves_entries_commit_on_both_ensembles() -> None:
    """Else the commit offset could run ahead on the leaving member and the
    rest would never catch up with it under steady writes."""
    tracker = QuorumTracker.for_new_term(3, "a", ["a", "b", "c"], committed_offset=NO_OFFSET)
    for member in "abc":
        tracker.acknowledge(member, 3, 5)
    tracker.acknowledge("a", 3, 6)
    tracker.acknowledge("c", 3, 6)
    tracker.remove("c")
    tracker.acknowledge("a", 3, 20)
    assert tracker.acknowledge("c", 3, 20) == 6  # {a, c} is no majority of {a, b}
    assert tracker.acknowledge("b", 3, 9) == 9  # c goes: b holds the commit offset
    assert tracker.voters == {"a", "b"}
    assert tracker.acknowledge("b", 3, 20) == 20


def test_a_removal_called_off_restores_the_whole_ensembles_majority() -> None:
    tracker = QuorumTracker.for_new_term(3, "a", ["a", "b", "c"], committed_offset=NO_OFFSET)
    tracker.acknowledge("a", 3, 6)
    tracker.acknowledge("c", 3, 6)
    tracker.remove("c")
    tracker.acknowledge("a", 3, 9)
    assert tracker.acknowledge("c", 3, 9) == 6
    assert tracker.cancel_removal("c") == 9
    assert tracker.voters == {"a", "b", "c"}


def test_a_member_that_holds_nothing_needed_leaves_at_once() -> None:
    """A learner, or a voter whose removal leaves the commit on a majority of
    the rest, is removed whatever it acknowledged."""
    tracker = QuorumTracker.for_new_term(3, "a", ["a", "b", "c"], committed_offset=NO_OFFSET)
    tracker.acknowledge("a", 3, 11)
    tracker.acknowledge("b", 3, 11)
    tracker.add_learner("d")
    assert tracker.remove("d") == 11
    assert tracker.remove("c") == 11
    assert tracker.voters == {"a", "b"}


def test_random_clusters_against_the_oracle_many_seeds() -> None:
    """Thousands of random ack sequences on 3- and 5-member ensembles."""
    for seed in range(300):
        rng = random.Random(seed)
        size = rng.choice([3, 5])
        members = MEMBERS[:size]
        tracker = QuorumTracker.for_new_term(1, "a", members, committed_offset=NO_OFFSET)
        acked: dict[str, int] = {}
        for _ in range(30):
            member = rng.choice(members)
            offset = rng.randint(0, 100)
            tracker.acknowledge(member, 1, offset)
            acked[member] = max(acked.get(member, NO_OFFSET), offset)
            assert tracker.commit_offset == oracle_commit(set(members), acked), seed
