"""Nothing fenced a stale controller (hole 3 of issue 38).

Two real controllers (runtime, keeper, executor) share one file store: the old
one is paused in the middle of an election, after it computed its step from the
state it held and before its write landed (a SIGSTOP, a long pause: its lease
ran out without it knowing), while a newer one takes over and elects. The
storage pods are a small fake that keeps the pods' term rules (NewTerm fences,
a lower term is refused, a leader or follower is not fenced again in its own
term, BecomeLeader needs a replica fenced in that term) and records every
leader each term got.

Before the fix, the old controller's retried write put its term 6 over the
newer controller's term 7, and in the same-term race it elected a second leader
of term 6. Now it is refused (another controller epoch holds the state) and
stops acting, having called no pod.

These tests use only what the controller had before the fix (no epoch in their
setup), so that they fail there for the reason they name.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from cairn.common.hashing import HashRange
from cairn.controller.actions import Elect
from cairn.controller.model import (
    ClusterSpec,
    ClusterState,
    ClusterStatus,
    NodeHealth,
    NodeRecord,
    ShardRecord,
    ShardState,
    default_spec,
)
from cairn.controller.observed import NodeView, Observed
from cairn.controller.pods import Fenced
from cairn.controller.runtime import Controller, RuntimeSettings
from cairn.controller.state.file_store import FileStateStore

SHARD = 0
NAMES = ("cairn-storage-0", "cairn-storage-1", "cairn-storage-2")
FIRST_TERM = 5
HEAD_OFFSET = 100
# The reconcile loops never plan on their own (no node ever reports): the
# tests run each action themselves, in the order the scenario needs.
SETTINGS = RuntimeSettings(startup_grace_ms=10**9, push_interval_ms=10**9, tick_ms=50)


def internal(name: str) -> str:
    return f"{name}:6649"


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


# -- a fake of the storage pods ------------------------------------------------------


@dataclass
class FakeReplica:
    term: int = FIRST_TERM
    role: str = "follower"
    head: tuple[int, int] = (FIRST_TERM, HEAD_OFFSET)


@dataclass
class FakePods:
    """Every pod's replica of the shard, and who was made leader of each term."""

    replicas: dict[str, FakeReplica] = field(
        default_factory=lambda: {internal(name): FakeReplica() for name in NAMES}
    )
    leaders: dict[int, set[str]] = field(default_factory=dict)

    def client(self, who: str, unreachable: Iterable[str] = ()) -> FakePodClient:
        return FakePodClient(self, who, {internal(name) for name in unreachable})


