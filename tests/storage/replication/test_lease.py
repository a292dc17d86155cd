"""The leader's lease (core/replication/lease.py): pure rules, time passed in."""

from __future__ import annotations

import pytest

from cairn.storage.core.replication.lease import LeaderLease, takeover_wait_ms


def test_the_lease_rests_on_the_latest_time_a_majority_of_the_voters_echoed() -> None:
    lease = LeaderLease("a", duration_ms=1000)
    voters = {"a", "b", "c"}
    assert not lease.holds(voters, now_ms=5_000)  # no follower answered yet
    lease.on_echo("b", 4_500)
    # a (now) and b (4,500) are a majority: the lease runs from 4,500.
    assert lease.expires_at_ms(voters, now_ms=5_000) == 5_500
    assert lease.holds(voters, now_ms=5_499)
    assert not lease.holds(voters, now_ms=5_500)
    lease.on_echo("c", 5_200)
    lease.on_echo("b", 4_000)  # older echoes change nothing
    assert lease.expires_at_ms(voters, now_ms=5_600) == 6_200


def test_learners_and_departed_members_do_not_hold_the_lease() -> None:
    lease = LeaderLease("a", duration_ms=1000)
    lease.on_echo("d", 9_900)  # d echoes, but the quorum does not count it yet
    assert not lease.holds({"a", "b", "c"}, now_ms=10_000)
    assert lease.holds({"a", "b", "c", "d"}, now_ms=10_000) is False  # 2 of 4 is no majority
    lease.on_echo("b", 9_950)
    assert lease.holds({"a", "b", "c", "d"}, now_ms=10_000)
    lease.forget("b")
    assert not lease.holds({"a", "b", "c", "d"}, now_ms=10_000)


def test_a_leader_alone_always_holds_its_lease() -> None:
    assert LeaderLease("a", duration_ms=1000).holds({"a"}, now_ms=123)


def test_a_new_leader_waits_out_any_older_lease_under_the_drift_bound() -> None:
    # An old lease of 1 s by a clock 5% slow ends within 1/0.95 s of real time; our
    # wait by a clock 5% fast covers at least wait/1.05 of it.
    wait = takeover_wait_ms(1000, 0.05)
    assert wait / 1.05 >= 1000 / 0.95
    assert takeover_wait_ms(1000, 0.0) == 1000
    with pytest.raises(ValueError, match="drift"):
        takeover_wait_ms(1000, 1.0)


def test_members_readmitted_after_losing_their_data_keep_the_majority_large() -> None:
    """The quorum counts a returning member in the majority's size, not as a
    voter: the lease needs as many voters' echoes as a commit needs acks."""
    lease = LeaderLease("a", duration_ms=1000)
    lease.on_echo("b", 9_900)
    assert lease.holds({"a", "b"}, now_ms=10_000)  # a majority of {a, b}
    assert not lease.holds({"a", "b"}, now_ms=10_000, majority=3)  # c returning
    assert lease.holds({"a", "b", "c"}, now_ms=10_000, majority=2)
