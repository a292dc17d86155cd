"""The StatefulSet's replica count (cairn.controller.scaling): up at once, down
only past pods that hold no replica, never past the spec, never up while
shrinking."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cairn.common.hashing import HashRange
from cairn.controller.model import ClusterStatus, ShardRecord, ShardState, default_spec
from cairn.controller.scaling import holding_ordinals, statefulset_replicas

POD = "cairn-storage"


def record(shard: int, ensemble: tuple[int, ...], leaving: tuple[int, ...] = ()) -> ShardRecord:
    return ShardRecord(
        namespace="default",
        shard=shard,
        hash_range=HashRange(0, 0xFFFFFFFF),
        term=1,
        state=ShardState.STEADY,
        leader=f"{POD}-{ensemble[0]}",
        ensemble=tuple(f"{POD}-{ordinal}" for ordinal in ensemble),
        leaving=tuple(f"{POD}-{ordinal}" for ordinal in leaving),
    )


def status(*records: ShardRecord) -> ClusterStatus:
    return ClusterStatus(shards=records)


def test_growing_is_at_once_whatever_the_pods_hold() -> None:
    spec = default_spec(storage_pods=5)
    assert statefulset_replicas(spec, status(record(0, (0, 1, 2))), current=3) == 5


def test_shrinking_waits_for_the_pods_beyond_the_count_to_be_drained() -> None:
    spec = default_spec(storage_pods=2)
    # Pod 3 still a member: nothing can go (a StatefulSet removes the highest first).
    assert statefulset_replicas(spec, status(record(0, (0, 3))), current=4) == 4
    # Pod 2 still leaving one ensemble: pod 3 may go, pod 2 not yet.
    assert statefulset_replicas(spec, status(record(0, (0, 1), leaving=(2,))), current=4) == 3
    # Drained: down to the spec's count.
    assert statefulset_replicas(spec, status(record(0, (0, 1))), current=4) == 2


def test_no_shards_at_all_shrinks_at_once() -> None:
    assert statefulset_replicas(default_spec(storage_pods=1), status(), current=3) == 1


def test_names_that_are_no_statefulset_pods_are_ignored() -> None:
    odd = ShardRecord(
        namespace="default",
        shard=0,
        hash_range=HashRange(0, 0xFFFFFFFF),
        term=1,
        state=ShardState.STEADY,
        leader="standalone",
        ensemble=("standalone",),
    )
    assert holding_ordinals(status(odd)) == set()


@given(
    wanted=st.integers(1, 8),
    current=st.integers(0, 8),
    memberships=st.lists(st.lists(st.integers(0, 8), min_size=1, max_size=3), max_size=6),
)
def test_never_removes_a_pod_that_holds_a_replica(
    wanted: int, current: int, memberships: list[list[int]]
) -> None:
    records = [record(index, tuple(dict.fromkeys(ms))) for index, ms in enumerate(memberships)]
    replicas = statefulset_replicas(default_spec(storage_pods=wanted), status(*records), current)
    held = {ordinal for ms in memberships for ordinal in ms if ordinal < current}
    # Every running pod that holds a replica keeps running ...
    assert all(ordinal < replicas for ordinal in held)
    # ... and the count moves only toward the spec's.
    if current <= wanted:
        assert replicas == wanted
    else:
        assert wanted <= replicas <= current
