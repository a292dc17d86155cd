"""The shipped controller and the shipped storage pods on one simulated network.

Two controller processes (managed_controller.py: cairn.controller.runtime's
Controller as it ships, one holding the lease) and five storage pods
(managed_pod.py: the real coordination, replication and health services over
simulated disks) run on VirtualLoops, talking gRPC over the simulated network
(grpc_net.py). The namespace has one shard at a replication factor of three:
the controller elects, fences, replaces members it takes for dead, and
follows what operators ask of it. Only the sidecars are simulated: a pod's
heartbeat reaches a running controller while the two can reach each other.

Faults (`Faults`, per millisecond step; the profiles in PROFILES): power
losses (several pods at once too), lost disks (only as the fault model
allows: `_may_lose_disk`), network cuts (the controllers are nodes of the
network), pods isolated from everyone, followers lagging far behind, learners
stopped part-way, controller crashes and pauses past the lease (right after a
call that changes a pod, too), conflicting writes to the cluster state, and
operators: leader moves, replication factor changes, scale-in and back out.

Checked after every step: pod_checks.py's invariants on the pods, (g) no two
leaders given one term by the controllers, and each read's freshness as it is
answered; once healed, the controller must bring the shard to a serving leader
that takes writes, and every member must converge on its state.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from cairn.controller.model import (
    ClusterSpec,
    ClusterStatus,
    LeaderMove,
    NamespaceSpec,
    ShardRecord,
    ShardState,
)
from cairn.controller.runtime import Controller
from cairn.controller.state.memory_store import MemoryCluster
from cairn.proto import replication_pb2 as rpb
from cairn.storage.core.replication.leader import LeaderCore
from cairn.storage.core.replication.replica import Role
from cairn.storage.core.retention import WalRetention
from simulation.grpc_net import SimNet
from simulation.managed_controller import ControllerProcess, Lease
from simulation.managed_pod import SHARD, Pod
from simulation.pod_lockers import Lockers
from simulation.pod_world import SimulatedPods
from simulation.real_cluster import LIMITS, SETTINGS, Violation, sync_latency_ms
from simulation.virtual_loop import VirtualLoop

CONTROLLERS = ("controller", "controller-2")
# Calls of the controller that change a pod: a pause right after one is when a
# stale controller can do harm.
CHANGING_CALLS = ("NewTerm", "BecomeLeader", "AddFollower", "RemoveFollower", "DeleteShard")
# How long a paused controller stays paused (ms): past the lease, mostly.
PAUSE_MS = (50.0, 400.0)
# Liveness: writes not acknowledged within this long are sent again (ms).
RESEND_MS = 100


@dataclass(frozen=True)
class Faults:
    """Chances per step (a simulated millisecond) of each fault."""

    power_loss: float = 0.001
    # Of single power losses, the share that lasts long enough to be replaced.
    long_outage_share: float = 0.3
    correlated_power_loss: float = 0.0005
    cut: float = 0.0015
    isolation: float = 0.0007
    controller_crash: float = 0.0005
    controller_pause: float = 0.0
    # Per call that changes a pod, with one controller running.
    pause_after_call: float = 0.0
    # Per write to the cluster state: another writer got there first.
    state_conflict: float = 0.0
    leader_move: float = 0.0
    # A replication factor change (n -> n-1 -> n+1 -> n) or a scale change.
    operator: float = 0.0
    lost_disk: float = 0.0
    # Some followers cut off from everyone for long (ms), then a leader change.
    long_lag: float = 0.0
    long_lag_ms: tuple[float, float] = (150, 400)
    # Per step and learner that has taken something: it loses power.
    learner_stop: float = 0.0
    burst: float = 0.005
    # Chance per step that the lockers act (0: no lockers).
    lockers: float = 0.0
    # Pods trim their logs past this many bytes (None: never), so that a
    # follower back from a long outage is sent a snapshot.
    wal_max_bytes: int | None = None
    # Storage pods, and the shard's replication factor (the rest are spares).
    pods: int = 5
    replication_factor: int = 3
    # How long notifications are kept (ms; trimmed every 256th entry).
    notification_retention_ms: int = LIMITS.notification_retention_ms
    # Of the pods' syncs, the share that is slow (5-40 ms, not 0.2-2 ms).
    slow_sync_share: float = 0.1


CHURN = Faults(
    power_loss=0.002,
    controller_pause=0.0003,
    pause_after_call=0.05,
    state_conflict=0.02,
    leader_move=0.001,
    operator=0.002,
    learner_stop=0.002,
)
PROFILES: dict[str, Faults] = {
    "steady": Faults(),
    "lagging": Faults(long_lag=0.001),
    "churn": CHURN,
    "wipes": dataclasses.replace(CHURN, lost_disk=0.001),
    # Clients with sessions taking an ephemeral lock (pod_lockers.py), and
    # more cuts, which may leave them with an old leader.
    "sessions": Faults(lockers=0.3, cut=0.005),
    # Logs trimmed (a second's check of 4 KiB), outages long enough to need a
    # snapshot to catch up, and bursts of writes meanwhile.
    "snapshots": Faults(wal_max_bytes=4096, long_outage_share=0.6, burst=0.01),
    # Five replicas of seven pods, operators and controller pauses as in churn;
    # notifications kept 100 ms, so that their trims meet apply groups.
    "five": dataclasses.replace(CHURN, pods=7, replication_factor=5, notification_retention_ms=100),
}


class Cluster(SimulatedPods):
    def __init__(self, seed: int, faults: Faults | None = None) -> None:
        rng = random.Random(seed)
        self.faults = faults = faults or Faults()
        max_bytes = faults.wal_max_bytes
        super().__init__(
            rng,
            SimNet(rng),
            SETTINGS,
            dataclasses.replace(LIMITS, notification_retention_ms=faults.notification_retention_ms),
            None if max_bytes is None else WalRetention(max_bytes=max_bytes),
        )
        self.net.on_request = self._request_sent
        self.pods = {f"pod-{i}": Pod(f"pod-{i}", self) for i in range(faults.pods)}
        conflicts = faults.state_conflict
        self.state = MemoryCluster(interfere=lambda: conflicts > 0 and rng.random() < conflicts)
        namespace = NamespaceSpec("default", shards=1, replication_factor=faults.replication_factor)
        spec = ClusterSpec(namespaces=(namespace,), storage_pods=faults.pods)
        self.controllers = [ControllerProcess(name, self, self.state, spec) for name in CONTROLLERS]
        self.lease = Lease()
        self.resume_at: dict[str, float] = {}
        rf = faults.replication_factor
        # An operator's replication factor changes, in turn.
        self.replication_factors = (rf - 1, rf + 1, rf)
        self.operator_changes = 0
        self.lag_ends_ms: float | None = None
        self.lockers = Lockers(2, self.rng, lambda: self.now_ms, self.count, self.violations)
        # The highest commit offset a leader had when it acknowledged a write:
        # a replica durable up to here holds every acknowledged write.
        self.acknowledged_within = -1
        self._acknowledged_seen = 0
        # term -> {leader: the controller that made it leader}, over all calls sent.
        self.claims: dict[int, dict[str, str]] = {}
        for pod in self.pods.values():
            pod.start()
        self.lease.take(self.controllers[0], self.now_ms)

    def sync_latency_ms(self) -> float:
        return sync_latency_ms(self.rng, self.faults.slow_sync_share)

    def loops(self) -> list[VirtualLoop]:
        processes: list[Pod | ControllerProcess] = [*self.pods.values(), *self.controllers]
        return [process.loop for process in processes if process.loop is not None]

    # -- what the controllers recorded -------------------------------------------------------

    def record(self) -> ShardRecord | None:
        try:
            return self.state.state().status.shard(SHARD)
        except Exception:  # nothing stored yet
            return None

    def leader_pod(self) -> Pod | None:
        """The pod a client with the controller's shard map sends to."""
        record = self.record()
        if record is None or record.leader is None:
            return None
        return self.pods.get(record.leader)

    def leading_core(self, name: str | None) -> LeaderCore | None:
        """The leader's side of `name`'s replica; None unless it leads."""
        pod = self.pods.get(name) if name is not None else None
        replica = pod.replica() if pod is not None else None
        return replica.core.leading if replica is not None else None

    def active_controller(self) -> ControllerProcess | None:
        holder = self.lease.holder
        return holder if holder is not None and holder.running else None

    # -- time ------------------------------------------------------------------------------

    def after_processes_ran(self) -> None:
        self._controllers_step()
        self._note_acknowledged()

    def _controllers_step(self) -> None:
        """The lease: renewed by a running holder; when it runs out (the holder
        crashed, exited or is paused), a standby process takes it."""
        now = self.now_ms
        for process in self.controllers:
            if process.up and process.exited:
                process.stop()
                process.down_until_ms = now + self.rng.uniform(5, 50)
                self.count("controller processes exited")
            if process.paused and now >= self.resume_at.get(process.name, 0.0):
                lost = None if self.lease.holder is process else self.rng.uniform(0, 30)
                process.resume(lost)
                self.count("controllers resumed")
        self.lease.renew(now)
        if self.lease.free(now):
            standby = [p for p in self.controllers if not p.up and now >= p.down_until_ms]
            if standby:
                self.lease.take(standby[0], now)

    def _request_sent(self, client: str, server: str, method: str, request: bytes) -> None:
        name = method.rsplit("/", 1)[-1]
        if client not in CONTROLLERS or name not in CHANGING_CALLS:
            return
        if name == "BecomeLeader":
            message = rpb.BecomeLeaderRequest.FromString(request)
            leaders = self.claims.setdefault(message.term, {})
            leaders.setdefault(server, client)
            if len(leaders) > 1:
                who = ", ".join(f"{pod} by {by}" for pod, by in leaders.items())
                self.violations.append(f"(g) term {message.term} was given to {who}")
        process = next(p for p in self.controllers if p.name == client)
        running = [p for p in self.controllers if p.running]
        if (
            running == [process]
            and self.faults.pause_after_call
            and self.rng.random() < self.faults.pause_after_call
        ):
            self._pause(process)
            self.count("controllers paused right after a call")

    def _pause(self, process: ControllerProcess) -> None:
        process.pause()
        self.resume_at[process.name] = self.now_ms + self.rng.uniform(*PAUSE_MS)
        self.count("controllers paused")

    def _note_acknowledged(self) -> None:
        """How far the acknowledged writes reach in the log, at most (the fault
        model's judgement of who holds them)."""
        if len(self.clients.acknowledged_in_order) == self._acknowledged_seen:
            return
        self._acknowledged_seen = len(self.clients.acknowledged_in_order)
        for pod in self.pods.values():
            replica = pod.replica()
            if replica is not None and replica.role is Role.LEADER:
                self.acknowledged_within = max(self.acknowledged_within, replica.core.commit_offset)

    # -- clients ---------------------------------------------------------------------------

    def _client_target(self) -> Pod:
        leader = self.leader_pod()
        if leader is not None and self.rng.random() < 0.9:
            return leader
        return self.pods[self.rng.choice(sorted(self.pods))]

    def _up_client_target(self) -> Pod | None:
        pod = self._client_target()
        return pod if pod.up else None

    def client_write(self, pod: Pod | None = None) -> None:
        pod = pod or self._client_target()
        if pod.up:
            self.clients.write(pod)

    def client_read(self) -> None:
        """Mostly one of the last writes acknowledged: what a stale state lacks."""
        if not self.clients.acknowledged:
            return
        pod = self._client_target()
        key = self.rng.choice(self.clients.acknowledged_in_order[-8:])
        if pod.up:
            self.clients.read(pod, key, self.now_ms)

    # -- faults ----------------------------------------------------------------------------

    def _faults(self) -> None:
        rng, faults, now = self.rng, self.faults, self.now_ms
        for pod in self.pods.values():
            if not pod.up and now >= pod.down_until_ms:
                pod.start()
                self.count("restarts")
        up = [pod for pod in self.pods.values() if pod.up]
        if rng.random() < faults.power_loss and len(up) > 1:
            victim = rng.choice(up)
            victim.lose_power()
            long = rng.random() < faults.long_outage_share
            victim.down_until_ms = now + rng.uniform(5, 1_500 if long else 200)
        if rng.random() < faults.correlated_power_loss:
            for pod in rng.sample(up, min(len(up), rng.choice((2, 3)))):
                if pod.up:
                    pod.lose_power()
                    pod.down_until_ms = now + rng.uniform(5, 50)
            self.count("correlated power losses")
        if rng.random() < faults.cut:
            a, b = rng.sample([*sorted(self.pods), *CONTROLLERS], 2)
            self.net.cut_apart(a, b, now + rng.uniform(10, 400))
            self.count("network cuts")
        if rng.random() < faults.isolation:
            isolated = rng.choice(sorted(self.pods))
            self.net.isolate(isolated, [*self.pods, *CONTROLLERS], now + rng.uniform(50, 600))
            self.count("pods isolated")
        active = self.active_controller()
        if active is not None and rng.random() < faults.controller_crash:
            active.stop()
            active.down_until_ms = now + rng.uniform(5, 300)
            self.count("controller crashes")
        active = self.active_controller()
        if active is not None and rng.random() < faults.controller_pause:
            self._pause(active)
        if rng.random() < faults.lost_disk:
            self._lose_disk(rng.choice(sorted(self.pods)))
        if faults.long_lag:
            self._long_lag()
        if faults.learner_stop:
            self._stop_learners()
        active = self.active_controller()
        if active is not None and rng.random() < faults.leader_move:
            self._move_leader(active)
        if active is not None and rng.random() < faults.operator:
            self._operate(active)

    def _lose_disk(self, name: str) -> None:
        if not self._may_lose_disk(name):
            self.count("lost disks skipped (beyond the fault model)")
            return
        pod = self.pods[name]
        pod.lose_disk()
        pod.down_until_ms = self.now_ms + self.rng.uniform(5, 200)

    def _may_lose_disk(self, victim: str) -> bool:
        """A shard survives losing the disks of a minority of its voters, as
        recorded (the members, and those still leaving), and of the members
        alone (a removal under way may finish after the loss): without the
        victim, a majority of each must still answer for the data it is
        recorded to hold (its replica exists, of the recorded incarnation),
        and one of them hold every acknowledged write durably. Pods that are
        not voters may lose their disks at any time. (An election needs that
        much, planner.answer_problem: a loss beyond it waits for an operator
        by design.)"""
        record = self.record()
        if record is None:
            return False
        for voters in (record.voters, record.ensemble):
            if victim not in voters:
                continue
            answering = [n for n in voters if n != victim and self._answers_for_data(record, n)]
            if len(answering) * 2 <= len(voters):
                return False
            if not any(self._holds_every_acknowledged_write(n) for n in answering):
                return False
        return True

    def _answers_for_data(self, record: ShardRecord, name: str) -> bool:
        incarnation = self.pods[name].incarnation()
        recorded = record.incarnation_of(name)
        return incarnation is not None and (recorded is None or recorded == incarnation)

    def _holds_every_acknowledged_write(self, name: str) -> bool:
        disk = self.pods[name].disk()
        return disk is not None and disk.wal.synced_offset >= self.acknowledged_within

    def _long_lag(self) -> None:
        rng, now = self.rng, self.now_ms
        if self.lag_ends_ms is not None:
            if now < self.lag_ends_ms:
                return
            self.lag_ends_ms = None
            leader, active = self.leader_pod(), self.active_controller()
            if leader is not None and leader.up and rng.random() < 0.5:
                leader.lose_power()
                leader.down_until_ms = now + rng.uniform(5, 200)
                self.count("leaders lost after a long lag")
            elif active is not None:
                self._move_leader(active)
            return
        record = self.record()
        if record is None or record.leader is None or rng.random() >= self.faults.long_lag:
            return
        followers = sorted(set(record.ensemble) - {record.leader})
        if not followers:
            return
        self.lag_ends_ms = now + rng.uniform(*self.faults.long_lag_ms)
        for name in rng.sample(followers, rng.randint(1, len(followers))):
            self.net.isolate(name, [*self.pods, *CONTROLLERS], self.lag_ends_ms)
        self.count("long lags")

    def _stop_learners(self) -> None:
        record = self.record()
        core = self.leading_core(record.leader if record is not None else None)
        if core is None:
            return
        for name, progress in core.followers.items():
            pod = self.pods.get(name)
            if (
                pod is not None
                and pod.up
                and not core.is_voting(name)
                and progress.acked_offset >= 0
                and self.rng.random() < self.faults.learner_stop
            ):
                pod.lose_power()
                pod.down_until_ms = self.now_ms + self.rng.uniform(5, 200)
                self.count("learners stopped part-way")

    def _move_leader(self, active: ControllerProcess) -> None:
        """An operator asks for the leader to move (the API's request)."""
        record = self.record()
        if record is None or record.leader is None:
            return
        others = [name for name in record.ensemble if name != record.leader]
        if not others:
            return
        self.request_leader_move(active, self.rng.choice(others))

    def request_leader_move(self, active: ControllerProcess, target: str) -> None:
        def move(status: ClusterStatus) -> ClusterStatus:
            moves = tuple(m for m in status.leader_moves if m.shard != SHARD)
            return replace(status, leader_moves=(*moves, LeaderMove(SHARD, target)))

        async def request(controller: Controller) -> object:
            assert controller.keeper is not None
            return await controller.keeper.update_status(move)

        active.act(request)
        self.count("leader moves requested")

    def _operate(self, active: ControllerProcess) -> None:
        """An operator changes the replication factor (n -> n-1 -> n+1 -> n, in
        turn) or scales the storage pods in by one (or back out)."""
        if self.rng.randrange(2) == 0:
            cycle = self.replication_factors
            factor = cycle[self.operator_changes % len(cycle)]
            self.operator_changes += 1
            self.request_replication_factor(active, factor)
            return

        def change(spec: ClusterSpec) -> ClusterSpec:
            most = self.faults.pods
            pods = most - 1 if spec.storage_pods == most else most
            return replace(spec, storage_pods=pods)

        self._update_spec(active, change)
        self.count("scale changes")

    def request_replication_factor(self, active: ControllerProcess, factor: int) -> None:
        def change(spec: ClusterSpec) -> ClusterSpec:
            namespace = replace(spec.namespaces[0], replication_factor=factor)
            return replace(spec, namespaces=(namespace,))

        self._update_spec(active, change)
        self.count("replication factor changes")

    def _update_spec(
        self, active: ControllerProcess, change: Callable[[ClusterSpec], ClusterSpec]
    ) -> None:
        async def request(controller: Controller) -> object:
            assert controller.keeper is not None
            return await controller.keeper.update_spec(change)

        active.act(request)

    # -- a history -------------------------------------------------------------------------

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self._faults()
            if self.rng.random() < 0.3:
                self.client_write()
            if self.rng.random() < self.faults.burst:
                # A burst: entries wait for their commit, and the leader folds.
                pod = self._client_target()
                for _ in range(self.rng.randint(5, 40)):
                    self.client_write(pod)
            if self.rng.random() < 0.2:
                self.client_read()
            if self.faults.lockers and self.rng.random() < self.faults.lockers:
                self.lockers.act(self._up_client_target)
            self.step()

    def heal_and_settle(self, within_ms: float = 10_000) -> None:
        """Every pod and a controller up, running and connected: the controller
        must bring the shard to a serving leader."""
        self.net.heal()
        for pod in self.pods.values():
            if not pod.up:
                pod.start()
        for process in self.controllers:
            if process.paused:
                process.resume(None if self.lease.holder is process else 0.0)
        if not self.steps_until(self._steady, within_ms):
            raise Violation(
                f"no serving leader within {within_ms:g} ms of a healed cluster "
                f"(record: {self.record()})"
            )

    def _steady(self) -> bool:
        record = self.record()
        if record is None or record.state is not ShardState.STEADY or record.leader is None:
            return False
        replica = self.pods[record.leader].replica()
        return replica is not None and replica.serving and replica.term == record.term

    def check_writes_go_through(self, count: int = 20, within_ms: float = 2_000) -> None:
        """Liveness: writes sent to the leader the record names (again, now and
        then, while too few are acknowledged: the leader may still move, as
        the controller balances or finishes a move) go through."""
        acknowledged = self.clients.acknowledged
        wanted = len(acknowledged) + count
        deadline = self.now_ms + within_ms
        while len(acknowledged) < wanted:
            if self.now_ms >= deadline:
                raise Violation(
                    f"only {count - (wanted - len(acknowledged))} of {count} writes "
                    f"acknowledged within {within_ms:g} ms of a healed cluster "
                    f"(record: {self.record()})"
                )
            leader = self.leader_pod()
            if leader is not None:
                for _ in range(wanted - len(acknowledged)):
                    self.client_write(leader)
            self.steps_until(lambda: len(acknowledged) >= wanted, RESEND_MS)

    def check_members_converge(self, within_ms: float = 5_000) -> None:
        """Every member applies what its leader committed (and (d) holds their
        states equal)."""

        def converged() -> bool:
            record = self.record()
            leader = self.leader_pod()
            if record is None or leader is None:
                return False
            replica = leader.replica()
            if replica is None:
                return False
            commit = replica.core.commit_offset
            for name in record.ensemble:
                member = self.pods[name].replica()
                if member is None or member.core.applied_offset < commit:
                    return False
            return True

        if not self.steps_until(converged, within_ms):
            raise Violation(f"the members did not converge within {within_ms:g} ms")

    def close(self) -> None:
        self.count("leaders serving", self.checks.leaders_serving)
        self.count("terms", max(self.claims, default=0))
        for process in self.controllers:
            if process.up:
                process.stop()
        for pod in self.pods.values():
            if pod.up:
                pod.lose_power()
