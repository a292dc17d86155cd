"""One contract, every StateStore and LeaderLock: the file store and the Kubernetes
store (against the fake API server, through the official client) must behave the
same; then what only the Kubernetes implementations can do (expiring leases,
unavailable API servers, resumed watches)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import (
    ApiClient,
    CoordinationV1Api,
    CustomObjectsApi,
    V1Lease,
    V1LeaseSpec,
    V1ObjectMeta,
)

from cairn.common.hashing import HashRange
from cairn.common.keyorder import KeyOrder
from cairn.controller.fencing import ControllerFenced
from cairn.controller.keeper import StateKeeper
from cairn.controller.model import (
    ClusterSpec,
    ClusterState,
    ClusterStatus,
    ElectionRecord,
    LeaderMove,
    NamespaceSpec,
    NodeHealth,
    NodeRecord,
    ShardRecord,
    ShardState,
    default_spec,
)
from cairn.controller.state.file_store import FileLeaderLock, FileStateStore
from cairn.controller.state.kube_store import KubernetesLeaderLock, KubernetesStateStore
from cairn.controller.state.memory_store import MemoryCluster, MemoryLeaderLock, MemoryStateStore
from cairn.controller.state.store import (
    LeaderLock,
    StateConflict,
    StateNotFound,
    StateRejected,
    StateStore,
    StateUnavailable,
)
from support.fake_kube import FakeKubeServer

NAMESPACE = "cairn-system"
CLUSTER = "cairn"
LEASE = "cairn-controller"
# Short leases keep the expiry tests fast; the renewals still fit several times in one.
LEASE_DURATION_S = 1
RENEW_INTERVAL_S = 0.25
RETRY_INTERVAL_S = 0.05
# How long a change may take to reach another store's `changes()`.
PROPAGATION_S = 5.0

SPEC = default_spec()
RICH_SPEC = ClusterSpec(
    namespaces=(
        NamespaceSpec("default", shards=2, replication_factor=3),
        NamespaceSpec(
            "pulsar",
            shards=8,
            replication_factor=5,
            notifications=False,
            key_order=KeyOrder.NATURAL,
        ),
    ),
    storage_pods=5,
    anti_affinity=("topology.kubernetes.io/zone", "kubernetes.io/hostname"),
    drain=("cairn-storage-4",),
)
RICH_STATUS = ClusterStatus(
    shards=(
        ShardRecord(
            namespace="default",
            shard=0,
            hash_range=HashRange(0, 0x7FFFFFFF),
            term=4,
            state=ShardState.STEADY,
            leader="cairn-storage-0",
            ensemble=("cairn-storage-0", "cairn-storage-1", "cairn-storage-3"),
            leaving=("cairn-storage-4",),
            commit_offset=12_345,
        ),
        ShardRecord(
            namespace="default",
            shard=1,
            hash_range=HashRange(0x80000000, 0xFFFFFFFF),
            term=0,
            state=ShardState.NEW,
            leader=None,
            ensemble=("cairn-storage-1", "cairn-storage-2", "cairn-storage-0"),
        ),
        ShardRecord(
            namespace="pulsar",
            shard=2,
            hash_range=HashRange(0, 0xFFFFFFFF),
            term=7,
            state=ShardState.ELECTION,
            leader=None,
            ensemble=("cairn-storage-2",),
            commit_offset=0,
        ),
    ),
    nodes=(
        NodeRecord(
            "cairn-storage-0",
            "cairn-storage-0.cairn:6648",
            "cairn-storage-0.cairn:6649",
            {"topology.kubernetes.io/zone": "eu-1a", "kubernetes.io/hostname": "n1"},
            NodeHealth.HEALTHY,
        ),
        NodeRecord("cairn-storage-1", "10.0.0.2:6648", "10.0.0.2:6649", {}, NodeHealth.UNHEALTHY),
        NodeRecord("cairn-storage-2", "10.0.0.3:6648", "10.0.0.3:6649"),
    ),
    next_shard_id=3,
    assignments_version=9,
    elections=(
        ElectionRecord(
            "default", 0, 4, "cairn-storage-0", "leader unhealthy", 1_700_000_000_000, 37
        ),
        ElectionRecord("pulsar", 2, 6, "cairn-storage-2", "new shard", 1_700_000_000_500, 0),
    ),
    leader_moves=(LeaderMove(0, "cairn-storage-1"), LeaderMove(2, "cairn-storage-2")),
    observed_generation=1,
    controller_epoch=3,
)


def run(scenario: Coroutine[Any, Any, None], timeout_s: float = 20.0) -> None:
    asyncio.run(asyncio.wait_for(scenario, timeout_s))


@pytest.fixture
def fake_kube() -> Iterator[FakeKubeServer]:
    with FakeKubeServer() as server:
        yield server
    assert server.internal_errors == []


@dataclass
class Backend:
    kind: str
    new_store: Callable[[], StateStore]
    new_lock: Callable[[str], LeaderLock]


def kube_store(server: FakeKubeServer, user_agent: str = "store") -> KubernetesStateStore:
    return KubernetesStateStore(
        server.api_client(user_agent), NAMESPACE, CLUSTER, watch_timeout_s=5, request_timeout_s=5
    )


def kube_lock(server: FakeKubeServer, identity: str) -> KubernetesLeaderLock:
    return KubernetesLeaderLock(
        server.api_client(identity),
        NAMESPACE,
        LEASE,
        identity,
        lease_duration_s=LEASE_DURATION_S,
        renew_interval_s=RENEW_INTERVAL_S,
        retry_interval_s=RETRY_INTERVAL_S,
        request_timeout_s=2,
    )


@pytest.fixture(params=["file", "kubernetes", "memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "memory":
        # The simulation's store (tests/simulation): one cluster, a store per user.
        cluster = MemoryCluster()
        return Backend(
            "memory",
            lambda: MemoryStateStore(cluster),
            lambda _identity: MemoryLeaderLock(cluster),
        )
    if request.param == "file":
        return Backend(
            "file",
            lambda: FileStateStore(tmp_path, CLUSTER, poll_interval_s=0.05),
            lambda _identity: FileLeaderLock(tmp_path, poll_interval_s=0.05),
        )
    server: FakeKubeServer = request.getfixturevalue("fake_kube")
    return Backend(
        "kubernetes",
        lambda: kube_store(server),
        lambda identity: kube_lock(server, identity),
    )


@contextlib.asynccontextmanager
async def opened(new_store: Callable[[], StateStore]) -> AsyncIterator[StateStore]:
    store = new_store()
    try:
        yield store
    finally:
        await store.close()


async def next_state(
    changes: AsyncIterator[ClusterState], until: Callable[[ClusterState], bool]
) -> ClusterState:
    """The first state from `changes` that satisfies `until`, within PROPAGATION_S."""

    async def wait() -> ClusterState:
        async for state in changes:
            if until(state):
                return state
        raise AssertionError("changes() ended")

    return await asyncio.wait_for(wait(), PROPAGATION_S)


# -- the StateStore contract ---------------------------------------------------------


def test_read_before_create_is_not_found(backend: Backend) -> None:
    async def scenario() -> None:
        async with opened(backend.new_store) as store:
            with pytest.raises(StateNotFound):
                await store.read()

    run(scenario())


def test_create_is_idempotent_and_the_stored_spec_wins(backend: Backend) -> None:
    async def scenario() -> None:
        async with opened(backend.new_store) as store:
            created = await store.create(SPEC)
            assert created.spec == SPEC
            assert created.status == ClusterStatus()
            assert created.generation == 1
            again = await store.create(RICH_SPEC)
            assert again == created
            assert await store.read() == created

    run(scenario())


def test_status_write_bumps_the_version_not_the_generation(backend: Backend) -> None:
    async def scenario() -> None:
        async with opened(backend.new_store) as store:
            created = await store.create(SPEC)
            status = ClusterStatus(next_shard_id=3, observed_generation=created.generation)
            written = await store.write_status(status, created.version)
            assert written.status == status
            assert written.spec == SPEC
            assert written.version != created.version
            assert written.generation == created.generation
            assert await store.read() == written

    run(scenario())


def test_a_stale_version_conflicts_for_status_and_spec_writes(backend: Backend) -> None:
    async def scenario() -> None:
        async with opened(backend.new_store) as store:
            created = await store.create(SPEC)
            current = await store.write_status(ClusterStatus(next_shard_id=1), created.version)
            with pytest.raises(StateConflict):
                await store.write_status(ClusterStatus(next_shard_id=2), created.version)
            with pytest.raises(StateConflict):
                await store.write_spec(RICH_SPEC, created.version)
            assert await store.read() == current

    run(scenario())


def test_a_spec_change_bumps_the_generation_an_identical_spec_does_not(backend: Backend) -> None:
    async def scenario() -> None:
        async with opened(backend.new_store) as store:
            created = await store.create(SPEC)
            changed = await store.write_spec(RICH_SPEC, created.version)
            assert changed.spec == RICH_SPEC
            assert changed.generation == created.generation + 1
            same = await store.write_spec(RICH_SPEC, changed.version)
            assert same.spec == RICH_SPEC
            assert same.generation == changed.generation
            # The API server keeps the version of a no-op write, the file store does
            # not: either way the result names the current version.
            assert (await store.read()).version == same.version

    run(scenario())


def test_status_survives_a_spec_write_and_the_spec_a_status_write(backend: Backend) -> None:
    async def scenario() -> None:
        async with opened(backend.new_store) as store:
            created = await store.create(SPEC)
            with_status = await store.write_status(RICH_STATUS, created.version)
            with_spec = await store.write_spec(RICH_SPEC, with_status.version)
            assert with_spec.status == RICH_STATUS
            status = replace(RICH_STATUS, observed_generation=with_spec.generation)
            final = await store.write_status(status, with_spec.version)
            assert final.spec == RICH_SPEC
            assert final.generation == with_spec.generation
            assert await store.read() == final

    run(scenario())


def test_a_rich_state_round_trips_losslessly(backend: Backend) -> None:
    async def scenario() -> None:
        async with opened(backend.new_store) as writer, opened(backend.new_store) as reader:
            created = await writer.create(RICH_SPEC)
            written = await writer.write_status(RICH_STATUS, created.version)
            read = await reader.read()
            assert read == written
            assert read.spec == RICH_SPEC
            assert read.status == RICH_STATUS

    run(scenario())


def test_of_two_writers_naming_one_version_only_one_wins(
    backend: Backend, request: pytest.FixtureRequest
) -> None:
    async def scenario() -> None:
        async with opened(backend.new_store) as first, opened(backend.new_store) as second:
            current = await first.create(SPEC)
            # Several rounds: a race that is lost only sometimes still shows.
            for round_number in range(5):
                # A real change (an identical spec is a no-op that keeps the version
                # on Kubernetes, and would rightly let both writes succeed).
                spec = SPEC if current.spec == RICH_SPEC else RICH_SPEC
                results = await asyncio.gather(
                    first.write_status(ClusterStatus(next_shard_id=round_number), current.version),
                    second.write_spec(spec, current.version),
                    return_exceptions=True,
                )
                winners = [r for r in results if isinstance(r, ClusterState)]
                assert len(winners) == 1, results
                assert all(isinstance(r, (ClusterState, StateConflict)) for r in results), results
                current = await first.read()
                assert current == winners[0]

    run(scenario())


def test_a_paused_controller_with_an_older_epoch_cannot_write_the_state(backend: Backend) -> None:
    """Nothing fenced a stale controller (hole 3 of issue 38): a controller paused
    while a newer one took the next epoch resumes with the state it held. Every
    write it tries is refused, whatever it computes (a change, or none before a
    pod call), its spec writes too, and the newer controller's state stands."""

    async def scenario() -> None:
        async with opened(backend.new_store) as old_store, opened(backend.new_store) as new_store:
            old = StateKeeper(old_store, await old_store.create(SPEC))
            assert await old.take_epoch() == 1
            await old.update_status(lambda s: replace(s, next_shard_id=1))

            new = StateKeeper(new_store, await new_store.read())
            assert await new.take_epoch() == 2
            written = await new.update_status(lambda s: replace(s, next_shard_id=2))

            # Resumed, the old controller still holds the state of its last write.
            assert old.state.status.controller_epoch == 1
            for change in (lambda s: replace(s, next_shard_id=7), lambda s: s):
                with pytest.raises(ControllerFenced):
                    await old.update_status(change)
            with pytest.raises(ControllerFenced):
                await old.update_spec(lambda spec: replace(spec, storage_pods=5))
            assert old.fenced.is_set()
            assert not new.fenced.is_set()
            assert await new_store.read() == written
            assert written.status.controller_epoch == 2

            # The newer controller goes on writing (and a third would fence it).
            again = await new.update_status(lambda s: replace(s, next_shard_id=3))
            assert again.status.next_shard_id == 3

    run(scenario())


