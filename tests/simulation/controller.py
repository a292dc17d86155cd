"""The real controller under simulation: the real planner (`plan`), the real
executor (with `steps.py` and `choose_leader`) and the real `StateKeeper`, over
the in-memory cluster-state store (cairn.controller.state.memory_store), with
the pods reached through the simulated network and observed through it.

What is simulated around them, and how:

- Time: each controller runs its asyncio code on its own `VirtualLoop`, whose
  clock is the simulation's (`Env.now_ms`). The loop only ever runs what is
  ready now (`run_until_idle`, after each step and each delivered answer): no
  real timer, no real sleep, no thread. Timers (the executor's straggler grace,
  RPC deadlines) fire when simulated time reaches them.
- Pod calls (`SimPods`, the executor's `PodCalls`): each call is a message with
  a call number, its answer completes the awaited future; a call unanswered
  within `rpc_timeout_steps` fails with DEADLINE_EXCEEDED, a refusal with the
  pod's gRPC code, a stale controller epoch with ControllerFenced, as the gRPC
  PodClient does.
- Failure detection (`SimObserver`, the executor's `NodeViews`): the controller
  polls every pod's status over the network (Coordination.GetStatus); a pod is
  alive while its answers keep coming (the health watch and heartbeats,
  folded into one signal), and its replica reports are those answers.
- The reconcile loop (`SimController.tick`) is runtime.py's: plan, start the due
  actions (one per shard, with backoff after a failure), push the shard map
  now and then. It is re-stated here, scaled to simulated steps, because the
  runtime wires gRPC clients itself; what it decides with is the real code.
- Leadership: the controller that `start`s takes the next controller epoch, as
  the real one does once it holds the lease. A `pause` stops its process (its
  loop does not run, answers wait in its socket); its lease then runs out and
  the other controller takes over. Resumed, it acts on what it believed until
  the epoch fences it (the state refuses its writes, pods its calls); it then
  stops and stands by, as a fenced controller's process exits and waits for the
  lease.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import grpc

from cairn.common.heartbeat import ReplicaReport
from cairn.controller.actions import Action, shard_of
from cairn.controller.executor import Executor
from cairn.controller.fencing import ControllerFenced
from cairn.controller.keeper import StateKeeper
from cairn.controller.model import (
    ClusterSpec,
    ClusterState,
    LeaderMove,
    NamespaceSpec,
    ShardRecord,
    ShardState,
)
from cairn.controller.observed import LeaderReports, NodeView, Observed
from cairn.controller.planner import PlannerSettings, plan
from cairn.controller.pods import Fenced, PodAddress
from cairn.controller.state.memory_store import MemoryCluster, MemoryStateStore
from cairn.proto import oxia_client_pb2 as pb
from simulation import messages as m
from simulation.context import STEP_MS, Env
from simulation.grpc_net import rpc_error
from simulation.network import Envelope
from simulation.replica import member_of
from simulation.virtual_loop import VirtualLoop

NAMESPACE = "default"
SHARD = 0


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    rpc_timeout_steps: int = 30
    status_interval_steps: int = 5
    status_timeout_steps: int = 10
    # A pod whose status answers stop for this long is taken as down.
    dead_after_steps: int = 20
    # Re-plan at least this often (and after any action ends).
    plan_interval_steps: int = 5
    push_interval_steps: int = 100
    # After taking over, wait this long for every pod to answer before planning.
    startup_grace_steps: int = 25
    backoff_min_steps: int = 10
    backoff_max_steps: int = 80
    max_parallel_actions: int = 16
    straggler_grace_s: float = 0.1
    planner: PlannerSettings = field(
        default_factory=lambda: PlannerSettings(
            replace_after_ms=150 * STEP_MS,
            rebalance_after_ms=100 * STEP_MS,
            max_concurrent_changes=2,
        )
    )


@dataclass
class _Call:
    future: asyncio.Future[m.Body]
    deadline_step: int


class SimPods:
    """The executor's pod calls as simulated messages."""

    def __init__(
        self,
        env: Env,
        name: str,
        loop: VirtualLoop,
        settings: ControllerSettings,
        on_become_leader: Callable[[int, str], None],
        on_change_sent: Callable[[], None] = lambda: None,
    ) -> None:
        self.on_change_sent = on_change_sent
        self.env = env
        self.name = name
        self.loop = loop
        self.settings = settings
        self.on_become_leader = on_become_leader
        self._calls: dict[int, _Call] = {}
        self._last_call = 0

    async def _call(
        self, dst: str, make: Callable[[int], m.Body], timeout_steps: int | None = None
    ) -> m.Body:
        self._last_call += 1
        call = self._last_call
        future: asyncio.Future[m.Body] = self.loop.create_future()
        timeout = timeout_steps or self.settings.rpc_timeout_steps
        self._calls[call] = _Call(future, self.env.now + timeout)
        body = make(call)
        self.env.send(self.name, dst, body)
        if isinstance(body, (m.NewTerm, m.BecomeLeader, m.AddFollower, m.RemoveFollower)):
            self.on_change_sent()
        try:
            answer = await future
        finally:
            self._calls.pop(call, None)
        if isinstance(answer, m.Refused):
            if answer.epoch_seen is not None:
                raise ControllerFenced(
                    f"a storage pod says: {answer.reason}", pod_epoch=answer.epoch_seen
                )
            raise rpc_error(grpc.StatusCode[answer.code], f"{answer.request}: {answer.reason}")
        return answer

    def deliver(self, body: m.Body) -> None:
        call = self._calls.get(getattr(body, "call", 0))
        if call is not None and not call.future.done():
            call.future.set_result(body)

    def expire(self) -> None:
        for call in self._calls.values():
            if self.env.now >= call.deadline_step and not call.future.done():
                call.future.set_exception(rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline"))

    def abandon(self) -> None:
        """The process is gone: nothing it awaited will complete."""
        for call in self._calls.values():
            if not call.future.done():
                call.future.cancel()

    # -- PodCalls ------------------------------------------------------------------------

    async def new_term(
        self, address: str, shard: int, term: int, namespace: NamespaceSpec | None, epoch: int
    ) -> Fenced:
        create = namespace is not None
        answer = await self._call(address, lambda call: m.NewTerm(term, epoch, call, create))
        assert isinstance(answer, m.NewTermResponse), answer
        return Fenced((answer.head.term, answer.head.offset), answer.incarnation)

    async def become_leader(
        self,
        leader: PodAddress,
        shard: int,
        term: int,
        followers: Iterable[PodAddress],
        epoch: int,
        incarnations: Any = None,
    ) -> None:
        members = tuple(member_of(f.internal) for f in followers)
        known = tuple(sorted((incarnations or {}).items()))
        self.on_become_leader(term, leader.internal)
        answer = await self._call(
            leader.internal, lambda call: m.BecomeLeader(term, members, known, epoch, call)
        )
        assert isinstance(answer, m.BecomeLeaderResponse), answer

    async def add_follower(
        self, leader_address: str, shard: int, term: int, follower: PodAddress, epoch: int
    ) -> None:
        member = member_of(follower.internal)
        answer = await self._call(
            leader_address, lambda call: m.AddFollower(term, member, epoch, call)
        )
        assert isinstance(answer, m.EnsembleChangeResponse), answer

    async def remove_follower(
        self, leader_address: str, shard: int, term: int, follower_internal: str, epoch: int
    ) -> None:
        answer = await self._call(
            leader_address, lambda call: m.RemoveFollower(term, follower_internal, epoch, call)
        )
        assert isinstance(answer, m.EnsembleChangeResponse), answer

    async def delete_shard(self, address: str, shard: int, term: int, epoch: int) -> None:
        answer = await self._call(address, lambda call: m.DeleteShard(term, epoch, call))
        assert isinstance(answer, m.Done), answer

    async def status(self, address: str) -> tuple[ReplicaReport, ...]:
        answer = await self._call(
            address, m.PodStatus, timeout_steps=self.settings.status_timeout_steps
        )
        assert isinstance(answer, m.PodStatusResponse), answer
        return answer.reports

    async def replica_status(self, address: str, shard: int) -> ReplicaReport:
        reports = await self.status(address)
        if not reports:
            raise rpc_error(grpc.StatusCode.NOT_FOUND, f"{address} has no replica of {shard}")
        return reports[0]

    async def push_assignments(
        self, address: str, assignments: pb.ShardAssignments, version: int, epoch: int
    ) -> None:
        answer = await self._call(address, lambda call: m.PushAssignments(epoch, call))
        assert isinstance(answer, m.Done), answer


@dataclass
class _Seen:
    view: NodeView
    last_answer_step: int | None = None
    polling: bool = False


class SimObserver:
    """Failure detection from the pods' status answers (the executor's NodeViews)."""

    def __init__(
        self, env: Env, pods: SimPods, nodes: Iterable[str], settings: ControllerSettings
    ) -> None:
        self.env = env
        self.pods = pods
        self.settings = settings
        self.started_step = env.now
        self.changed = False
        self._nodes = {
            name: _Seen(NodeView(name, member_of(name).public_address, name)) for name in nodes
        }
        self.leader_reports = LeaderReports()
        self._tasks: list[asyncio.Task[None]] = []

    def _elapsed_ms(self) -> int:
        return (self.env.now - self.started_step) * STEP_MS

    def known(self) -> bool:
        return all(seen.last_answer_step is not None for seen in self._nodes.values())

    def tick(self, loop: VirtualLoop) -> None:
        self._tasks = [task for task in self._tasks if not task.done()]
        if (self.env.now - self.started_step) % self.settings.status_interval_steps == 0:
            for name, seen in self._nodes.items():
                if not seen.polling:
                    self._tasks.append(loop.create_task(self._poll_once(name)))
        for name in self._nodes:
            self._update(name)

    def _update(self, name: str) -> None:
        seen = self._nodes[name]
        last = seen.last_answer_step
        alive = last is not None and self.env.now - last <= self.settings.dead_after_steps
        if alive == seen.view.alive:
            return
        if alive:
            seen.view = replace(seen.view, alive=True, alive_since_ms=self._elapsed_ms())
        else:
            seen.view = replace(
                seen.view, alive=False, dead_since_ms=self._elapsed_ms(), replicas=None
            )
        self.changed = True

    async def _poll_once(self, name: str) -> None:
        seen = self._nodes[name]
        seen.polling = True
        try:
            reports = await self.pods.status(name)
        except grpc.aio.AioRpcError:
            return
        finally:
            seen.polling = False
        seen.last_answer_step = self.env.now
        self._update(name)
        replicas = {report.shard: report for report in reports}
        self.leader_reports.note(reports)
        if seen.view.replicas != replicas:
            seen.view = replace(seen.view, replicas=replicas)
            self.changed = True

    # -- NodeViews -------------------------------------------------------------------------

    def node(self, name: str) -> NodeView | None:
        seen = self._nodes.get(name)
        if seen is None:
            return None
        self._update(name)
        return seen.view

    def view(self) -> Observed:
        for name in self._nodes:
            self._update(name)
        return Observed(
            now_ms=self._elapsed_ms(),
            nodes={name: seen.view for name, seen in self._nodes.items()},
            leader_reports=self.leader_reports.snapshot(),
        )

    async def refresh(self, names: Iterable[str]) -> None:
        await asyncio.gather(*(self._poll_once(name) for name in names if name in self._nodes))


class SimController:
    """One controller process (see the module docstring)."""

    def __init__(
        self,
        name: str,
        env: Env,
        cluster: MemoryCluster,
        spec: ClusterSpec,
        nodes: list[str],
        settings: ControllerSettings,
        claims: dict[int, dict[str, str]],
        on_change_sent: Callable[[SimController], None] = lambda controller: None,
    ) -> None:
        self.on_change_sent = on_change_sent
        self.name = name
        self.env = env
        self.cluster = cluster
        self.spec = spec
        self.nodes = nodes
        self.settings = settings
        # term -> {leader: the controller that made it leader}, across controllers.
        self.claims = claims
        self.process = 0
        # Believes it holds the leadership (and acts), until fenced or stopped.
        self.active = False
        self.paused = False
        self.inbox: list[Envelope] = []
        self.loop: VirtualLoop | None = None
        self.pods: SimPods | None = None
        self.observer: SimObserver | None = None
        self.keeper: StateKeeper | None = None
        self.executor: Executor | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._inflight: dict[object, asyncio.Task[None]] = {}
        self._backoff: dict[object, tuple[int, int]] = {}
        self._next_plan_step = 0
        self._next_push_step = 0
        self._started_step = 0
        self.fenced_count = 0

    # -- life cycle --------------------------------------------------------------------

    def start(self) -> None:
        """A new process that holds the lease: it takes the next epoch."""
        assert not self.active
        env = self.env
        self.process += 1
        env.net.up(self.name, self.process)
        loop = VirtualLoop(clock_s=lambda: env.now * STEP_MS / 1000)
        self.loop = loop
        self.pods = SimPods(
            env, self.name, loop, self.settings, self._claim, lambda: self.on_change_sent(self)
        )
        self.observer = SimObserver(env, self.pods, self.nodes, self.settings)
        self.keeper = None
        self.executor = None
        self._inflight = {}
        self._backoff = {}
        self._tasks = [loop.create_task(self._take_over())]
        self._started_step = env.now
        self._next_plan_step = env.now + self.settings.startup_grace_steps
        self._next_push_step = env.now
        self.active = True
        self.paused = False
        env.log(f"{self.name} starts (process {self.process})", "controllers started")
        loop.run_until_idle()

    async def _take_over(self) -> None:
        store = MemoryStateStore(self.cluster)
        state = await store.create(self.spec)
        keeper = StateKeeper(store, state)
        epoch = await keeper.take_epoch()
        assert self.pods is not None and self.observer is not None
        self.keeper = keeper
        self.executor = Executor(
            keeper,
            self.pods,
            self.observer,
            wall_ms=lambda: self.env.now_ms,
            straggler_grace_s=self.settings.straggler_grace_s,
        )
        self.env.log(f"{self.name} takes controller epoch {epoch}")

    def stop(self, why: str) -> None:
        """The process ends (crashed, or fenced and exiting): what it awaited is
        abandoned, its tasks cancelled."""
        loop = self.loop
        if loop is None:
            return
        self.env.log(f"{self.name} stops: {why}")
        self.active = False
        self.paused = False
        self.inbox = []
        self.env.net.down(self.name)
        assert self.pods is not None
        self.pods.abandon()
        tasks = loop.tasks()
        for task in tasks:
            task.cancel()
        loop.run_until_idle()
        loop.close()
        self.loop = None

    def crash(self) -> None:
        if self.active:
            self.env.log(f"{self.name} crashes", "controller crashes")
            self.stop("crashed")
            self.start()

    def pause(self) -> None:
        self.env.log(f"{self.name} pauses", "controllers paused")
        self.paused = True

    def resume(self) -> None:
        self.env.log(f"{self.name} resumes (epoch {self.epoch})", "controllers resumed")
        self.paused = False
        inbox, self.inbox = self.inbox, []
        for envelope in inbox:
            self.receive(envelope)

    @property
    def epoch(self) -> int | None:
        return self.keeper.epoch if self.keeper is not None else None

    def _claim(self, term: int, leader: str) -> None:
        self.claims.setdefault(term, {}).setdefault(leader, self.name)

    # -- each step ---------------------------------------------------------------------

    def receive(self, envelope: Envelope) -> None:
        if not self.active:
            return
        if self.paused:
            self.inbox.append(envelope)
            return
        assert self.pods is not None and self.loop is not None
        self.pods.deliver(envelope.body)
        self.loop.run_until_idle()

    def tick(self, faults: bool) -> None:
        if not self.active or self.paused:
            return
        loop, pods, observer = self.loop, self.pods, self.observer
        assert loop is not None and pods is not None and observer is not None
        pods.expire()
        observer.tick(loop)
        loop.run_until_idle()
        keeper, executor = self.keeper, self.executor
        if keeper is not None and keeper.fenced.is_set():
            self.fenced_count += 1
            self.env.count("controllers fenced")
            self.stop("fenced: a newer controller has taken over")
            return
        if executor is None or keeper is None:
            return
        env = self.env
        if env.now >= self._next_push_step:
            loop.call_soon(executor.push_assignments)
            self._next_push_step = env.now + self.settings.push_interval_steps
        grace_over = env.now - self._started_step >= self.settings.startup_grace_steps
        if (observer.changed or env.now >= self._next_plan_step) and (
            grace_over or observer.known()
        ):
            observer.changed = False
            self._next_plan_step = env.now + self.settings.plan_interval_steps
            self._plan(keeper.state)
        loop.run_until_idle()

    def _plan(self, state: ClusterState) -> None:
        assert self.observer is not None and self.loop is not None
        actions = plan(
            state.spec, state.status, state.generation, self.observer.view(), self.settings.planner
        )
        for action in actions:
            key = _key(action)
            if key in self._inflight or not self._due(key):
                continue
            if len(self._inflight) >= self.settings.max_parallel_actions:
                break
            self._inflight[key] = self.loop.create_task(self._attempt(key, action))

    def _due(self, key: object) -> bool:
        backoff = self._backoff.get(key)
        return backoff is None or self.env.now >= backoff[0]

    async def _attempt(self, key: object, action: Action) -> None:
        executor = self.executor
        assert executor is not None
        try:
            await executor.run(action)
        except asyncio.CancelledError:
            raise
        except ControllerFenced:
            pass  # the keeper is fenced: tick() stops the controller
        except Exception as error:
            previous = self._backoff.get(key, (0, self.settings.backoff_min_steps // 2))[1]
            delay = min(self.settings.backoff_max_steps, previous * 2)
            self._backoff[key] = (self.env.now + delay, delay)
            self.env.log(f"{self.name}: {type(action).__name__} failed: {_brief(error)}")
        else:
            self._backoff.pop(key, None)
            self.env.count(f"controller actions done: {type(action).__name__}")
        finally:
            self._inflight.pop(key, None)
            self._next_plan_step = self.env.now


def _key(action: Action) -> object:
    shard = shard_of(action)
    return ("shard", shard) if shard is not None else type(action).__name__


def _brief(error: BaseException) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return f"{type(error).__name__}: {error}"


def shard_record(cluster: MemoryCluster) -> ShardRecord | None:
    try:
        status = cluster.state().status
    except Exception:
        return None
    return status.shard(SHARD)


def steady_leader(record: ShardRecord | None) -> tuple[int, str] | None:
    if record is None or record.state is not ShardState.STEADY or record.leader is None:
        return None
    return record.term, record.leader


@dataclass(frozen=True, slots=True)
class ControlFaults:
    """Faults of the controller side (per step)."""

    # The active controller pauses (SIGSTOP, a long GC) past its lease.
    pause_probability: float = 0.0
    lease_steps: int = 40
    max_pause_steps: int = 200
    # ... and right after it sent a call that changes a pod, before its answer
    # (the moment a stale controller can do harm), with this chance per call.
    pause_after_call_probability: float = 0.0
    # Another writer moves the store's version just before a controller's write.
    conflict_probability: float = 0.02
    # An operator asks for the leader to move to another member.
    leader_move_probability: float = 0.0
    # An operator changes the ensembles: a replication factor change (n -> n-1 ->
    # n+1 -> n, in turn) or a scale-in of the storage pods (or back out).
    operator_probability: float = 0.0


class Controllers:
    """The controller side as the world sees it: two controller processes (one
    holds the lease; the other stands by), the store they share, and operators
    writing to it. `leader`, `ensemble` and the rest read the recorded state."""

    NAMES = ("controller", "controller-2")

    def __init__(
        self,
        env: Env,
        nodes: list[str],
        replication_factor: int,
        settings: ControllerSettings,
        faults: ControlFaults,
    ) -> None:
        self.env = env
        self.faults = faults
        self.replication_factor = replication_factor
        self.rf_cycle = (replication_factor - 1, replication_factor + 1, replication_factor)
        self.rf_changes = 0
        self.storage_pods = len(nodes)
        rng = env.rng
        probability = faults.conflict_probability
        self.cluster = MemoryCluster(
            interfere=lambda: probability > 0 and rng.random() < probability
        )
        self.spec = ClusterSpec(
            namespaces=(NamespaceSpec(NAMESPACE, shards=1, replication_factor=replication_factor),),
            storage_pods=len(nodes),
        )
        self.nodes = nodes
        self.claims: dict[int, dict[str, str]] = {}
        self.controllers = [
            SimController(
                name, env, self.cluster, self.spec, nodes, settings, self.claims, self._call_sent
            )
            for name in self.NAMES
        ]
        # The controller whose lease runs out at `lease_ends_step` (paused).
        self.paused: SimController | None = None
        self.live_faults = True
        self.resume_step = 0
        self.lease_ends_step = 0
        self.controllers[0].start()

    # -- the recorded state --------------------------------------------------------------

    def record(self) -> ShardRecord | None:
        return shard_record(self.cluster)

    @property
    def ensemble(self) -> list[str]:
        record = self.record()
        return list(record.ensemble) if record is not None else []

    @property
    def voters(self) -> list[str]:
        record = self.record()
        return list(record.voters) if record is not None else []

    @property
    def leader(self) -> tuple[int, str] | None:
        return steady_leader(self.record())

    @property
    def highest_term(self) -> int:
        record = self.record()
        return record.term if record is not None else 0

    @property
    def elections_started(self) -> int:
        return self.highest_term

    def intact(self, name: str, incarnation: int) -> bool:
        """The fault model's judgement (ShardRecord.intact's rule, restated so
        that a mutant of the controller's does not change the faults)."""
        record = self.record()
        recorded = record.incarnation_of(name) if record is not None else None
        return recorded is None or incarnation == recorded

    @property
    def active(self) -> list[SimController]:
        return [c for c in self.controllers if c.active]

    # -- each step -----------------------------------------------------------------------

    def receive(self, envelope: Envelope) -> None:
        for controller in self.controllers:
            if controller.name == envelope.dst:
                controller.receive(envelope)

    def tick(self, faults: bool) -> None:
        env = self.env
        paused = self.paused
        if paused is not None:
            if env.now >= self.lease_ends_step and not any(
                c.active and not c.paused for c in self.controllers
            ):
                standby = next(c for c in self.controllers if not c.active)
                env.log(f"{paused.name}'s lease ran out: {standby.name} takes over")
                standby.start()
            if env.now >= self.resume_step and any(
                c.active and c is not paused for c in self.controllers
            ):
                self.paused = None
                paused.resume()
        for controller in self.controllers:
            controller.tick(faults)
        if not any(c.active for c in self.controllers):
            # Every process ended (fenced): one is restarted and takes the lease.
            self.controllers[0].start()
        if faults:
            self._inject_faults()

    def _inject_faults(self) -> None:
        env, faults, rng = self.env, self.faults, self.env.rng
        if (
            faults.pause_probability
            and self.paused is None
            and rng.random() < faults.pause_probability
        ):
            running = [c for c in self.controllers if c.active and not c.paused]
            if len(running) == 1:
                victim = running[0]
                victim.pause()
                self.paused = victim
                self.lease_ends_step = env.now + faults.lease_steps
                self.resume_step = env.now + rng.randint(
                    faults.lease_steps + 1, faults.max_pause_steps
                )
        if faults.leader_move_probability and rng.random() < faults.leader_move_probability:
            self.start_election("for no reason")
        if faults.operator_probability and rng.random() < faults.operator_probability:
            self._operate(rng.randrange(2))

    def _pause(self, victim: SimController) -> None:
        env, faults = self.env, self.faults
        victim.pause()
        self.paused = victim
        self.lease_ends_step = env.now + faults.lease_steps
        self.resume_step = env.now + env.rng.randint(faults.lease_steps + 1, faults.max_pause_steps)

    def _call_sent(self, controller: SimController) -> None:
        if (
            self.live_faults
            and self.paused is None
            and not controller.paused
            and sum(1 for c in self.controllers if c.active) == 1
            and self.env.buggify(
                "controllers paused right after a call", self.faults.pause_after_call_probability
            )
        ):
            self._pause(controller)

    def crash(self) -> None:
        for controller in self.controllers:
            if controller.active and not controller.paused:
                controller.crash()
                return

    def close(self) -> None:
        for controller in self.controllers:
            controller.stop("the simulation ends")

    def quiesce(self) -> None:
        self.live_faults = False
        paused = self.paused
        if paused is not None:
            self.paused = None
            if not any(c.active and c is not paused for c in self.controllers):
                next(c for c in self.controllers if not c.active).start()
            paused.resume()

    # -- operators -----------------------------------------------------------------------

    def start_election(self, why: str) -> None:
        """An operator asks for the leader to move (the planner moves it once the
        target can take over)."""
        record = self.record()
        if record is None or record.leader is None:
            return
        others = [name for name in record.ensemble if name != record.leader]
        if not others:
            return
        target = self.env.rng.choice(others)
        self.env.log(f"operator: move the leader to {target} ({why})", "leader moves requested")
        state = self.cluster.state()
        status = replace(state.status, leader_moves=(LeaderMove(SHARD, target),))
        self.cluster.store(state.spec, status, state.generation)

    def _operate(self, kind: int) -> None:
        env = self.env
        state = self.cluster.state()
        spec = state.spec
        if kind == 0:
            rf = self.rf_cycle[self.rf_changes % len(self.rf_cycle)]
            self.rf_changes += 1
            env.log(f"operator: replication factor {rf}", "replication factor changes")
            namespace = replace(spec.namespaces[0], replication_factor=rf)
            spec = replace(spec, namespaces=(namespace,))
        else:
            pods = len(self.nodes) - 1 if spec.storage_pods == len(self.nodes) else len(self.nodes)
            env.log(f"operator: {pods} storage pods", "scale changes")
            spec = replace(spec, storage_pods=pods)
        self.cluster.store(spec, state.status, state.generation + 1)