@dataclass
class FakePodClient:
    """One controller's PodClient: the pods as it reaches them, and its calls."""

    pods: FakePods
    who: str
    unreachable: set[str]
    calls: list[tuple[str, str, int]] = field(default_factory=list)

    def _replica(self, method: str, address: str, term: int) -> FakeReplica:
        self.calls.append((method, address, term))
        if address in self.unreachable:
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, f"{address} is unreachable")
        return self.pods.replicas[address]

    async def new_term(
        self, address: str, shard: int, term: int, namespace: Any, *args: Any, **kwargs: Any
    ) -> Fenced:
        replica = self._replica("NewTerm", address, term)
        if term < replica.term or (term == replica.term and replica.role != "fenced"):
            raise rpc_error(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{replica.role} in term {replica.term}: NewTerm({term}) refused",
            )
        replica.term, replica.role = term, "fenced"
        return Fenced(replica.head)

    async def become_leader(
        self, leader: Any, shard: int, term: int, followers: Sequence[Any], *args: Any, **kw: Any
    ) -> None:
        replica = self._replica("BecomeLeader", leader.internal, term)
        if term != replica.term or replica.role != "fenced":
            raise rpc_error(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{replica.role} in term {replica.term}: cannot lead {term}",
            )
        replica.role = "leader"
        replica.head = (term, replica.head[1] + 1)
        self.pods.leaders.setdefault(term, set()).add(leader.internal)
        # The followers hear from their new leader later (the fake does not
        # replicate): until then they stay fenced in the term.

    async def push_assignments(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def close(self) -> None:
        return None


# -- a fake observer: a fixed view of which nodes are alive ---------------------------


class FakeObserver:
    def __init__(self, alive: Iterable[str]) -> None:
        alive = set(alive)
        self.nodes = {
            name: NodeView(name, f"{name}:6648", internal(name), alive=name in alive)
            for name in NAMES
        }
        self.changed = asyncio.Event()
        self.joined: asyncio.Queue[str] = asyncio.Queue()

    def known(self, names: Iterable[str]) -> bool:
        return False  # never report: the loop waits out its (endless) startup grace

    def node(self, name: str) -> NodeView | None:
        return self.nodes.get(name)

    def view(self) -> Observed:
        return Observed(now_ms=0, nodes=dict(self.nodes))

    async def refresh(self, names: Iterable[str]) -> None:
        return None

    async def close(self) -> None:
        return None


# -- the store of the paused controller -----------------------------------------------


class PausableStore:
    """A file store whose next status write, once armed, waits for `resume`:
    the write of a controller that was paused after computing it."""

    def __init__(self, inner: FileStateStore) -> None:
        self.inner = inner
        self.armed = False
        self.paused = asyncio.Event()
        self.resume = asyncio.Event()

    async def create(self, spec: ClusterSpec) -> ClusterState:
        return await self.inner.create(spec)

    async def read(self) -> ClusterState:
        return await self.inner.read()

    async def write_status(self, status: ClusterStatus, version: str) -> ClusterState:
        if self.armed:
            self.armed = False
            self.paused.set()
            await self.resume.wait()
        return await self.inner.write_status(status, version)

    async def write_spec(self, spec: ClusterSpec, version: str) -> ClusterState:
        return await self.inner.write_spec(spec, version)

    def changes(self) -> AsyncIterator[ClusterState]:
        return self.inner.changes()

    async def close(self) -> None:
        await self.inner.close()


class HeldLock:
    """A leader lock its holder believes it holds: the paused controller's
    lease ran out while it was stopped, and nothing has told it yet."""

    def __init__(self) -> None:
        self._lost = asyncio.Event()

    async def acquire(self) -> None:
        return None

    @property
    def lost(self) -> asyncio.Event:
        return self._lost

    async def release(self) -> None:
        return None


# -- the scenario ----------------------------------------------------------------------


def initial_status() -> ClusterStatus:
    return ClusterStatus(
        shards=(
            ShardRecord(
                namespace="default",
                shard=SHARD,
                hash_range=HashRange(0, 0xFFFFFFFF),
                term=FIRST_TERM,
                state=ShardState.STEADY,
                leader=NAMES[0],
                ensemble=NAMES,
            ),
        ),
        nodes=tuple(
            NodeRecord(name, f"{name}:6648", internal(name), {}, NodeHealth.HEALTHY)
            for name in NAMES
        ),
        next_shard_id=1,
    )


@dataclass
class Running:
    controller: Controller
    task: asyncio.Task[None]

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.controller.close()


async def start(store: Any, pods: FakePodClient, observer: FakeObserver) -> Running:
    controller = Controller(store, HeldLock(), SPEC, SETTINGS)
    controller.pods = pods  # type: ignore[assignment]
    controller.observer = observer  # type: ignore[assignment]
    task = asyncio.create_task(controller.run())
    await asyncio.wait_for(controller.leading.wait(), 10)
    return Running(controller, task)


SPEC = default_spec(shards=1, replication_factor=3, storage_pods=3)


async def seed(directory: Path) -> None:
    store = FileStateStore(directory)
    created = await store.create(SPEC)
    await store.write_status(initial_status(), created.version)
    await store.close()


async def elect(running: Running, reason: str) -> None:
    executor = running.controller.executor
    assert executor is not None
    await executor.run(Elect(SHARD, reason))


@dataclass
class Outcome:
    record: ShardRecord  # the shard's record as stored in the end
    pods: FakePods
    old_calls: list[tuple[str, str, int]]  # the old controller's pod calls
    old_failure: BaseException | None  # how its election ended
    old_stopped: bool  # whether it stopped acting


async def stopped(running: Running, timeout_s: float = 5.0) -> bool:
    """Whether the controller stops acting (its run() ends) within the time."""
    done, _ = await asyncio.wait({running.task}, timeout=timeout_s)
    return bool(done) and not running.controller.leading.is_set()


async def paused_old_controller_scenario(
    directory: Path, new_elections: int, old_unreachable: Sequence[str], new_dead: Sequence[str]
) -> Outcome:
    """The old controller starts an election and is paused before its first
    write lands; the new one takes over and runs `new_elections` elections; the
    old one resumes."""
    await seed(directory)
    pods = FakePods()
    old_store = PausableStore(FileStateStore(directory, poll_interval_s=0.05))
    old_pods = pods.client("old", unreachable=old_unreachable)
    # The old controller's view is as old as its state: it still sees what it saw.
    old = await start(
        old_store, old_pods, FakeObserver(alive=[n for n in NAMES if n not in old_unreachable])
    )
    new = None
    try:
        old_store.armed = True
        old_election = asyncio.create_task(elect(old, "leader unhealthy (old controller)"))
        await asyncio.wait_for(old_store.paused.wait(), 10)

        new = await start(
            FileStateStore(directory, poll_interval_s=0.05),
            pods.client("new", unreachable=new_dead),
            FakeObserver(alive=[n for n in NAMES if n not in new_dead]),
        )
        for index in range(new_elections):
            await elect(new, f"election {index} of the new controller")
        calls_before_resume = len(old_pods.calls)

        old_store.resume.set()
        (outcome,) = await asyncio.gather(old_election, return_exceptions=True)
        assert calls_before_resume == 0, old_pods.calls
        record = (await FileStateStore(directory).read()).status.shard(SHARD)
        assert record is not None
        return Outcome(
            record,
            pods,
            old_pods.calls,
            outcome if isinstance(outcome, BaseException) else None,
            await stopped(old),
        )
    finally:
        if new is not None:
            await new.stop()
        await old.stop()


def test_a_paused_old_controller_cannot_write_its_term_6_over_term_7(tmp_path: Path) -> None:
    async def scenario() -> None:
        outcome = await paused_old_controller_scenario(
            tmp_path, new_elections=2, old_unreachable=(), new_dead=()
        )
        # The newer controller's elections (terms 6 and 7) stand.
        record = outcome.record
        assert (record.term, record.state) == (FIRST_TERM + 2, ShardState.STEADY), record
        assert record.leader is not None
        assert {t: len(leaders) for t, leaders in outcome.pods.leaders.items()} == {6: 1, 7: 1}
        # The old controller's election failed, it moved no pod, and it stopped.
        assert outcome.old_failure is not None
        assert outcome.old_calls == []
        assert outcome.old_stopped

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_two_controllers_cannot_both_elect_a_leader_in_the_same_term(tmp_path: Path) -> None:
    """The new controller cannot reach storage-0 (dead to it) and elects
    storage-1 in term 6; the paused old one, which sees storage-1 as dead (its
    view is stale), resumes with its own term 6, and storage-0 and storage-2
    answer it (storage-2 is still fenced in term 6: its leader has not reached
    it yet)."""

    async def scenario() -> None:
        outcome = await paused_old_controller_scenario(
            tmp_path,
            new_elections=1,
            old_unreachable=(NAMES[1],),
            new_dead=(NAMES[0],),
        )
        leaders = outcome.pods.leaders
        assert all(len(names) == 1 for names in leaders.values()), leaders
        assert leaders == {6: {internal(NAMES[1])}}
        record = outcome.record
        assert (record.term, record.state, record.leader) == (6, ShardState.STEADY, NAMES[1])
        assert outcome.old_calls == []
        assert outcome.old_stopped

    asyncio.run(asyncio.wait_for(scenario(), 60))