def test_a_pod_epoch_the_state_never_held_is_outrun_a_newer_controllers_is_not(
    backend: Backend,
) -> None:
    """A pod refusing a controller makes it read the state again: a state that
    still holds its epoch was recreated below what the pods have seen, and the
    controller takes an epoch past the pod's; a state holding a newer epoch
    means a newer controller, and it is fenced."""

    async def scenario() -> None:
        async with opened(backend.new_store) as old_store, opened(backend.new_store) as new_store:
            old = StateKeeper(old_store, await old_store.create(SPEC))
            assert await old.take_epoch() == 1
            assert await old.outrun(9)
            assert old.epoch == 10
            assert (await new_store.read()).status.controller_epoch == 10
            assert not old.fenced.is_set()

            new = StateKeeper(new_store, await new_store.read())
            assert await new.take_epoch() == 11
            assert not await old.outrun(11)
            assert old.fenced.is_set()
            assert (await new_store.read()).status.controller_epoch == 11

    run(scenario())


def test_an_epoch_taken_while_a_write_is_in_flight_orders_the_two(backend: Backend) -> None:
    """Of the old controller's write and the new controller's taking of the epoch,
    whichever lands first is seen by the other: the write is refused if the
    epoch came first, and kept (under the new epoch) if it came first itself."""

    async def scenario() -> None:
        async with opened(backend.new_store) as old_store, opened(backend.new_store) as new_store:
            old = StateKeeper(old_store, await old_store.create(SPEC))
            await old.take_epoch()
            new = StateKeeper(new_store, await new_store.read())
            results = await asyncio.gather(
                old.update_status(lambda s: replace(s, next_shard_id=s.next_shard_id + 5)),
                new.take_epoch(),
                return_exceptions=True,
            )
            assert results[1] == 2, results
            final = await new_store.read()
            assert final.status.controller_epoch == 2
            if isinstance(results[0], ControllerFenced):
                assert final.status.next_shard_id == 0
            else:
                assert isinstance(results[0], ClusterState), results
                assert final.status.next_shard_id == 5

    run(scenario())


