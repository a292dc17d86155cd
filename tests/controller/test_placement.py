"""pick_members / pick_member_to_remove: where ensemble members go, and which
one leaves when an ensemble shrinks."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.common.hashing import HashRange
from cairn.controller.model import ShardRecord, ShardState
from cairn.controller.placement import (
    Candidate,
    conflicts,
    leader_load,
    member_load,
    pick_member_to_remove,
    pick_members,
)

ZONE = "zone"
RACK = "rack"


def node(name: str, zone: str | None = None, rack: str | None = None) -> Candidate:
    labels = {}
    if zone is not None:
        labels[ZONE] = zone
    if rack is not None:
        labels[RACK] = rack
    return Candidate(name, labels)


def zones(chosen: list[str], pool: list[Candidate]) -> list[str | None]:
    by_name = {c.name: c for c in pool}
    return [by_name[name].labels.get(ZONE) for name in chosen]


# -- pick_members: unit tests ------------------------------------------------------------


def test_members_spread_over_zones_before_load() -> None:
    pool = [node("a", "z1"), node("b", "z1"), node("c", "z2"), node("d", "z3")]
    # "b" is the least loaded, but a second member in z1 would share a zone.
    load = {"a": 5, "b": 0, "c": 9, "d": 7}
    assert pick_members(pool, [], 3, load, (ZONE,)) == ["b", "d", "c"]


def test_members_go_to_the_least_loaded_then_by_name() -> None:
    pool = [node(name) for name in "dcba"]
    assert pick_members(pool, [], 2, {"a": 2, "b": 1, "c": 1, "d": 3}, ()) == ["b", "c"]
    assert pick_members(pool, [], 4, {}, ()) == ["a", "b", "c", "d"]


def test_existing_members_count_for_conflicts_and_are_never_picked_again() -> None:
    pool = [node("a", "z1"), node("b", "z2"), node("c", "z1"), node("d", "z3")]
    members = [node("a", "z1"), node("b", "z2")]
    assert pick_members(pool, members, 1, {"c": 0, "d": 10}, (ZONE,)) == ["d"]
    assert pick_members(pool, members, 5, {}, (ZONE,)) == ["d", "c"]


def test_fewer_zones_than_members_spread_as_far_as_they_can() -> None:
    pool = [node("a", "z1"), node("b", "z1"), node("c", "z2"), node("d", "z2")]
    chosen = pick_members(pool, [], 3, {}, (ZONE,))
    assert Counter(zones(chosen, pool)) == {"z1": 2, "z2": 1}


def test_unlabelled_nodes_never_conflict() -> None:
    pool = [node("a"), node("b", "z1"), node("c", "z1")]
    assert pick_members(pool, [node("x", "z1")], 2, {}, (ZONE,)) == ["a", "b"]


def test_every_anti_affinity_key_counts() -> None:
    pool = [node("a", "z1", "r1"), node("b", "z2", "r1"), node("c", "z3", "r2")]
    assert pick_members(pool, [node("m", "z9", "r1")], 1, {"c": 5}, (ZONE, RACK)) == ["c"]
    assert conflicts(node("a", "z1", "r1"), [node("b", "z1", "r1")], (ZONE, RACK)) == 2


def test_nothing_to_pick_from() -> None:
    assert pick_members([], [], 3, {}, (ZONE,)) == []
    assert pick_members([node("a")], [node("a")], 1, {}, ()) == []
    assert pick_members([node("a")], [], 0, {}, ()) == []


# -- pick_member_to_remove: unit tests -----------------------------------------------------


def test_the_leader_is_never_removed() -> None:
    assert pick_member_to_remove([node("a")], "a", {}, ()) is None
    members = [node("a", "z1"), node("b", "z1")]
    assert pick_member_to_remove(members, "a", {"a": 9}, (ZONE,), prefer=["a"]) == "b"


def test_preferred_members_leave_first() -> None:
    members = [node("a", "z1"), node("b", "z2"), node("c", "z1")]
    assert pick_member_to_remove(members, "a", {"c": 9}, (ZONE,), prefer=["b"]) == "b"


def test_the_member_sharing_most_labels_leaves_then_the_most_loaded() -> None:
    members = [node("a", "z1"), node("b", "z2"), node("c", "z1"), node("d", "z3")]
    # a and c share z1; a leads: c leaves although d is busier.
    assert pick_member_to_remove(members, "a", {"c": 1, "d": 9}, (ZONE,)) == "c"
    members = [node("a", "z1"), node("b", "z2"), node("c", "z3")]
    assert pick_member_to_remove(members, "a", {"b": 3, "c": 4}, (ZONE,)) == "c"
    assert pick_member_to_remove(members, "a", {"b": 4, "c": 4}, (ZONE,)) == "c"
    assert pick_member_to_remove(members, "a", {"b": 5, "c": 4}, (ZONE,)) == "b"


# -- loads -------------------------------------------------------------------------------


def record(
    shard: int, ensemble: tuple[str, ...], leader: str | None, leaving: tuple[str, ...] = ()
) -> ShardRecord:
    return ShardRecord(
        "ns", shard, HashRange(0, 1), 1, ShardState.STEADY, leader, ensemble, leaving
    )


def test_member_load_counts_leaving_members_and_leader_load_counts_leaders() -> None:
    shards = [
        record(0, ("a", "b"), "a", leaving=("c",)),
        record(1, ("a", "c"), "c"),
        record(2, ("b",), None),
    ]
    assert member_load(shards) == {"a": 2, "b": 2, "c": 2}
    assert leader_load(shards) == {"a": 1, "c": 1}


# -- properties --------------------------------------------------------------------------

names = st.sampled_from([f"n{i}" for i in range(8)])


@st.composite
def pools(draw: st.DrawFn) -> tuple[list[Candidate], dict[str, int]]:
    chosen = draw(st.lists(names, unique=True, min_size=0, max_size=8))
    zone_count = draw(st.integers(1, 5))
    pool = [node(name, f"z{draw(st.integers(0, zone_count - 1))}") for name in chosen]
    load = {name: draw(st.integers(0, 5)) for name in chosen}
    return pool, load


@settings(max_examples=300, deadline=None)
@given(pools(), st.integers(0, 8), st.data())
def test_picks_are_distinct_new_and_spread_when_zones_suffice(
    pool_load: tuple[list[Candidate], dict[str, int]], count: int, data: st.DataObject
) -> None:
    pool, load = pool_load
    members = data.draw(st.lists(st.sampled_from(pool), unique_by=lambda c: c.name)) if pool else []
    taken = {m.name for m in members}
    chosen = pick_members(pool, members, count, load, (ZONE,))
    free = [c for c in pool if c.name not in taken]
    assert len(chosen) == min(count, len(free))
    assert len(set(chosen)) == len(chosen) and not set(chosen) & taken
    assert set(chosen) <= {c.name for c in free}
    # Deterministic, whatever the order candidates come in.
    shuffled = data.draw(st.permutations(pool))
    assert pick_members(shuffled, members, count, load, (ZONE,)) == chosen
    # With enough zones the members do not share, every pick is on a new zone.
    used = {m.labels[ZONE] for m in members}
    fresh_zones = {c.labels[ZONE] for c in free} - used
    if len(fresh_zones) >= len(chosen):
        picked = zones(chosen, pool)
        assert len(set(picked)) == len(picked) and not set(picked) & used


@settings(max_examples=300, deadline=None)
@given(pools(), st.integers(1, 8), st.data())
def test_each_pick_is_the_best_remaining_candidate(
    pool_load: tuple[list[Candidate], dict[str, int]], count: int, data: st.DataObject
) -> None:
    pool, load = pool_load
    members = data.draw(st.lists(st.sampled_from(pool), unique_by=lambda c: c.name)) if pool else []
    chosen = pick_members(pool, members, count, load, (ZONE,))
    placed = list(members)
    by_name = {c.name: c for c in pool}
    for name in chosen:
        rest = [c for c in pool if c.name not in {p.name for p in placed}]
        best = min(rest, key=lambda c: (conflicts(c, placed, (ZONE,)), load.get(c.name, 0), c.name))
        assert name == best.name
        placed.append(by_name[name])


@settings(max_examples=300, deadline=None)
@given(pools(), st.data())
def test_the_removed_member_is_the_worst_follower(
    pool_load: tuple[list[Candidate], dict[str, int]], data: st.DataObject
) -> None:
    pool, load = pool_load
    if not pool:
        assert pick_member_to_remove([], None, load, (ZONE,)) is None
        return
    members = data.draw(st.lists(st.sampled_from(pool), unique_by=lambda c: c.name, min_size=1))
    leader = data.draw(st.none() | st.sampled_from([m.name for m in members]))
    prefer = data.draw(st.lists(st.sampled_from([c.name for c in pool])))
    victim = pick_member_to_remove(members, leader, load, (ZONE,), prefer)
    followers = [m for m in members if m.name != leader]
    if not followers:
        assert victim is None
        return
    assert victim is not None and victim != leader
    assert victim in {m.name for m in followers}
    if set(prefer) & {m.name for m in followers}:
        assert victim in prefer
    else:
        # No follower shares more zones with the rest, or as many and is busier.
        def badness(member: Candidate) -> tuple[int, int, str]:
            others = [m for m in members if m.name != member.name]
            return (conflicts(member, others, (ZONE,)), load.get(member.name, 0), member.name)

        assert badness(next(m for m in followers if m.name == victim)) == max(
            badness(m) for m in followers
        )


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.data())
def test_removing_then_adding_keeps_zones_distinct(
    zone_count: int, rf: int, data: st.DataObject
) -> None:
    """An ensemble on distinct zones, grown by one on a shared zone, shrinks
    back to distinct zones (whoever leads)."""
    if zone_count < rf:
        return
    pool = [node(f"n{i}", f"z{i % zone_count}") for i in range(zone_count * 2)]
    members = [pool[i] for i in range(rf)]
    extra = pool[zone_count + data.draw(st.integers(0, rf - 1))]  # same zone as a member
    grown = [*members, extra]
    leader = data.draw(st.sampled_from([m.name for m in grown]))
    victim = pick_member_to_remove(grown, leader, {}, (ZONE,))
    if rf == 1 and leader == extra.name:
        assert victim == members[0].name
    rest = [m for m in grown if m.name != victim]
    assert len({m.labels[ZONE] for m in rest}) == len(rest)


@pytest.mark.parametrize("count", [1, 2, 3])
def test_ties_are_broken_by_name(count: int) -> None:
    pool = [node(name, "z") for name in ("c", "a", "b")]
    assert pick_members(pool, [], count, {}, (ZONE,)) == ["a", "b", "c"][:count]
