"""The driver: one shard, its replicas, the controller, clients, the network and
faults, all under one `random.Random(seed)`.

One step, in this order: deliver the messages due now; inject faults (partitions,
crashes, restarts, trims, a controller crash, long lags, a lost disk); clients
send; replicas whose log has an unsynced tail may sync; the controller acts;
every replica pumps (applies, streams); the checkers run. `run_seed` runs a
faulty phase of `steps` steps, then stops the faults and heals the network. With
only a majority of the ensemble up (a minority that was down stays down), a
final election must lead to a new write acknowledged within
`max_steps_to_commit`; then every member starts, the shard runs until it
converges (bounded), and liveness is checked.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core.replication.leader import LeaderCore
from cairn.storage.core.replication.replica import Role
from simulation import messages as m
from simulation.checkers import (
    CheckerState,
    Violation,
    check_liveness,
    check_lock_taken,
    check_step,
    converged,
)
from simulation.clients import KEYS, LOCK_KEY, AckedWrite, Clients
from simulation.context import STEP_MS, Env, RuntimeRules
from simulation.controller import ControlFaults, Controllers, ControllerSettings
from simulation.coordinator import NAME as CONTROLLER
from simulation.coordinator import Coordinator, CoordinatorSettings
from simulation.network import Envelope, Network, NetworkFaults
from simulation.observer import Observer
from simulation.replica import SimReplica
from simulation.storage import shard_rules

CLIENT = "client"
# Readers send reads; random partitions may cut one off with some replicas (a
# client that still reaches an old leader while the others moved on).
READERS = ("reader-0", "reader-1")
# Lockers: clients with a session that take an ephemeral lock (LOCK_KEY), keep
# their session alive, and now and then crash (their session then expires).
LOCKERS = ("locker-0", "locker-1")
# Shorter than a pod allows (2 s), as the lease is (RuntimeRules.lease_ms): on
# the simulation's time scale, leaders change every few seconds, and a session
# must be able to expire under one leader.
SESSION_TIMEOUT_MS = 600
KEEPALIVE_STEPS = 15
# A request unanswered this long is given up (sent again if still wanted).
CLIENT_RETRY_STEPS = 60
# How often the liveness phase sends its write again while none is acknowledged.
RESEND_STEPS = 20
TRACE_TAIL_LINES = 40


@dataclass(frozen=True, slots=True)
class SimConfig:
    replicas: int = 3
    steps: int = 1000
    rules: RuntimeRules = field(default_factory=RuntimeRules)
    faults: NetworkFaults = field(default_factory=NetworkFaults)
    # The controller side: "real" (the real planner, executor and keeper,
    # simulation/controller.py) or "scripted" (coordinator.py, for scripted
    # scenarios that need to elect exactly whom they say).
    controller: str = "real"
    coordinator_class: type[Coordinator] = Coordinator
    controller_settings: ControllerSettings = field(default_factory=ControllerSettings)
    control_faults: ControlFaults = field(default_factory=ControlFaults)
    # Storage pods beyond the ensemble (the real controller's spares).
    spare_nodes: int = 2
    leader_core_class: type[LeaderCore] = LeaderCore
    client_write_probability: float = 0.4
    # Reads, each step, by a reader; 0 keeps readers out of partitions too.
    client_read_probability: float = 0.0
    # Each step, each locker acts (session, keep-alive, lock) with this chance;
    # 0 keeps lockers out (and out of partitions).
    session_probability: float = 0.0
    locker_crash_probability: float = 0.004
    sync_probability: float = 0.3
    crash_probability: float = 0.006
    # A correlated crash (a rack losing power): a majority of the replicas at once,
    # each losing its unsynced tail.
    power_loss_probability: float = 0.002
    restart_probability: float = 0.06
    trim_probability: float = 0.01
    partition_probability: float = 0.006
    max_partition_steps: int = 60
    max_partitions: int = 2
    controller_crash_probability: float = 0.002
    # A long lag: some followers of the leader (one, up to all) cut off for
    # `long_lag_steps`, far longer than the leader's send window and write buffer
    # take to fill, then a leader change (the leader crashes, or an election).
    long_lag_probability: float = 0.0
    long_lag_steps: tuple[int, int] = (150, 400)
    # A replica loses its disk (log, KV and term) and comes back empty with a new
    # incarnation of its data; only within the fault model (World._wipe: a
    # shard survives losing the disks of a minority of its voters).
    wipe_probability: float = 0.0
    # A learner (a member the leader is still catching up) stops part-way: it
    # crashes (and restarts later like any crashed replica), per step and learner.
    learner_stop_probability: float = 0.0
    random_election_probability: float = 0.004
    ensemble_change_probability: float = 0.006
    # Entries' timestamps advance 10 ms a step: 1 s of retention is 100 steps, so
    # notification trimming (every 256th entry) does happen.
    notification_retention_ms: int = 1000
    max_quiet_steps: int = 3000
    # With faults over and a majority up, a write is acknowledged within this many.
    max_steps_to_commit: int = 600


class SimulationFailure(AssertionError):
    pass


@dataclass
class Locker:
    """A client holding a session and, at times, the lock. What it believes: its
    session lives until `live_until` (a timeout after sending the last request
    the leader answered for it), and it holds the lock while it does."""

    name: str
    session: int | None = None
    creating: tuple[int, int] | None = None  # (request id, sent step)
    live_until: int = -1
    holds: bool = False
    acquiring: tuple[int, int] | None = None  # (request id, sent step)
    last_keepalive_step: int = -1

    def believes_holding(self, now: int) -> bool:
        return self.holds and now < self.live_until


class World:
    def __init__(self, seed: int, config: SimConfig) -> None:
        self.seed = seed
        self.config = config
        rng = random.Random(seed)
        self.env = Env(
            rng,
            Network(rng, config.faults),
            Observer(),
            config.rules,
            shard_rules(config.notification_retention_ms),
            config.leader_core_class,
        )
        self.observer = self.env.observer
        self.replicas: dict[str, SimReplica] = {}
        self.coordinator: Coordinator | Controllers
        if config.controller == "real":
            # Every pod starts without the shard's replica: the controller places
            # the shard and its first election creates them.
            nodes = [
                self._new_replica(absent=True) for _ in range(config.replicas + config.spare_nodes)
            ]
            # The scripted coordinator's elections "for no reason" are an
            # operator's leader moves here, and its ensemble changes an
            # operator's replication factor and scale changes (each a few).
            faults = dataclasses.replace(
                config.control_faults,
                leader_move_probability=config.random_election_probability,
                operator_probability=config.ensemble_change_probability / 5,
            )
            self.coordinator = Controllers(
                self.env, nodes, config.replicas, config.controller_settings, faults
            )
        else:
            names = [self._new_replica() for _ in range(config.replicas)]
            settings = CoordinatorSettings(
                min_size=max(3, config.replicas - 1),
                max_size=config.replicas + 1,
                random_election_probability=config.random_election_probability,
                ensemble_change_probability=config.ensemble_change_probability,
            )
            coordinator = config.coordinator_class(
                self.env,
                names,
                settings,
                self._new_replica,
                self._is_leading,
                incarnation_of=lambda name: self.replicas[name].data_incarnation,
            )
            coordinator.lacks_replica = lambda name: (
                self.replicas[name].up and self.replicas[name].absent
            )
            self.coordinator = coordinator
        self.clients = Clients(rng)
        self.checks = CheckerState()
        self.faults = True
        # Replicas whose WAL syncs only when the runtime syncs explicitly (scripts).
        self.held_syncs: set[str] = set()
        self.acks_seen = 0
        # The step at which the current long lag ends with a leader change.
        self.lag_ends_step: int | None = None
        # Crashed replicas kept down until a step (a slow restart), by name.
        self.down_until: dict[str, int] = {}
        self.reads_sent = 0
        self.env.net.up(CLIENT, 1)
        for reader in READERS:
            self.env.net.up(reader, 1)
        self.lockers = {name: Locker(name) for name in LOCKERS}
        # request id of a lock put -> its locker
        self.lock_requests: dict[int, str] = {}
        self.sessions_seen = 0
        self.keepalives_seen = 0
        self.lock_acquisitions = 0
        for name in LOCKERS:
            self.env.net.up(name, 1)

    # -- queries -----------------------------------------------------------------------

    def live_replicas(self) -> list[SimReplica]:
        return [replica for replica in self.replicas.values() if replica.up]

    def current_leader(self) -> SimReplica | None:
        leader = self.coordinator.leader
        if leader is None or not self._is_leading(leader[1], leader[0]):
            return None
        return self.replicas[leader[1]]

    def _is_leading(self, name: str, term: int) -> bool:
        """The controller's failure detection: health reports reach it, and say
        that the replica leads `term`."""
        replica = self.replicas[name]
        core = replica.core
        # (The real controller's failure detection is its own: see controller.py.)
        scripted = not isinstance(self.coordinator, Controllers)
        return (
            core is not None
            and not (scripted and self.env.net.cut(name, CONTROLLER))
            and core.role is Role.LEADER
            and core.term == term
        )

    def describe(self) -> str:
        lines = [f"ensemble {self.coordinator.ensemble}, leader {self.coordinator.leader}"]
        for replica in self.replicas.values():
            core = replica.core
            state = "down" if core is None else f"{core.role.name} term {core.term}"
            lines.append(
                f"  {replica.name}: {state}, log {replica.log.base}..{replica.log.head} "
                f"synced {replica.log.synced_offset}, applied {replica.kv.applied_offset}, "
                f"commit {replica.commit_offset if core is not None else '-'}"
            )
        return "\n".join(lines)

    # -- running -----------------------------------------------------------------------

    def run(self) -> None:
        """The faulty phase, then the quiet one, then the liveness check."""
        try:
            for _ in range(self.config.steps):
                self._guarded(self.step)
            self._guarded(self.quiesce)
            self._guarded(lambda: check_liveness(self))
        finally:
            if isinstance(self.coordinator, Controllers):
                self.coordinator.close()

    def _guarded(self, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception as error:
            tail = "\n".join(list(self.env.trace)[-TRACE_TAIL_LINES:])
            raise SimulationFailure(
                f"seed {self.seed} ({self.config.replicas} replicas) failed at step "
                f"{self.env.now}: {type(error).__name__}: {error}\n"
                f"state:\n{self.describe()}\ntrace tail:\n{tail}"
            ) from error

    def step(self) -> None:
        env = self.env
        env.now += 1
        for envelope in env.net.due(env.now):
            self._deliver(envelope)
        if self.faults:
            self._inject_faults()
        if self.faults and env.rng.random() < self.config.client_write_probability:
            self._client_write()
        if self.config.client_read_probability > 0 and (
            env.rng.random() < self.config.client_read_probability
        ):
            self._client_read()
        for replica in self.live_replicas():
            if replica.name in self.held_syncs:
                continue
            if replica.log.last_offset > replica.log.synced_offset and (
                not self.faults or env.rng.random() < self.config.sync_probability
            ):
                replica.sync()
        self.coordinator.tick(self.faults)
        for replica in self.live_replicas():
            replica.pump()
        self._lockers_learn()
        for write in self.observer.acked[self.acks_seen :]:
            self.clients.acknowledged(write)
            self._lock_answered(write)
        self.acks_seen = len(self.observer.acked)
        if self.faults and self.config.session_probability > 0:
            self._lockers_act()
        check_step(self)

    def quiesce(self) -> None:
        env = self.env
        env.log("faults stop, the network heals")
        self.faults = False
        env.net.faults = NetworkFaults.none()
        env.net.heal()
        if isinstance(self.coordinator, Controllers):
            self.coordinator.quiesce()
        ensemble = self.coordinator.ensemble
        # A minority that was down may stay down, as long as the members up then
        # include a majority whose data is intact (a wiped member rebuilt but not
        # yet recorded as caught up does not count: the shard waits for it).
        intact = {name for name in ensemble if self._intact(name)}
        staying_down: list[str] = []
        for name in ensemble:
            if self.replicas[name].up or len(staying_down) >= (len(ensemble) - 1) // 2:
                continue
            if len(intact - {*staying_down, name}) * 2 > len(ensemble):
                staying_down.append(name)
        for name in ensemble:
            if not self.replicas[name].up and name not in staying_down:
                self.replicas[name].start()
        self.coordinator.start_election("final")
        self._commit_a_new_write(staying_down)
        for name in staying_down:
            self.replicas[name].start()
        for _ in range(self.config.max_quiet_steps):
            self.step()
            if converged(self):
                return

    def _commit_a_new_write(self, down: list[str]) -> None:
        """Liveness with a majority up: a leader of the final election's term (or a
        later one) acknowledges a write within `max_steps_to_commit`, whatever the
        followers' lags were (a write the leader's buffer refused is sent again)."""
        final_term = self.coordinator.highest_term
        first_ack = len(self.observer.acked)
        for step in range(self.config.max_steps_to_commit):
            if step % RESEND_STEPS == 0:
                self._client_write()
            self.step()
            if any(write.term >= final_term for write in self.observer.acked[first_ack:]):
                return
        raise Violation(
            f"(liveness) with {sorted(down) or 'no member'} down and the rest up and "
            f"connected, no write was acknowledged in {self.config.max_steps_to_commit} "
            f"steps after the election of term {final_term}: {self.describe()}"
        )

    def _deliver(self, envelope: Envelope) -> None:
        body = envelope.body
        if not isinstance(body, m.ReplicateResponse):
            self.env.log(f"{envelope.src} -> {envelope.dst}: {_brief(body)}")
        if envelope.dst not in self.replicas:
            self.coordinator.receive(envelope)
            return
        replica = self.replicas[envelope.dst]
        replica.receive(envelope)
        if replica.crash_requested and self.faults:
            self.env.log(f"{replica.name} crashes right after answering", "crashes")
            replica.crash()

    # -- faults and clients ------------------------------------------------------------

    def _inject_faults(self) -> None:
        env, config, rng = self.env, self.config, self.env.rng
        net = env.net
        net.heal(env.now)
        if len(net.partitions) < config.max_partitions and rng.random() < (
            config.partition_probability
        ):
            # Pods without the shard's replica (spares) are left out: cutting
            # them off changes nothing for the shard.
            nodes = [name for name, replica in self.replicas.items() if not replica.absent]
            if isinstance(self.coordinator, Controllers):
                nodes.extend(Controllers.NAMES)
            else:
                nodes.append(CONTROLLER)
            if config.client_read_probability > 0:
                nodes.extend(READERS)
            if config.session_probability > 0:
                nodes.extend(LOCKERS)
            cut_off = frozenset(rng.sample(nodes, rng.randint(1, max(1, len(nodes) // 2))))
            net.partition(cut_off, env.now + rng.randint(5, config.max_partition_steps))
            env.log(f"partition: {sorted(cut_off)} cut off", "partitions")
        live = self.live_replicas()
        if live and rng.random() < config.crash_probability:
            victim = rng.choice(live)
            env.log(f"{victim.name} crashes (synced {victim.log.synced_offset})", "crashes")
            victim.crash()
        elif live and rng.random() < config.power_loss_probability:
            victims = rng.sample(live, min(len(live), len(self.replicas) // 2 + 1))
            env.log(f"power loss: {sorted(v.name for v in victims)} crash", "power losses")
            for victim in victims:
                victim.crash()
        for replica in self.replicas.values():
            if (
                not replica.up
                and env.now >= self.down_until.get(replica.name, 0)
                and rng.random() < config.restart_probability
            ):
                replica.start()
                env.log(f"{replica.name} restarts at term {replica.persisted_term}", "restarts")
        if rng.random() < config.trim_probability:
            self._trim(rng.choice(list(self.replicas.values())))
        if rng.random() < config.controller_crash_probability:
            self.coordinator.crash()
        if config.long_lag_probability > 0:
            self._long_lag()
        if config.learner_stop_probability:
            self._stop_learners()
        if config.wipe_probability and rng.random() < config.wipe_probability:
            self._wipe(rng.choice(list(self.replicas.values())))

    def _long_lag(self) -> None:
        env, rng = self.env, self.env.rng
        if self.lag_ends_step is not None:
            if env.now < self.lag_ends_step:
                return
            self.lag_ends_step = None
            leader = self.current_leader()
            if leader is not None and rng.random() < 0.5:
                env.log(f"{leader.name} crashes after a long lag", "leaders crashed after a lag")
                leader.crash()
            else:
                self.coordinator.start_election("after a long lag")
            return
        leader = self.current_leader()
        if leader is None or rng.random() >= self.config.long_lag_probability:
            return
        followers = sorted(set(self.coordinator.ensemble) - {leader.name})
        if not followers:
            return
        lagging = frozenset(rng.sample(followers, rng.randint(1, len(followers))))
        self.lag_ends_step = env.now + rng.randint(*self.config.long_lag_steps)
        env.net.partition(lagging, self.lag_ends_step)
        env.log(f"long lag: {sorted(lagging)} cut off until {self.lag_ends_step}", "long lags")

    def _stop_learners(self) -> None:
        leader = self.current_leader()
        if leader is None or leader.leading is None:
            return
        core = leader.leading.core
        for name, progress in core.followers.items():
            replica = self.replicas[name]
            if (
                replica.up
                and not core.is_voting(name)
                and progress.acked_offset >= 0  # part-way: it has taken something
                and self.env.rng.random() < self.config.learner_stop_probability
            ):
                self.env.log(
                    f"{name} stops part-way through catching up (acked {progress.acked_offset}, "
                    f"leader at {leader.log.last_offset})",
                    "learners stopped part-way",
                )
                replica.crash()

    def _wipe(self, victim: SimReplica) -> bool:
        """The victim's disk is lost (it restarts empty, with a new incarnation
        of its data; true), if the shard is promised to survive that: losing the
        disks of a minority of its voters, as the controller counts them. A
        voter (a member, or one still leaving) may lose its disk only if,
        without it, both among the voters now and among the members alone (a
        removal under way may finish after the wipe, and the leaving member's
        data then no longer counts):

        1. the voters that can answer an election for the data they are
           recorded to hold are a majority of the voters. A voter cannot when
           it lost its disk and has not been caught up since (its leader
           readmitted it, and the controller recorded its new incarnation), or
           when its replica is not created yet (a member being added); one
           merely lagging, or down, can (it answers with its head once up);
        2. one of them holds on its disk everything acknowledged to clients.

        (1) is what an election needs (planner.answer_problem): a wipe beyond
        it leaves a shard that waits for an operator, by design. So one disk
        at a time may be lost at 3 replicas or more, while the other members
        lag (issue 38's hole 1: B wiped while C lags and only the leader holds
        everything), but none at 2: one of two is not a majority, and half of
        an even ensemble elects only while the controller remembers that its
        last leader committed in its term (election.enough_answers, best
        effort; a restarted controller does not). (2) follows from (1) when
        the controller is correct; it is stated so that the fault model never
        rests on what it tests. Pods that are not voters (spares, members
        already removed) may lose their disks at any time.

        The judgement is the correct controller's (a mutant's may differ)."""
        if not all(self._survives_wipe(voters, victim.name) for voters in self._voter_sets()):
            self.env.count("wipes skipped (beyond the loss of a minority of the voters)")
            return False
        self.env.log(f"{victim.name} loses its disk", "wipes")
        victim.wipe()
        return True

    def _survives_wipe(self, voters: list[str], victim: str) -> bool:
        if victim not in voters:
            return True
        answering = [n for n in voters if n != victim and self._answers_for_its_data(n)]
        return len(answering) * 2 > len(voters) and any(
            self._holds_everything_acknowledged(name) for name in answering
        )

    def _voter_sets(self) -> list[list[str]]:
        """Whom an election may have to hear from a majority of, now or later:
        with the real controller, the recorded members and those still
        leaving, and the members alone (a removal under way may finish after
        the wipe, and then the leaving member's data no longer counts)."""
        coordinator = self.coordinator
        if isinstance(coordinator, Controllers):
            return [coordinator.voters, coordinator.ensemble]
        return [list(coordinator.ensemble)]

    def _answers_for_its_data(self, name: str) -> bool:
        """Can `name` answer an election for the data the controller recorded
        it to hold: is its replica created, not wiped since or caught up again?"""
        replica = self.replicas[name]
        incarnation = replica.data_incarnation
        if isinstance(self.coordinator, Controllers):
            return not replica.absent and self.coordinator.intact(name, incarnation)
        return not replica.absent and Coordinator.intact(self.coordinator, name, incarnation)

    def _intact(self, name: str) -> bool:
        """Does `name` hold the data the controller recorded? (The correct
        controller's judgement: a mutant's may differ.)"""
        if isinstance(self.coordinator, Controllers):
            # With ensemble changes, a member may also hold less than what was
            # acknowledged without any wipe: one added and still catching up, or
            # one whose replica is not created yet. It does not count either.
            return self._answers_for_its_data(name) and self._holds_everything_acknowledged(name)
        incarnation = self.replicas[name].data_incarnation
        return Coordinator.intact(self.coordinator, name, incarnation)

    def _holds_everything_acknowledged(self, name: str) -> bool:
        acked = self.observer.ack_max_offsets
        return self.replicas[name].log.synced_offset >= (acked[-1] if acked else -1)

    def _trim(self, replica: SimReplica) -> None:
        log, applied = replica.log, replica.kv.applied_offset
        if not replica.up or not log.entries or applied <= log.first_offset:
            return
        offset = self.env.rng.randint(log.first_offset + 1, min(applied, log.last_offset))
        self.env.log(f"{replica.name} trims its log before {offset}", "trims")
        replica.trim(offset)

    def _client_target(self, leader_share: float) -> str:
        """Where a client sends: mostly to the leader the controller names, else
        to any replica (a client's shard map can be stale)."""
        leader = self.coordinator.leader
        rng = self.env.rng
        if leader is not None and rng.random() < leader_share:
            return leader[1]
        return rng.choice(list(self.replicas))

    def _client_write(self) -> None:
        target = self._client_target(0.95)
        request_id, request = self.clients.next_request()
        self.env.send(CLIENT, target, m.ClientWrite(request_id, request.SerializeToString()))

    def _client_read(self) -> None:
        target = self._client_target(0.9)
        reader = self.env.rng.choice(READERS)
        self.reads_sent += 1
        key = self.env.rng.choice(KEYS)
        self.env.send(reader, target, m.ClientRead(self.reads_sent, reader, self.env.now, key))

    # -- lockers -----------------------------------------------------------------------

    def _lockers_learn(self) -> None:
        """What the leader answered lockers this step: sessions created,
        keep-alives; and beliefs that ran out."""
        timeout_steps = SESSION_TIMEOUT_MS // STEP_MS
        observer, now = self.observer, self.env.now
        for client, request_id, session_id, _ in observer.sessions_created[self.sessions_seen :]:
            locker = self.lockers[client]
            if locker.creating is not None and locker.creating[0] == request_id:
                locker.session = session_id
                locker.live_until = locker.creating[1] + timeout_steps
                locker.last_keepalive_step = now
                locker.creating = None
        self.sessions_seen = len(observer.sessions_created)
        for client, session_id, sent_step, _ in observer.keepalives[self.keepalives_seen :]:
            locker = self.lockers[client]
            if locker.session == session_id:
                locker.live_until = max(locker.live_until, sent_step + timeout_steps)
        self.keepalives_seen = len(observer.keepalives)
        for locker in self.lockers.values():
            if locker.session is not None and now >= locker.live_until:
                self.env.log(f"{locker.name} takes session {locker.session} as lost")
                locker.session, locker.holds, locker.acquiring = None, False, None

    def _lock_answered(self, write: AckedWrite) -> None:
        name = self.lock_requests.pop(write.request_id, None)
        if name is None:
            return
        locker = self.lockers[name]
        if locker.acquiring is None or locker.acquiring[0] != write.request_id:
            return
        locker.acquiring = None
        response = pb.WriteResponse.FromString(write.response)
        if response.puts[0].status != pb.OK:
            return
        self.lock_acquisitions += 1
        self.env.log(f"{name} takes the lock (session {locker.session})", "locks taken")
        check_lock_taken(self, locker)
        locker.holds = True

    def _lockers_act(self) -> None:
        env, rng, now = self.env, self.env.rng, self.env.now
        for locker in self.lockers.values():
            if rng.random() >= self.config.session_probability:
                continue
            if locker.session is not None and rng.random() < self.config.locker_crash_probability:
                env.log(f"{locker.name} crashes (session {locker.session})", "lockers crashed")
                locker.session, locker.holds, locker.acquiring = None, False, None
                continue
            target = self._client_target(0.9)
            if locker.session is None:
                if locker.creating is None or now - locker.creating[1] > CLIENT_RETRY_STEPS:
                    self.clients.next_request_id += 1
                    request_id = self.clients.next_request_id
                    locker.creating = (request_id, now)
                    body = m.CreateSession(request_id, locker.name, SESSION_TIMEOUT_MS)
                    env.send(locker.name, target, body)
                continue
            if now - locker.last_keepalive_step >= KEEPALIVE_STEPS:
                locker.last_keepalive_step = now
                env.send(locker.name, target, m.KeepAlive(locker.session, locker.name, now))
            elif not locker.holds and (
                locker.acquiring is None or now - locker.acquiring[1] > CLIENT_RETRY_STEPS
            ):
                self.clients.next_request_id += 1
                request_id = self.clients.next_request_id
                request = pb.WriteRequest()
                request.puts.add(
                    key=LOCK_KEY,
                    value=locker.name.encode(),
                    expected_version_id=-1,
                    session_id=locker.session,
                )
                locker.acquiring = (request_id, now)
                self.lock_requests[request_id] = locker.name
                env.send(
                    locker.name, target, m.ClientWrite(request_id, request.SerializeToString())
                )

    def _new_replica(self, absent: bool = False) -> str:
        # Named like a StatefulSet's pods (<prefix>-<ordinal>), as the controller
        # requires.
        name = f"r-{len(self.replicas)}"
        self.replicas[name] = SimReplica(name, self.env, absent)
        return name


def _brief(body: m.Body) -> str:
    if isinstance(body, m.Replicate):
        offsets = f"{body.entries[0].offset}..{body.entries[-1].offset}" if body.entries else "-"
        return f"Replicate(s{body.session} t{body.term} {offsets} commit {body.commit_offset})"
    if isinstance(body, m.SendSnapshot):
        return f"SendSnapshot(s{body.session} t{body.term} {body.last_included})"
    if isinstance(body, m.Truncate):
        return f"Truncate(s{body.session} t{body.term} head {body.leader_head})"
    if isinstance(body, m.ClientWrite):
        return f"ClientWrite({body.request_id})"
    if isinstance(body, m.ClientRead):
        return f"ClientRead({body.read_id} from {body.reader}, {body.key})"
    return repr(body)


def run_seed(seed: int, config: SimConfig) -> World:
    world = World(seed, config)
    world.run()
    return world


# Fault profiles the tests run. "steady": the defaults, with most steps making
# progress; "churn": more crashes and power losses, slower syncs (so crashes hit
# unsynced tails), frequent leader moves and ensemble changes (replication factor
# and scale), and a controller paused past its lease now and then; "wipes": churn,
# and now and then a replica losing its disk.
CHURN = SimConfig(
    control_faults=ControlFaults(pause_probability=0.002, pause_after_call_probability=0.05),
    learner_stop_probability=0.02,
    sync_probability=0.1,
    crash_probability=0.01,
    power_loss_probability=0.01,
    restart_probability=0.1,
    random_election_probability=0.01,
    ensemble_change_probability=0.05,
)
PROFILES: dict[str, SimConfig] = {
    "steady": SimConfig(),
    # Followers lagging by hundreds of entries (windows are 8, write buffers 64)
    # before a leader change, on top of the steady faults.
    "lagging": SimConfig(long_lag_probability=0.01),
    # Reads from readers that partitions may cut off with an old leader, beside
    # writes that reach the new one.
    # Lockers too: sessions kept alive, an ephemeral lock taken and given up.
    "reading": SimConfig(
        client_read_probability=0.4, partition_probability=0.02, session_probability=0.5
    ),
    "churn": CHURN,
    # Churn, and disks lost (within the fault model: a minority at a time).
    "wipes": dataclasses.replace(CHURN, wipe_probability=0.01),
}