def test_changes_start_with_the_current_state_and_see_other_writers(backend: Backend) -> None:
    async def scenario() -> None:
        async with opened(backend.new_store) as watcher, opened(backend.new_store) as writer:
            created = await writer.create(SPEC)
            changes = aiter(watcher.changes())
            first = await next_state(changes, lambda _state: True)
            assert first == created
            written = await writer.write_status(RICH_STATUS, created.version)
            assert await next_state(changes, lambda s: s.version == written.version) == written
            respecified = await writer.write_spec(RICH_SPEC, written.version)
            seen = await next_state(changes, lambda s: s.version == respecified.version)
            assert seen == respecified
            await changes.aclose()

    run(scenario())


def test_changes_wait_for_the_cluster_to_be_created(backend: Backend) -> None:
    async def scenario() -> None:
        async with opened(backend.new_store) as watcher, opened(backend.new_store) as writer:
            changes = aiter(watcher.changes())
            waiting = asyncio.ensure_future(anext(changes))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            created = await writer.create(SPEC)
            assert await asyncio.wait_for(waiting, PROPAGATION_S) == created
            await changes.aclose()

    run(scenario())


def test_changes_end_when_the_store_is_closed(backend: Backend) -> None:
    async def scenario() -> None:
        store = backend.new_store()
        await store.create(SPEC)
        changes = aiter(store.changes())
        await next_state(changes, lambda _state: True)
        pending = asyncio.ensure_future(anext(changes))
        await asyncio.sleep(0.1)
        await store.close()
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(pending, PROPAGATION_S)

    run(scenario())


