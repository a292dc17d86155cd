"""A pure, deterministic in-memory cluster for planner tests.

`ModelCluster` holds what the controller records (spec, status, generation)
and what the storage pods hold (their replicas of each shard), and carries out
the planner's actions the way `cairn.controller.executor` does, step by step:
every status write and every call into a pod is one step, so an action can be
cut short after any step (`apply(action, stop_after=k)`: a controller that
crashed there). Calls into a node that is down fail, which ends the action as
`ActionFailed` would; calls into live nodes behave like the storage pod's
coordination service (fencing rules included), so a call the real pod would
refuse fails here too.

Logs: a replica's log is a tuple of entry terms (`log[i]` is the term of the
entry at offset i), so heads compare as the storage does ((term, offset)) and
the model can check that no committed entry is ever lost. Replication is
reduced to one rule (`replicate`): every live follower of a live leader adopts
the leader's log whole (Truncate plus streaming, done at once) and acknowledges
it; a learner that has acknowledged the commit offset becomes voting; the
leader's commit offset is then what a majority of its voters hold, counting
only once a majority holds the term's first entry (as `QuorumTracker` does).

Catch-up timing: with `instant_catch_up=True` (the default) `replicate` runs
after every completed action and write, so an added learner is voting before
the planner looks again. With `instant_catch_up=False` it runs only when the
test calls `replicate()` (the "one extra step" a real follower needs), so the
planner sees learners and lagging acknowledgements in between.

Failures: `kill` makes a pod stop answering (its replicas keep their state, as
in a partition); `revive(restarted=True)` brings it back as a restarted pod
(every replica fenced in its term, leaders forget their followers), with
`restarted=False` as it was; `wipe` drops its replicas (a lost disk).

Observation (`observe()`, the planner's input) lags like the real observer's:
liveness follows `up` at once, or, for `kill(noticed=False)`, only at the next
`notice()` (until then calls into the pod fail while it still looks alive);
replica reports are those of the last `poll()` of the node, and are unknown
(None) after it turned alive until it is polled. After a completed action the
model polls the nodes the executor has the observer refresh; `step()` (one
reconcile round) notices and polls everything.

Safety: the model tracks, per shard, the longest log prefix ever committed and
raises `ModelInvariantError` if a leader takes office without it or a follower
would have to drop committed entries. A wipe of a voter legitimately defeats
this (the storage assumes durable logs), so shards whose voters were wiped are
exempt from the check (`tainted`).

Incarnations: with `incarnations=True` every replica created empty draws a new
incarnation of its data (a counter), reported as the pod reports it; leaders
track their followers' incarnations as LeaderCore does (one answering with
another is readmitted: its acknowledgement forgotten, a learner that still
counts in the majority's size until it holds the commit offset and the term's
first entry), and the executor steps record and check them as the executor
does. Wipes then taint nothing: what the storage and the controller do about a
lost disk is what is checked (tests must keep to the fault model: a minority of
a shard's members wiped at a time). Off (the default), incarnations are 0 ("not
reported") and the model behaves as before they existed.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from cairn.common.hashing import HashRange
from cairn.common.heartbeat import FollowerReport, ReplicaReport
from cairn.controller import steps
from cairn.controller.actions import (
    Action,
    ChangeEnsemble,
    ConfirmLeader,
    DeleteReplica,
    DropLeaderMove,
    Elect,
    FinishEnsembleChange,
    ObserveGeneration,
    PlaceShards,
    RecordNode,
    RecordVoting,
)
from cairn.controller.election import choose_leader
from cairn.controller.model import (
    ClusterSpec,
    ClusterStatus,
    ElectionRecord,
    LeaderMove,
    NamespaceSpec,
    NodeRecord,
    ShardRecord,
    ShardState,
)
from cairn.controller.observed import LeaderReports, NodeView, Observed
from cairn.controller.placement import leader_load
from cairn.controller.planner import (
    PlannerSettings,
    commit_to_record,
    counted_voters,
    incarnations_to_record,
    learners_voting,
    plan,
)

FENCED = "fenced"
FOLLOWER = "follower"
LEADER = "leader"
NO_OFFSET = -1
NO_TERM = -1


class ActionFailed(Exception):
    """A step the executor could not complete (a node down, a call refused)."""


class ModelInvariantError(AssertionError):
    """The model saw a committed entry lost: the plan (or choose_leader) was unsafe."""


def majority(count: int) -> int:
    return count // 2 + 1


def public_address(name: str) -> str:
    return f"{name}.pods:6648"


def internal_address(name: str) -> str:
    return f"{name}.pods:6649"


@dataclass
class FollowerState:
    acked_offset: int = NO_OFFSET
    voting: bool = False
    # The incarnation of its data the leader tracks (None: not heard yet).
    incarnation: int | None = None
    # Readmitted after losing its data: a learner that counts in the majority's size.
    returning: bool = False


@dataclass
class Replica:
    shard: int
    namespace: str
    term: int = NO_TERM
    role: str = FENCED
    # The term of each entry; offsets are indexes.
    log: tuple[int, ...] = ()
    commit_offset: int = NO_OFFSET
    leader_address: str = ""
    # Only while leading: followers by internal address, and the offset of
    # this term's first entry.
    followers: dict[str, FollowerState] = field(default_factory=dict)
    term_start_offset: int = NO_OFFSET
    # The incarnation of its data (0: not modelled).
    incarnation: int = 0

    @property
    def head(self) -> tuple[int, int]:
        if not self.log:
            return (NO_TERM, NO_OFFSET)
        return (self.log[-1], len(self.log) - 1)

    def report(self) -> ReplicaReport:
        head_term, head_offset = self.head
        return ReplicaReport(
            shard=self.shard,
            namespace=self.namespace,
            role=self.role,
            term=self.term,
            head_term=head_term,
            head_offset=head_offset,
            commit_offset=self.commit_offset,
            durable_offset=head_offset,
            applied_offset=self.commit_offset,
            leader_internal_address=self.leader_address,
            followers=tuple(
                FollowerReport(
                    address, state.acked_offset, state.voting, "streaming", state.incarnation or 0
                )
                for address, state in sorted(self.followers.items())
            ),
            incarnation=self.incarnation,
            term_start_offset=self.term_start_offset if self.role == LEADER else None,
            commit_term=(
                self.log[self.commit_offset] if 0 <= self.commit_offset < len(self.log) else None
            ),
        )


@dataclass
class ModelNode:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    # Whether the pod runs and answers calls.
    up: bool = True
    # What the observer believes (it notices a change in `up` late, see notice()).
    alive: bool = True
    alive_since_ms: int = 0
    dead_since_ms: int = 0
    replicas: dict[int, Replica] = field(default_factory=dict)
    # Its replicas as of the observer's last poll; None if not polled since it
    # last turned alive.
    seen: dict[int, ReplicaReport] | None = field(default_factory=dict)

    @property
    def internal_address(self) -> str:
        return internal_address(self.name)

    @property
    def public_address(self) -> str:
        return public_address(self.name)

    def reports(self) -> dict[int, ReplicaReport]:
        return {shard: replica.report() for shard, replica in sorted(self.replicas.items())}

    def view(self) -> NodeView:
        return NodeView(
            name=self.name,
            public_address=self.public_address,
            internal_address=self.internal_address,
            labels=dict(self.labels),
            alive=self.alive,
            alive_since_ms=self.alive_since_ms,
            dead_since_ms=self.dead_since_ms,
            replicas=dict(self.seen) if self.seen is not None else None,
        )


class ModelCluster:
    def __init__(
        self,
        spec: ClusterSpec,
        nodes: Mapping[str, Mapping[str, str]] | Iterable[str],
        *,
        now_ms: int = 0,
        instant_catch_up: bool = True,
        status: ClusterStatus | None = None,
        incarnations: bool = False,
    ) -> None:
        self.spec = spec
        self.status = status or ClusterStatus()
        self.generation = 1
        self.now_ms = now_ms
        self.instant_catch_up = instant_catch_up
        self.incarnations = incarnations
        self._last_incarnation = 0
        labelled = nodes if isinstance(nodes, Mapping) else {name: {} for name in nodes}
        self.nodes: dict[str, ModelNode] = {
            name: ModelNode(name, dict(labels), alive_since_ms=now_ms, dead_since_ms=now_ms)
            for name, labels in labelled.items()
        }
        self.leader_reports = LeaderReports()
        # Each shard's leader of each term as it was when it stopped leading
        # (restarted, fenced, wiped): the truth the tests judge elections by
        # afterwards. By term: a stale leader of an older term may stop later.
        self.former_leaders: dict[tuple[int, int], Replica] = {}
        # Each shard's leader last chosen by an election, (term, name), kept
        # here apart from the status: the leader that elections after it
        # chose no one must judge by.
        self.chosen_leaders: dict[int, tuple[int, str]] = {}
        # The longest log prefix known committed, per shard (the safety oracle).
        self.committed: dict[int, tuple[int, ...]] = {}
        self.tainted: set[int] = set()
        self.wall_ms = 0
        # How many polls brought a node's first report since it turned alive.
        self.first_polls = 0
        # Nodes the executor has the observer poll after the current action.
        self._refresh: list[str] = []

    # -- what the controller sees ------------------------------------------------------

    def observe(self) -> Observed:
        return Observed(
            now_ms=self.now_ms,
            nodes={name: node.view() for name, node in sorted(self.nodes.items())},
            leader_reports=self.leader_reports.snapshot(),
        )

    def plan(self, settings: PlannerSettings | None = None) -> list[Action]:
        return plan(self.spec, self.status, self.generation, self.observe(), settings)

    def poll(self, names: Iterable[str] | None = None) -> bool:
        """The observer polls these nodes (default: all) if it believes them
        alive and they answer; True if one reported for the first time since
        it turned alive (news the planner could not have had)."""
        fresh = False
        for name in sorted(self.nodes) if names is None else names:
            node = self.nodes.get(name)
            if node is not None and node.alive and node.up:
                fresh = fresh or node.seen is None
                node.seen = node.reports()
                self.leader_reports.note(node.seen.values())
        self.first_polls += fresh
        return fresh

    def notice(self, names: Iterable[str] | None = None) -> None:
        """The observer catches up with which pods are up (heartbeats, health
        watches): until then a pod that died still looks alive."""
        for name in sorted(self.nodes) if names is None else names:
            node = self.nodes[name]
            if node.up and not node.alive:
                node.alive = True
                node.alive_since_ms = self.now_ms
                node.seen = None
            elif not node.up and node.alive:
                node.alive = False
                node.dead_since_ms = self.now_ms

    def replica(self, name: str, shard: int) -> Replica | None:
        node = self.nodes.get(name)
        return node.replicas.get(shard) if node is not None else None

    def record(self, shard: int) -> ShardRecord:
        record = self.status.shard(shard)
        assert record is not None, f"no shard {shard}"
        return record

    # -- the world changing ------------------------------------------------------------

    def advance(self, ms: int) -> None:
        assert ms >= 0
        self.now_ms += ms

    def add_node(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        assert name not in self.nodes
        self.nodes[name] = ModelNode(
            name, dict(labels or {}), alive_since_ms=self.now_ms, dead_since_ms=self.now_ms
        )

    def kill(self, name: str, *, noticed: bool = True) -> None:
        """The pod stops answering; the observer sees it at once, or only at
        the next notice() (calls into it fail either way)."""
        self.nodes[name].up = False
        if noticed:
            self.notice([name])

    def revive(self, name: str, *, restarted: bool = True, noticed: bool = True) -> None:
        """The pod answers again: restarted (every replica fenced in its term,
        as a pod opens them) or back from a partition (state kept)."""
        node = self.nodes[name]
        if restarted:
            for replica in node.replicas.values():
                self._remember_if_leading(replica)
                replica.role = FENCED
                replica.leader_address = ""
                replica.followers = {}
                replica.term_start_offset = NO_OFFSET
            # Its health watch broke: the observer sees it turn alive anew.
            node.alive = node.alive and not noticed
        node.up = True
        if noticed:
            self.notice([name])

    def _new_incarnation(self) -> int:
        if not self.incarnations:
            return 0
        self._last_incarnation += 1
        return self._last_incarnation

    def wipe(self, name: str) -> None:
        """The node loses its disk (all replicas)."""
        node = self.nodes[name]
        for replica in node.replicas.values():
            self._remember_if_leading(replica)
        if self.incarnations:
            node.replicas = {}
            return
        for shard in node.replicas:
            record = self.status.shard(shard)
            if record is not None and name in record.voters:
                self.tainted.add(shard)
            for other in self.nodes.values():
                # A leader that counted it as a voter now counts an empty replica.
                leader = other.replicas.get(shard)
                if leader is not None and node.internal_address in leader.followers:
                    self.tainted.add(shard)
        node.replicas = {}

    def set_spec(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.generation += 1

    def set_replication_factor(self, namespace: str, rf: int) -> None:
        namespaces = tuple(
            replace(ns, replication_factor=rf) if ns.name == namespace else ns
            for ns in self.spec.namespaces
        )
        self.set_spec(replace(self.spec, namespaces=namespaces))

    def set_storage_pods(self, count: int) -> None:
        self.set_spec(replace(self.spec, storage_pods=count))

    def set_drain(self, names: Sequence[str]) -> None:
        self.set_spec(replace(self.spec, drain=tuple(names)))

    def add_namespace(self, namespace: NamespaceSpec) -> None:
        self.set_spec(replace(self.spec, namespaces=(*self.spec.namespaces, namespace)))

    def install_shard(
        self, namespace: str, ensemble: Sequence[str], leader: str, *, term: int = 1
    ) -> ShardRecord:
        """Record a steady shard (the next id) whose members hold one committed
        entry of `term`, led by `leader`: a shortcut to states that would take
        many steps to reach."""
        assert leader in ensemble
        shard = self.status.next_shard_id
        incarnations = {name: self._new_incarnation() for name in ensemble}
        record = ShardRecord(
            namespace,
            shard,
            HashRange(0, 2**32 - 1),
            term,
            ShardState.STEADY,
            leader,
            tuple(ensemble),
        ).with_incarnations(incarnations)
        self.status = replace(self.status.with_shard(record), next_shard_id=shard + 1)
        for name in ensemble:
            role = LEADER if name == leader else FOLLOWER
            replica = Replica(shard, namespace, term, role, (term,), 0, internal_address(leader))
            replica.incarnation = incarnations[name]
            if name == leader:
                replica.term_start_offset = 0
                replica.followers = {
                    internal_address(member): FollowerState(
                        0, voting=True, incarnation=incarnations[member] or None
                    )
                    for member in ensemble
                    if member != leader
                }
            self.nodes[name].replicas[shard] = replica
        self.committed[shard] = (term,)
        self.poll()
        return record

    def request_leader_move(self, shard: int, node: str) -> None:
        """What the admin API records (it checks that `node` is a member)."""
        moves = tuple(m for m in self.status.leader_moves if m.shard != shard)
        self.status = replace(self.status, leader_moves=(*moves, LeaderMove(shard, node)))

    def write(self, shard: int, count: int = 1) -> bool:
        """Clients append `count` entries at the shard's live leader (the live
        replica leading the highest term); False if there is none."""
        leader = self._live_leader(shard)
        if leader is None:
            return False
        leader.log = leader.log + (leader.term,) * count
        self._advance_commit(leader)
        if self.instant_catch_up:
            self.replicate(shard)
        return True

    def _live_leader(self, shard: int) -> Replica | None:
        leaders = [
            replica
            for node in self.nodes.values()
            if node.up
            for replica in [node.replicas.get(shard)]
            if replica is not None and replica.role == LEADER
        ]
        return max(leaders, key=lambda r: r.term, default=None)

    # -- storage progress ----------------------------------------------------------------

    def replicate(self, shard: int | None = None) -> None:
        """Every live leader brings its live followers to its log (see the module
        docstring); `shard` limits it to one shard."""
        for node in sorted(self.nodes.values(), key=lambda n: n.name):
            if not node.up:
                continue
            for replica in list(node.replicas.values()):
                if replica.role == LEADER and (shard is None or replica.shard == shard):
                    self._replicate_from(node, replica)

    def catch_up(self, shard: int, name: str, offset: int) -> None:
        """The shard's live leader brings one live follower's log up to
        `offset` only (`replicate` brings every follower all the way): a
        follower partway through catching up. A learner still votes only once
        it holds the commit offset and the term's first entry."""
        leader = self._live_leader(shard)
        assert leader is not None, f"shard {shard} has no live leader"
        assert offset < len(leader.log)
        leader_node = next(
            n for n in self.nodes.values() if n.internal_address == leader.leader_address
        )
        self._replicate_to(leader_node, leader, self.nodes[name].internal_address, offset)

    def _replicate_from(self, leader_node: ModelNode, leader: Replica) -> None:
        by_address = {node.internal_address: node for node in self.nodes.values()}
        for address in sorted(leader.followers):
            self._replicate_to(leader_node, leader, address, len(leader.log) - 1)
        for address in leader.followers:
            node = by_address.get(address)
            replica = node.replicas.get(leader.shard) if node is not None and node.up else None
            if replica is not None and replica.leader_address == leader_node.internal_address:
                replica.commit_offset = max(
                    replica.commit_offset, min(leader.commit_offset, len(replica.log) - 1)
                )

    def _replicate_to(
        self, leader_node: ModelNode, leader: Replica, address: str, offset: int
    ) -> None:
        """Truncate plus streaming up to `offset`, done at once: the follower at
        `address` takes the leader's log up to there and acknowledges it."""
        node = next((n for n in self.nodes.values() if n.internal_address == address), None)
        if node is None or not node.up:
            return
        replica = node.replicas.get(leader.shard)
        if replica is None:
            return  # a wiped member: Truncate finds no replica until NewTerm
        if replica.term > leader.term or (replica.term == leader.term and replica.role == LEADER):
            return  # it refuses this leader
        progress = leader.followers[address]
        if replica.incarnation:
            if progress.incarnation is not None and progress.incarnation != replica.incarnation:
                # Its data was created anew: what it acknowledged is gone
                # (LeaderCore readmits it as a returning learner).
                progress.acked_offset = NO_OFFSET
                progress.returning = progress.returning or progress.voting
                progress.voting = False
            progress.incarnation = replica.incarnation
        self._check_keeps_committed(replica, leader.log)
        if replica.log == leader.log[: len(replica.log)]:
            offset = max(offset, len(replica.log) - 1)  # it keeps what agrees
        self._remember_if_leading(replica)
        replica.term = leader.term
        replica.role = FOLLOWER
        replica.leader_address = leader_node.internal_address
        replica.followers = {}
        replica.log = leader.log[: offset + 1]
        progress.acked_offset = max(progress.acked_offset, offset)
        caught_up = max(leader.commit_offset, leader.term_start_offset)
        if not progress.voting and progress.acked_offset >= caught_up:
            progress.voting = True
            progress.returning = False
        self._advance_commit(leader)

    def _advance_commit(self, leader: Replica) -> None:
        acked = [len(leader.log) - 1] + [
            state.acked_offset for state in leader.followers.values() if state.voting
        ]
        # Returning members count in the majority's size (QuorumTracker.readmit).
        size = len(acked) + sum(1 for state in leader.followers.values() if state.returning)
        candidate = (
            sorted(acked, reverse=True)[majority(size) - 1]
            if len(acked) >= majority(size)
            else NO_OFFSET
        )
        if candidate > leader.commit_offset and candidate >= leader.term_start_offset:
            leader.commit_offset = candidate
        committed = leader.log[: leader.commit_offset + 1]
        known = self.committed.get(leader.shard, ())
        if leader.shard not in self.tainted and committed[: len(known)] != known[: len(committed)]:
            raise ModelInvariantError(
                f"shard {leader.shard}: leader commits {committed}, "
                f"but {known} was committed before"
            )
        if len(committed) > len(known):
            self.committed[leader.shard] = committed

    def _check_keeps_committed(self, replica: Replica, leader_log: tuple[int, ...]) -> None:
        if replica.shard in self.tainted:
            return
        own = replica.log[: replica.commit_offset + 1]
        if leader_log[: len(own)] != own:
            raise ModelInvariantError(
                f"shard {replica.shard}: a follower would drop committed entries {own} "
                f"to follow {leader_log}"
            )

    # -- pod calls (fail like the pod would) -----------------------------------------------

    def _node(self, name: str) -> ModelNode:
        node = self.nodes.get(name)
        if node is None:
            raise ActionFailed(f"no address known for node {name}")
        if not node.up:
            raise ActionFailed(f"{name} is unreachable")
        return node

    def _new_term(self, name: str, shard: int, term: int, namespace: str | None) -> tuple[int, int]:
        """Without `namespace` (an election of a shard that had a leader) a
        missing replica is not created: the pod answers NOT_FOUND."""
        node = self._node(name)
        replica = node.replicas.get(shard)
        if replica is None:
            if namespace is None:
                raise ActionFailed(f"{name} has no replica of shard {shard}")
            replica = node.replicas[shard] = Replica(
                shard, namespace, incarnation=self._new_incarnation()
            )
        if term < replica.term or (term == replica.term and replica.role != FENCED):
            raise ActionFailed(f"{name}: NewTerm({term}) refused in term {replica.term}")
        self._remember_if_leading(replica)
        replica.term = term
        replica.role = FENCED
        replica.leader_address = ""
        replica.followers = {}
        replica.term_start_offset = NO_OFFSET
        return replica.head

    def _become_leader(
        self,
        name: str,
        shard: int,
        term: int,
        followers: Sequence[str],
        incarnations: Mapping[str, int] | None = None,
    ) -> None:
        node = self._node(name)
        replica = node.replicas.get(shard)
        if replica is None or replica.term != term or replica.role != FENCED:
            raise ActionFailed(f"{name}: cannot lead shard {shard} in term {term}")
        self._check_leader_keeps_committed(replica)
        replica.role = LEADER
        replica.leader_address = node.internal_address
        replica.followers = {}
        for member in followers:
            address = self._node_address(member)
            replica.followers[address] = FollowerState(
                voting=True, incarnation=(incarnations or {}).get(member)
            )
        replica.log = (*replica.log, term)
        replica.term_start_offset = len(replica.log) - 1
        self._advance_commit(replica)

    def _remember_if_leading(self, replica: Replica) -> None:
        if replica.role == LEADER:
            self.former_leaders[(replica.shard, replica.term)] = copy.deepcopy(replica)

    def leader_in_term(self, shard: int, term: int) -> Replica | None:
        """The shard's leader of `term`: leading now, or as it was when it stopped."""
        for node in self.nodes.values():
            replica = node.replicas.get(shard)
            if replica is not None and replica.role == LEADER and replica.term == term:
                return replica
        return self.former_leaders.get((shard, term))

    def _check_leader_keeps_committed(self, replica: Replica) -> None:
        known = self.committed.get(replica.shard, ())
        if replica.shard not in self.tainted and replica.log[: len(known)] != known:
            raise ModelInvariantError(
                f"shard {replica.shard}: the new leader's log {replica.log} lacks committed {known}"
            )

    def _leading(self, name: str, shard: int, term: int) -> Replica:
        replica = self._node(name).replicas.get(shard)
        if replica is None or replica.role != LEADER or replica.term != term:
            raise ActionFailed(f"{name} is not the leader of shard {shard} in term {term}")
        return replica

    def _add_follower(self, leader: str, shard: int, term: int, member: str) -> None:
        replica = self._leading(leader, shard, term)
        address = self._node_address(member)
        if address == internal_address(leader):
            raise ActionFailed("the leader cannot be its own follower")
        replica.followers.setdefault(address, FollowerState(voting=False))

    def _remove_follower(self, leader: str, shard: int, term: int, address: str) -> None:
        """As QuorumTracker.remove: refused (ActionFailed, as the pod's
        MembersBehind fails the executor's action) while the voters that would
        remain do not hold everything committed on a majority of them."""
        replica = self._leading(leader, shard, term)
        if self._removal_waits(replica, address):
            raise ActionFailed(f"shard {shard}: the rest do not hold what {address} holds")
        replica.followers.pop(address, None)
        self._advance_commit(replica)

    @staticmethod
    def _removal_waits(replica: Replica, address: str) -> bool:
        """Would the leader keep `address` (leaving) for now: a voter without
        which fewer than a majority of the rest hold every committed entry?"""
        leaving = replica.followers.get(address)
        if leaving is None or not leaving.voting:
            return False
        needed = max(replica.commit_offset, replica.term_start_offset)
        rest = [s for a, s in replica.followers.items() if a != address]
        size = 1 + sum(1 for s in rest if s.voting or s.returning)
        holding = 1 + sum(1 for s in rest if s.voting and s.acked_offset >= needed)
        return holding < majority(size)

    def _node_address(self, name: str) -> str:
        node = self.nodes.get(name)
        if node is not None:
            return node.internal_address
        record = self.status.node(name)
        if record is None:
            raise ActionFailed(f"no address known for node {name}")
        return record.internal_address

    # -- the executor ----------------------------------------------------------------------

    def apply(self, action: Action, *, stop_after: int | None = None) -> bool:
        """Do what the executor does for `action`; True if it completed. With
        `stop_after=k` only its first k steps happen (a controller crash)."""
        self._refresh = []
        steps = self._steps(action)
        done = 0
        try:
            for _ in steps:
                done += 1
                if stop_after is not None and done >= stop_after:
                    steps.close()
                    return False
        except ActionFailed:
            return False
        if self.instant_catch_up:
            self.replicate()
        # The executor has the observer poll the nodes it acted on.
        self.poll(self._refresh)
        return True

    def apply_all(self, actions: Iterable[Action]) -> list[bool]:
        return [self.apply(action) for action in actions]

    def _set_shard(self, shard: int, **changes: object) -> ShardRecord:
        record = self.status.shard(shard)
        if record is None:
            raise ActionFailed(f"shard {shard} vanished from the cluster state")
        updated = replace(record, **changes)  # type: ignore[arg-type]
        # As the executor: incarnations are kept for members only.
        updated = updated.with_incarnations({})
        self.status = self.status.with_shard(updated)
        return updated

    def _shard_record(self, shard: int) -> ShardRecord:
        record = self.status.shard(shard)
        if record is None:
            raise ActionFailed(f"shard {shard} is not in the cluster state")
        return record

    def _namespace(self, record: ShardRecord) -> NamespaceSpec:
        namespace = self.spec.namespace(record.namespace)
        if namespace is None:
            raise ActionFailed(f"namespace {record.namespace!r} is no longer in the spec")
        return namespace

    def _steps(self, action: Action) -> Generator[None, None, None]:
        match action:
            case RecordNode():
                record = NodeRecord(
                    action.name,
                    action.public_address,
                    action.internal_address,
                    dict(action.labels),
                    action.health,
                )
                self.status = self.status.with_node(record)
                yield
            case PlaceShards():
                if not any(r.namespace == action.namespace for r in self.status.shards):
                    status = self.status
                    for shard in action.shards:
                        status = status.with_shard(shard)
                    next_id = max(r.shard for r in action.shards) + 1
                    self.status = replace(status, next_shard_id=max(status.next_shard_id, next_id))
                yield
            case Elect():
                yield from self._elect(action)
            case ConfirmLeader():
                self._shard_record(action.shard)
                self._steady(action.shard, None, None)
                yield
            case ChangeEnsemble():
                yield from self._change(action)
            case FinishEnsembleChange():
                yield from self._finish(action)
            case RecordVoting():
                yield from self._record_voting(action)
            case DeleteReplica():
                node = self._node(action.node)
                replica = node.replicas.get(action.shard)
                if replica is None:
                    raise ActionFailed(f"{action.node} has no replica of shard {action.shard}")
                if action.term < replica.term:
                    raise ActionFailed(f"DeleteShard({action.term}) older than {replica.term}")
                del node.replicas[action.shard]
                self._refresh = [action.node]
                yield
            case DropLeaderMove():
                moves = tuple(m for m in self.status.leader_moves if m.shard != action.shard)
                self.status = replace(self.status, leader_moves=moves)
                yield
            case ObserveGeneration():
                self.status = replace(self.status, observed_generation=action.generation)
                yield

    def _elect(self, action: Elect) -> Generator[None, None, None]:
        record = self._shard_record(action.shard)
        namespace = self._namespace(record)
        # As the executor: a never-led shard stays NEW and may create replicas.
        creating = record.state is ShardState.NEW
        counted = counted_voters(record, self.observe(), self.status)
        # The executor's own step: a new term, no leader (the last one kept).
        self.status = steps.open_term(self.status, action.shard)
        record = self._shard_record(action.shard)
        term = record.term
        yield
        heads: dict[str, tuple[int, int]] = {}
        answered: dict[str, int] = {}
        for name in record.voters:
            with contextlib.suppress(ActionFailed):  # down, refused or wiped: no answer
                head = self._new_term(
                    name, record.shard, term, namespace.name if creating else None
                )
                incarnation = self.nodes[name].replicas[record.shard].incarnation
                # As the executor: a member that lost its recorded data does not count.
                if record.intact(name, incarnation):
                    heads[name] = head
                    answered[name] = incarnation
        yield
        leaders = leader_load(self.status.shards)
        # Only members the observer believes alive may lead (a pod being
        # deleted may still answer NewTerm); every answer counts for safety.
        alive = {name for name in record.voters if name in self.nodes and self.nodes[name].alive}
        leader = choose_leader(heads, record.voters, leaders, action.preferred, alive, counted)
        if leader is None:
            raise ActionFailed(f"shard {record.shard}: no majority answered NewTerm({term})")
        # The executor's own step: the leader made a member, a removal under way
        # undone when the rest lack an intact majority, incarnations recorded.
        self.status = steps.record_leader(self.status, record.shard, term, leader, answered)
        self.chosen_leaders[record.shard] = (term, leader)
        record = self._shard_record(record.shard)
        yield
        followers = [name for name in record.ensemble if name != leader]
        incarnations = {
            name: value for name in followers if (value := record.incarnation_of(name)) is not None
        }
        self._become_leader(leader, record.shard, term, followers, incarnations)
        yield
        self.wall_ms += 1
        election = ElectionRecord(
            record.namespace, record.shard, term, leader, action.reason, self.wall_ms, 1
        )
        self._steady(record.shard, election, action)
        self._refresh = list(record.voters)
        if action.preferred is not None and leader != action.preferred:
            raise ActionFailed(f"shard {record.shard}: leader move to {action.preferred} failed")
        yield

    def _steady(self, shard: int, election: ElectionRecord | None, action: Elect | None) -> None:
        record = self._shard_record(shard)
        steady = replace(record, state=ShardState.STEADY, leaving=()).with_incarnations({})
        status = self.status.with_shard(steady)
        status = replace(status, assignments_version=status.assignments_version + 1)
        if election is not None and action is not None and action.preferred == election.leader:
            status = replace(
                status, leader_moves=tuple(m for m in status.leader_moves if m.shard != shard)
            )
        self.status = status.with_election(election) if election is not None else status

    def _leader_of(self, record: ShardRecord) -> str:
        if record.leader is None or record.state is not ShardState.STEADY:
            raise ActionFailed(f"shard {record.shard} has no steady leader")
        return record.leader

    def _add_member(
        self, record: ShardRecord, name: str, namespace: str, *, fence: bool = True
    ) -> Generator[None, None, None]:
        if fence:
            try:
                self._new_term(name, record.shard, record.term, namespace)
                # As the executor: a new member's incarnation is recorded; a
                # recorded one changes only once its leader caught it up.
                incarnation = self.nodes[name].replicas[record.shard].incarnation
                latest = self._shard_record(record.shard)
                if incarnation and latest.incarnation_of(name) is None:
                    self._set_shard(
                        record.shard,
                        incarnations=latest.with_incarnations({name: incarnation}).incarnations,
                    )
            except ActionFailed:
                node = self._node(name)  # down: the action fails
                replica = node.replicas.get(record.shard)
                # Refused as already following (FAILED_PRECONDITION): go on.
                assert replica is not None
        yield
        assert record.leader is not None
        self._add_follower(self._leader_of(record), record.shard, record.term, name)
        yield

    def _change(self, action: ChangeEnsemble) -> Generator[None, None, None]:
        record = self._shard_record(action.shard)
        namespace = self._namespace(record)
        leader = self._leader_of(record)
        if action.add is not None:
            if action.add not in record.ensemble:
                # The executor's step: listed as a member and as a learner.
                self.status = steps.add_member(self.status, record.shard, record.term, action.add)
                record = self._shard_record(record.shard)
                yield
            yield from self._add_member(record, action.add, namespace.name)
            self._refresh = [action.add, leader]
        else:
            assert action.remove is not None
            if action.remove == record.leader:
                raise ActionFailed("the leader is not removed directly")
            record = self._set_shard(
                record.shard,
                ensemble=tuple(n for n in record.ensemble if n != action.remove),
                leaving=(*record.leaving, action.remove),
            )
            yield
            self._remove_follower(
                leader, record.shard, record.term, self._node_address(action.remove)
            )
            yield
            self.status = steps.finish_removal(
                self.status, record.shard, record.term, (action.remove,)
            )
            self._refresh = [action.remove, leader]
            yield

    def _finish(self, action: FinishEnsembleChange) -> Generator[None, None, None]:
        record = self._shard_record(action.shard)
        namespace = self._namespace(record)
        leader = self._leader_of(record)
        report = self._leading_report(leader, record.shard)
        followers = {f.internal_address for f in report.followers}
        yield
        # As the executor: removals first, then adds; a member that is down is
        # only handed to the leader, and one failing add does not stop the rest;
        # a removal the leader refuses (the rest lack what was committed with
        # the leaving member) does not stop the adds either.
        failed = []
        try:
            for name in record.leaving:
                self._remove_follower(leader, record.shard, record.term, self._node_address(name))
                yield
        except ActionFailed:
            failed.extend(record.leaving)
        else:
            if record.leaving:
                self.status = steps.finish_removal(
                    self.status, record.shard, record.term, record.leaving
                )
                record = self._shard_record(record.shard)
                yield
        for name in record.ensemble:
            if name == record.leader:
                continue
            node = self.nodes.get(name)
            alive = node is not None and node.alive
            missing_here = (
                node is not None
                and alive
                and node.seen is not None
                and record.shard not in node.seen
            )
            if self._node_address(name) not in followers or missing_here:
                try:
                    yield from self._add_member(record, name, namespace.name, fence=alive)
                except ActionFailed:
                    failed.append(name)
        caught_up = incarnations_to_record(record, report, self._node_address)
        if caught_up:
            latest = self._shard_record(record.shard)
            self._set_shard(
                record.shard, incarnations=latest.with_incarnations(caught_up).incarnations
            )
            yield
        voting = learners_voting(record, report, self._node_address)
        committed = commit_to_record(record, report, self._node_address)
        if voting or committed:
            self.status = steps.record_voting(
                self.status, record.shard, record.term, leader, sorted(voting), committed
            )
            yield
        self._refresh = list(record.voters)
        if failed:
            raise ActionFailed(f"shard {record.shard}: unfinished: {failed}")

    def _record_voting(self, action: RecordVoting) -> Generator[None, None, None]:
        """As the executor: from the leader's report asked for now."""
        record = self._shard_record(action.shard)
        leader = self._leader_of(record)
        report = self._leading_report(leader, record.shard)
        voting = learners_voting(record, report, self._node_address) & set(action.names)
        committed = action.term_committed and commit_to_record(record, report, self._node_address)
        if not voting and not committed:
            self.poll([leader])  # the planner's report was stale: the executor refreshes it
            raise ActionFailed(f"shard {record.shard}: the leader's report shows nothing new")
        yield
        self.status = steps.record_voting(
            self.status, record.shard, record.term, leader, sorted(voting), committed
        )
        yield

    def _leading_report(self, name: str, shard: int) -> ReplicaReport:
        replica = self._node(name).replicas.get(shard)
        if replica is None:
            raise ActionFailed(f"{name} has no replica of shard {shard}")
        return replica.report()

    # -- a reconciler in a loop --------------------------------------------------------------

    def step(self, settings: PlannerSettings | None = None) -> tuple[list[Action], list[bool]]:
        """One reconcile round: plan, apply every action, let storage catch up."""
        actions = self.plan(settings)
        results = self.apply_all(actions)
        self.replicate()
        self.notice()
        self.poll()
        return actions, results

    def run_until_quiet(
        self, settings: PlannerSettings | None = None, max_rounds: int = 200
    ) -> list[list[Action]]:
        """Reconcile until a plan is empty; the non-empty plans, in order."""
        history: list[list[Action]] = []
        for _ in range(max_rounds):
            actions, _ = self.step(settings)
            if not actions:
                return history
            history.append(actions)
        raise AssertionError(f"no fixpoint after {max_rounds} rounds; last plan {history[-1]}")