# -- the LeaderLock contract ---------------------------------------------------------


def test_a_second_contender_waits_until_the_holder_releases(backend: Backend) -> None:
    async def scenario() -> None:
        first, second = backend.new_lock("controller-0"), backend.new_lock("controller-1")
        await first.acquire()
        waiting = asyncio.ensure_future(second.acquire())
        # Longer than a lease: the holder's renewals keep it (Kubernetes).
        await asyncio.sleep(LEASE_DURATION_S + RENEW_INTERVAL_S)
        assert not waiting.done()
        assert not first.lost.is_set()
        await first.release()
        await asyncio.wait_for(waiting, PROPAGATION_S)
        assert not second.lost.is_set()
        await second.release()
        # Released twice, or without holding: nothing happens.
        await second.release()

    run(scenario())


# -- Kubernetes only: leases ----------------------------------------------------------


def test_a_holder_that_cannot_renew_loses_the_lease_before_another_takes_it(
    fake_kube: FakeKubeServer,
) -> None:
    async def scenario() -> None:
        first, second = kube_lock(fake_kube, "controller-0"), kube_lock(fake_kube, "controller-1")
        await first.acquire()
        waiting = asyncio.ensure_future(second.acquire())
        loop = asyncio.get_running_loop()
        started = loop.time()
        fake_kube.partition("controller-0")  # its renewals now fail
        await asyncio.wait_for(waiting, LEASE_DURATION_S + PROPAGATION_S)
        # The old holder gave up no later than the new one took over, and within a
        # lease duration of its last renewal.
        assert first.lost.is_set()
        assert loop.time() - started >= LEASE_DURATION_S - RENEW_INTERVAL_S
        lease = CoordinationV1Api(fake_kube.api_client()).read_namespaced_lease(LEASE, NAMESPACE)
        assert lease.spec.holder_identity == "controller-1"
        assert lease.spec.lease_transitions == 1
        fake_kube.heal("controller-0")
        await first.release()  # lost already: must not clear the new holder
        assert not second.lost.is_set()
        await second.release()

    run(scenario())


def test_a_renewal_failing_in_an_unforeseen_way_gives_the_lease_up(
    fake_kube: FakeKubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anything a renewal raises beyond the store's own errors (a lease object it
    cannot read, a bug) ends the holding as lost: a renewer that just stopped
    would let the lease lapse to another controller while this one, never told,
    went on acting."""

    async def scenario() -> None:
        holder = kube_lock(fake_kube, "controller-0")
        await holder.acquire()

        def unreadable(self: KubernetesLeaderLock) -> bool:
            raise KeyError("spec")

        monkeypatch.setattr(KubernetesLeaderLock, "_renew", unreadable)
        await asyncio.wait_for(holder.lost.wait(), RENEW_INTERVAL_S + PROPAGATION_S)
        await holder.release()

    run(scenario())


def test_the_holder_loses_the_lease_when_another_identity_takes_it(
    fake_kube: FakeKubeServer,
) -> None:
    async def scenario() -> None:
        holder = kube_lock(fake_kube, "controller-0")
        await holder.acquire()
        leases = CoordinationV1Api(fake_kube.api_client())
        lease = leases.read_namespaced_lease(LEASE, NAMESPACE)
        lease.spec.holder_identity = "intruder"
        leases.replace_namespaced_lease(LEASE, NAMESPACE, lease)
        await asyncio.wait_for(holder.lost.wait(), RENEW_INTERVAL_S + PROPAGATION_S)
        await holder.release()
        assert leases.read_namespaced_lease(LEASE, NAMESPACE).spec.holder_identity == "intruder"

    run(scenario())


def test_an_expired_lease_of_someone_else_is_taken_at_once(fake_kube: FakeKubeServer) -> None:
    # A holder that died without releasing, a minute ago.
    renewed = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=1)
    CoordinationV1Api(fake_kube.api_client()).create_namespaced_lease(
        NAMESPACE,
        V1Lease(
            metadata=V1ObjectMeta(name=LEASE),
            spec=V1LeaseSpec(
                holder_identity="crashed",
                lease_duration_seconds=15,
                acquire_time=renewed.replace(microsecond=1),
                renew_time=renewed.replace(microsecond=1),
                lease_transitions=3,
            ),
        ),
    )

    async def scenario() -> None:
        successor = kube_lock(fake_kube, "controller-1")
        await asyncio.wait_for(successor.acquire(), 1.0)
        await successor.release()

    run(scenario())
    lease = CoordinationV1Api(fake_kube.api_client()).read_namespaced_lease(LEASE, NAMESPACE)
    assert lease.spec.holder_identity is None  # released
    assert lease.spec.lease_transitions == 4


# -- Kubernetes only: errors and watches ---------------------------------------------


def test_server_errors_are_state_unavailable_and_pass(fake_kube: FakeKubeServer) -> None:
    async def scenario() -> None:
        async with opened(lambda: kube_store(fake_kube)) as store:
            fake_kube.fail_next(1, 503)
            with pytest.raises(StateUnavailable):
                await store.create(SPEC)
            created = await store.create(SPEC)
            fake_kube.fail_next(1, 500)
            with pytest.raises(StateUnavailable):
                await store.read()
            fake_kube.fail_next(1, 429)
            with pytest.raises(StateUnavailable):
                await store.write_status(RICH_STATUS, created.version)
            fake_kube.fail_next(1, 504)
            with pytest.raises(StateUnavailable):
                await store.write_spec(RICH_SPEC, created.version)
            # A connection dropped without an answer (POST is not retried by urllib3).
            fake_kube.fail_next(1, 0, method="POST")
            async with opened(lambda: kube_store(fake_kube)) as other:
                with pytest.raises(StateUnavailable):
                    await other.create(SPEC)
            assert await store.read() == created

    run(scenario())


def test_an_unreachable_api_server_is_state_unavailable(fake_kube: FakeKubeServer) -> None:
    client = fake_kube.api_client()
    fake_kube.stop()  # nothing listens on its port any more

    async def scenario() -> None:
        store = KubernetesStateStore(client, NAMESPACE, CLUSTER, request_timeout_s=2)
        with pytest.raises(StateUnavailable):
            await store.read()
        await store.close()

    try:
        run(scenario())
    finally:
        client.close()


def test_a_refused_request_is_state_rejected(fake_kube: FakeKubeServer) -> None:
    async def scenario() -> None:
        store = KubernetesStateStore(fake_kube.api_client(), NAMESPACE, "Not_A_Name")
        with pytest.raises(StateRejected):
            await store.create(SPEC)
        await store.close()

    run(scenario())


def test_a_spec_write_keeps_labels_and_annotations_set_by_others(
    fake_kube: FakeKubeServer,
) -> None:
    async def scenario() -> None:
        async with opened(lambda: kube_store(fake_kube)) as store:
            await store.create(SPEC)
            objects = CustomObjectsApi(fake_kube.api_client())
            labelled = objects.patch_namespaced_custom_object(
                "cairn.dev",
                "v1",
                NAMESPACE,
                "cairnclusters",
                CLUSTER,
                {"metadata": {"labels": {"team": "storage"}, "annotations": {"note": "x"}}},
            )
            version = labelled["metadata"]["resourceVersion"]
            written = await store.write_spec(RICH_SPEC, version)
            assert written.generation == 2
            obj = objects.get_namespaced_custom_object(
                "cairn.dev", "v1", NAMESPACE, "cairnclusters", CLUSTER
            )
            assert obj["metadata"]["labels"] == {"team": "storage"}
            assert obj["metadata"]["annotations"] == {"note": "x"}

    run(scenario())


def test_changes_resume_after_failures_and_list_again_after_410(
    fake_kube: FakeKubeServer,
) -> None:
    def lists() -> int:
        return sum(
            1
            for request in fake_kube.requests
            if request.method == "GET"
            and request.path.endswith("/cairnclusters")
            and not request.is_watch
        )

    async def scenario() -> None:
        async with (
            opened(lambda: kube_store(fake_kube, "watcher")) as watcher,
            opened(lambda: kube_store(fake_kube, "writer")) as writer,
        ):
            created = await writer.create(SPEC)
            # The feed's first three lists fail: it backs off and retries.
            fake_kube.fail_next(3, 503, user_agent="watcher")
            changes = aiter(watcher.changes())
            assert await next_state(changes, lambda _s: True) == created
            # Cut off, the feed cannot renew its watch when the API server ends it;
            # meanwhile the state changes and the history is forgotten. Back, its watch
            # from the old version gets 410 Gone, and it lists again for the newest state.
            fake_kube.partition("watcher")
            fake_kube.end_watches()
            await asyncio.sleep(0.2)
            written = await writer.write_status(RICH_STATUS, created.version)
            fake_kube.compact()
            before = lists()
            fake_kube.heal("watcher")
            seen = await next_state(changes, lambda s: s.version == written.version)
            assert seen == written
            assert lists() > before
            # Later changes arrive through the new watch.
            again = await writer.write_spec(RICH_SPEC, written.version)
            assert await next_state(changes, lambda s: s.version == again.version) == again
            await changes.aclose()

    run(scenario())


def test_changes_resume_after_the_watch_times_out(fake_kube: FakeKubeServer) -> None:
    async def scenario() -> None:
        store = KubernetesStateStore(
            fake_kube.api_client(), NAMESPACE, CLUSTER, watch_timeout_s=1, request_timeout_s=5
        )
        async with (
            opened(lambda: store) as watcher,
            opened(lambda: kube_store(fake_kube)) as writer,
        ):
            created = await writer.create(SPEC)
            changes = aiter(watcher.changes())
            assert await next_state(changes, lambda _s: True) == created
            await asyncio.sleep(1.2)  # the first watch has ended by now
            written = await writer.write_status(RICH_STATUS, created.version)
            assert await next_state(changes, lambda s: s.version == written.version) == written
            assert sum(1 for request in fake_kube.requests if request.is_watch) >= 2
            await changes.aclose()

    run(scenario())


def test_releasing_as_a_renewal_completes_ends_the_renewals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Python 3.11's asyncio.wait_for returns the inner result when a cancellation
    # arrives as that inner call completes, swallowing the cancellation: a keeper
    # renewing through it went on renewing a lease given up, and release() hung.
    from cairn.controller.state import kube_store

    async def scenario() -> None:
        lock = KubernetesLeaderLock(
            ApiClient(), "cairn", "lease", "me", renew_interval_s=0.01, retry_interval_s=0.01
        )
        renewals = 0
        releasing: asyncio.Task[None] | None = None
        release_started = asyncio.Event()

        async def answer_at_once(what: str, function: Callable[[], Any]) -> Any:
            nonlocal renewals, releasing
            if function == lock._renew:
                renewals += 1
                if renewals == 2:  # released while this renewal returns
                    releasing = asyncio.create_task(lock.release())
                    release_started.set()
            return None if function == lock._clear else True

        monkeypatch.setattr(kube_store, "_call", answer_at_once)
        await lock.acquire()
        async with asyncio.timeout(5):
            await release_started.wait()
            assert releasing is not None
            await releasing
        assert renewals == 2

    asyncio.run(scenario())
