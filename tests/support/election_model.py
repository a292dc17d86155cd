"""A bounded exhaustive model of one shard's replication and elections, to check
that no committed entry is ever lost (issue 38, "Nothing lost").

Every history up to the bounds (`Bounds`) is enumerated breadth first, with
states deduplicated, and every state reached is checked. What is real and what
is modelled:

- the leader's `QuorumTracker` is the real class (rebuilt from the state for
  each step), fed as `LeaderCore` feeds it: the leader's own durable offset, a
  follower's head after Truncate and each cumulative acknowledgement, a
  follower answering with another incarnation of its data readmitted;
- elections are the executor's: the real `counted_voters` (taken from the
  record and the controller's last report of the leader before the term is
  opened), the real `steps.open_term`-like new term, NewTerm to any subset of
  the live voters (the others' calls are lost), the real `choose_leader` over
  the answers from data the record says is intact, the real
  `steps.record_leader`, then BecomeLeader (or the controller stops before it)
  and the real `steps.record_steady` (or it stops before that too);
- ensemble changes are the executor's order (`steps.add_member`, NewTerm on
  the new member, AddFollower; `steps.start_removal`, RemoveFollower,
  `steps.finish_removal`, each stoppable after its first write and finished by
  FinishEnsembleChange), planned under the planner's guards (`_in_step`,
  `_settled`, `_remove`: a removal needs a majority of the rest to hold every
  committed entry (`planner.everything_committed_at`) and to be alive; only
  a dead member's removal when not settled). Which member is added or
  removed, and when, is left free (rf changes, drains, balancing and dead
  members all pick some member), so the model allows every choice the
  planner could make under those guards;
- logs are tuples of entry terms; a follower's log is durable when it
  acknowledges it; the leader's own tail is durable only once it syncs (a
  crash loses the rest, even entries its followers made committed); NewTerm
  syncs before answering. A crash fences the replica in its term; a wiped
  disk leaves the pod without the replica (created anew, with a new
  incarnation, only by an ensemble change's NewTerm), within the simulation's
  fault model (`World._wipe`: a voter only while the other voters that can
  answer for their data are a majority and one of them holds everything
  committed).

The controller's knowledge of the leader is one report (`report`), taken by a
`poll` step at any time and by every ensemble change (the planner decided it
from a report of that moment): counted_voters reads it, stale or not, and
without one of the last leader's term reads the record
(`ShardRecord.last_leader`). The planner's guards read the leader as it is at
that moment. With `Bounds.controller_restarts`, the controller may restart at
any time, forgetting the report (the record is durable, and all it keeps), so
that counted_voters reads the record until a poll; and it may record the last
leader's learners voting and its term's first commit: RecordVoting, planned
from its report under the planner's guards (a steady shard, an even number of
voters, learners that report shows voting or a commit it shows in its term;
whether or not something else is due), carried out as the executor does (what
a fresh report of the leader still shows; nothing while it is down or no
longer leads that term). FinishEnsembleChange records what its report shows
too, as the executor's does.

Checked: an entry committed (the leader's commit offset passed it: a client
was answered) is held by every leader that takes office later, no leader
commits entries that conflict with committed ones, and no follower drops an
entry it knows committed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import combinations
from typing import NamedTuple

from cairn.common.hashing import HashRange
from cairn.common.heartbeat import FollowerReport, ReplicaReport
from cairn.controller import election, planner, steps
from cairn.controller.model import ClusterStatus, LastLeader, ShardRecord, ShardState
from cairn.controller.observed import NodeView, Observed
from cairn.storage.core.replication.quorum import NO_OFFSET, QuorumTracker

SHARD = 0
NAMESPACE = "default"
LEADER = "leader"
FOLLOWER = "follower"
FENCED = "fenced"


class Unsafe(Exception):
    """A step would lose a committed entry (raised by the step itself)."""


class Violation(AssertionError):
    """An unsafe step, with the shortest history leading to it."""

    def __init__(self, message: str, trace: list[str]) -> None:
        super().__init__(message + "\n  after:\n  " + "\n  ".join(trace))
        self.message = message
        self.trace = trace


class Tracker(NamedTuple):
    """A `QuorumTracker`'s fields, hashable."""

    term: int
    leader: str
    voters: frozenset[str]
    learners: frozenset[str]
    returning: frozenset[str]
    acked: tuple[tuple[str, int], ...]
    commit_offset: int
    term_start_offset: int
    # The incarnation of each follower's data as the leader knows it (LeaderCore).
    incarnations: tuple[tuple[str, int], ...]


class Replica(NamedTuple):
    log: tuple[int, ...]  # the term of each entry; offsets are indexes
    durable: int  # how many entries are durable
    commit: int  # the highest offset it knows committed
    term: int
    role: str
    leader: str | None  # whom it follows in `term`
    incarnation: int
    tracker: Tracker | None  # while leading

    @property
    def head(self) -> tuple[int, int]:
        return (self.log[-1], len(self.log) - 1) if self.log else (-1, NO_OFFSET)


class Node(NamedTuple):
    up: bool
    replica: Replica | None


def _index(name: str) -> int:
    """Nodes are named m0, m1, ... and kept in that order."""
    return int(name[1:])


class State(NamedTuple):
    nodes: tuple[tuple[str, Node], ...]
    record: ShardRecord
    report: ReplicaReport | None  # the controller's last report of a leader
    committed: tuple[int, ...]  # the longest prefix ever committed
    writes_left: int
    wipes_left: int
    crashes_left: int
    changes_left: int
    last_incarnation: int

    def node(self, name: str) -> Node:
        return self.nodes[_index(name)][1]

    def with_node(self, name: str, node: Node) -> State:
        index = _index(name)
        nodes = self.nodes
        return self._replace(nodes=(*nodes[:index], (name, node), *nodes[index + 1 :]))

    def with_replica(self, name: str, replica: Replica | None) -> State:
        return self.with_node(name, self.node(name)._replace(replica=replica))


@dataclass(frozen=True)
class Bounds:
    nodes: tuple[str, ...] = ("m0", "m1", "m2", "m3")
    initial_ensemble: tuple[str, ...] = ("m0", "m1", "m2")
    max_term: int = 3
    client_writes: int = 1
    wipes: int = 0
    min_ensemble: int = 2
    max_ensemble: int = 4
    # Elections while the leader still leads (a requested move, a hand-over).
    leader_moves: bool = True
    # Crashes in a history (a restart is free).
    crashes: int = 2
    # Ensemble changes begun in a history (members added or removed).
    changes: int = 2
    # The controller may stop between the steps of an action (a crash, a
    # failed call): the states in between are reached too.
    controller_stops: bool = True
    # The controller may restart (forgetting its report of the leader) and
    # record learners voting (RecordVoting): elections then count from the
    # record (`ShardRecord.last_leader`) too.
    controller_restarts: bool = True


@dataclass
class Rules:
    """What the model runs: the real code, or a mutant of it."""

    tracker: type[QuorumTracker] = QuorumTracker
    counted_voters: Callable[[ShardRecord, Observed, ClusterStatus], election.CountedVoters] = (
        field(default=planner.counted_voters)
    )


# -- the real tracker, from and back to the state ---------------------------------------


def load_tracker(t: Tracker, rules: Rules) -> QuorumTracker:
    return rules.tracker(
        t.term,
        t.leader,
        set(t.voters),
        set(t.learners),
        set(t.returning),
        dict(t.acked),
        t.commit_offset,
        t.term_start_offset,
    )


def save_tracker(q: QuorumTracker, incarnations: dict[str, int]) -> Tracker:
    return Tracker(
        q.term,
        q.leader,
        frozenset(q.voters),
        frozenset(q.learners),
        frozenset(q.returning),
        tuple(sorted(q.acked.items())),
        q.commit_offset,
        q.term_start_offset,
        tuple(sorted(incarnations.items())),
    )


# -- the model ------------------------------------------------------------------------


def initial_state(bounds: Bounds) -> State:
    """Term 1 steady: its first entry committed and held by every member."""
    leader = bounds.initial_ensemble[0]
    incarnations = {name: i + 1 for i, name in enumerate(bounds.initial_ensemble)}
    nodes = []
    for name in bounds.nodes:
        replica = None
        if name in bounds.initial_ensemble:
            tracker = None
            if name == leader:
                followers = [n for n in bounds.initial_ensemble if n != leader]
                tracker = Tracker(
                    1,
                    leader,
                    frozenset(bounds.initial_ensemble),
                    frozenset(),
                    frozenset(),
                    tuple(sorted((n, 0) for n in bounds.initial_ensemble)),
                    0,
                    0,
                    tuple(sorted((n, incarnations[n]) for n in followers)),
                )
            role = LEADER if name == leader else FOLLOWER
            replica = Replica((1,), 1, 0, 1, role, leader, incarnations[name], tracker)
        nodes.append((name, Node(True, replica)))
    record = ShardRecord(
        NAMESPACE,
        SHARD,
        HashRange(0, 2**32 - 1),
        1,
        ShardState.STEADY,
        leader,
        bounds.initial_ensemble,
        last_leader=LastLeader(1, leader),  # as record_leader leaves it
    ).with_incarnations(incarnations)
    state = State(
        tuple(nodes),
        record,
        None,
        (1,),
        bounds.client_writes,
        bounds.wipes,
        bounds.crashes,
        bounds.changes,
        len(bounds.initial_ensemble),
    )
    return state._replace(report=leader_report(state, leader))


def leader_report(state: State, name: str) -> ReplicaReport | None:
    """A leader's report, with only what `counted_voters` reads (fewer
    distinct reports, fewer states)."""
    replica = state.node(name).replica
    if replica is None or replica.role != LEADER or replica.tracker is None:
        return None
    t = replica.tracker
    head_term, head_offset = replica.head
    return ReplicaReport(
        shard=SHARD,
        namespace=NAMESPACE,
        role=LEADER,
        term=replica.term,
        head_term=head_term,
        head_offset=head_offset,
        commit_offset=t.commit_offset,
        durable_offset=NO_OFFSET,
        applied_offset=NO_OFFSET,
        leader_internal_address=name,
        followers=tuple(
            FollowerReport(member, NO_OFFSET, member in t.voters, "streaming")
            for member in sorted((t.voters | t.learners) - {name})
        ),
        term_start_offset=t.term_start_offset,
    )


def member_report(state: State, name: str, replica: Replica) -> ReplicaReport | None:
    """A member's report, with only what `commit_seen_in_term` reads, when it
    holds the data it is recorded to hold and its commit offset is at an entry."""
    recorded = state.record.incarnation_of(name)
    if recorded is not None and replica.incarnation != recorded:
        return None
    if not 0 <= replica.commit < len(replica.log):
        return None
    return ReplicaReport(
        shard=SHARD,
        namespace=NAMESPACE,
        role=replica.role,
        term=replica.term,
        head_term=replica.head[0],
        head_offset=replica.head[1],
        commit_offset=replica.commit,
        durable_offset=NO_OFFSET,
        applied_offset=NO_OFFSET,
        incarnation=replica.incarnation,
        commit_term=replica.log[replica.commit],
    )


def observed(state: State) -> Observed:
    """What the controller sees: who is up, its last report of a leader, and
    where the other members that hold the data they are recorded to hold
    commit (what `planner.commit_seen_in_term` reads; a member not holding it
    is left unpolled, so that it is judged as before: by NewTerm)."""
    nodes = {}
    for name, node in state.nodes:
        replicas = None
        report = state.report
        if node.up and report is not None and report.leader_internal_address == name:
            replicas = {SHARD: report}
        elif node.up and node.replica is not None:
            member = member_report(state, name, node.replica)
            if member is not None:
                replicas = {SHARD: member}
        nodes[name] = NodeView(name, name, name, alive=node.up, replicas=replicas)
    leader_reports = {SHARD: state.report} if state.report is not None else {}
    return Observed(now_ms=0, nodes=nodes, leader_reports=leader_reports)


def _address_of(name: str) -> str:
    """A member's internal address: the model names pods by it."""
    return name


def status_of(state: State) -> ClusterStatus:
    return ClusterStatus(shards=(state.record,))


class Model:
    def __init__(self, bounds: Bounds, rules: Rules | None = None) -> None:
        self.bounds = bounds
        self.rules = rules or Rules()

    # -- search ----------------------------------------------------------------------

    def explore(self, max_steps: int | None = None, max_states: int = 5_000_000) -> int:
        """Every state reachable within the bounds (and in at most `max_steps`
        steps), breadth first; raises `Violation` with the shortest history
        to the first unsafe step. Returns how many states were seen."""
        start = initial_state(self.bounds)
        parents: dict[State, tuple[State, str] | None] = {start: None}
        queue = deque([(start, 0)])
        while queue:
            state, depth = queue.popleft()
            if max_steps is not None and depth >= max_steps:
                continue
            try:
                for label, after in self.successors(state):
                    if after in parents:
                        continue
                    parents[after] = (state, label)
                    if len(parents) > max_states:
                        raise AssertionError(f"more than {max_states} states: raise the bound")
                    queue.append((after, depth + 1))
            except Unsafe as problem:
                raise Violation(str(problem), self._trace(parents, state)) from None
        return len(parents)

    def replay(self, steps: list[str]) -> State:
        """Follow one history, each step named by the start of its label;
        raises `Violation` if a step is unsafe."""
        state = initial_state(self.bounds)
        done: list[str] = []
        for wanted in steps:
            try:
                found = [
                    (label, after)
                    for label, after in self.successors(state)
                    if label.startswith(wanted)
                ]
            except Unsafe as problem:
                raise Violation(str(problem), done) from None
            labels = [label for label, _ in found]
            assert found, f"no step {wanted!r} after {done}"
            assert len(set(labels)) == 1, f"{wanted!r} names several steps: {labels}"
            done.append(found[0][0])
            state = found[0][1]
        return state

    def _trace(self, parents: dict[State, tuple[State, str] | None], state: State) -> list[str]:
        trace = []
        link = parents[state]
        while link is not None:
            previous, label = link
            trace.append(label)
            link = parents[previous]
        return list(reversed(trace))

    # -- steps -----------------------------------------------------------------------

    def successors(self, state: State) -> Iterator[tuple[str, State]]:
        for name, node in state.nodes:
            replica = node.replica
            if node.up and replica is not None and replica.role == LEADER:
                yield from self._leader_steps(state, name, replica)
        yield from self._fault_steps(state)
        yield from self._controller_steps(state)

    def _leader_steps(
        self, state: State, name: str, leader: Replica
    ) -> Iterator[tuple[str, State]]:
        if state.writes_left > 0:
            grown = leader._replace(log=(*leader.log, leader.term))
            after = state.with_replica(name, grown)._replace(writes_left=state.writes_left - 1)
            yield f"client write at {name} (offset {len(leader.log)})", after
        if leader.durable < len(leader.log):
            synced = leader._replace(durable=len(leader.log))
            after = self._acknowledge(
                state.with_replica(name, synced), name, name, len(leader.log) - 1
            )
            yield f"{name} syncs its log to {len(leader.log) - 1}", after
        assert leader.tracker is not None
        members = (leader.tracker.voters | leader.tracker.learners) - {name}
        for member in sorted(members):
            yield from self._replicate(state, name, leader, member)

    def _replicate(
        self, state: State, name: str, leader: Replica, member: str
    ) -> Iterator[tuple[str, State]]:
        """Truncate then streaming up to any offset, acknowledged."""
        node = state.node(member)
        follower = node.replica
        if not node.up or follower is None:
            return
        if follower.term > leader.term:
            return
        if follower.term == leader.term and not (
            follower.role == FENCED or (follower.role == FOLLOWER and follower.leader == name)
        ):
            return
        shared = 0
        while (
            shared < min(len(follower.log), len(leader.log))
            and follower.log[shared] == leader.log[shared]
        ):
            shared += 1
        known = follower.log[: follower.commit + 1]
        dropped = leader.log[: len(known)] != known
        assert leader.tracker is not None
        if dropped:
            raise Unsafe(
                f"{member} would drop entries it knows committed ({known}) "
                f"to follow {name}'s {leader.log}"
            )
        for length in range(shared, len(leader.log) + 1):
            quorum = load_tracker(leader.tracker, self.rules)
            incarnations = dict(leader.tracker.incarnations)
            known_incarnation = incarnations.get(member)
            if known_incarnation is not None and known_incarnation != follower.incarnation:
                quorum.readmit(member)  # LeaderCore: its data was created anew
            incarnations[member] = follower.incarnation
            quorum.acknowledge(member, leader.term, length - 1)
            tracker = save_tracker(quorum, incarnations)
            after = state.with_replica(
                name, leader._replace(tracker=tracker, commit=tracker.commit_offset)
            )
            after = after.with_replica(
                member,
                follower._replace(
                    log=leader.log[:length],
                    durable=length,
                    commit=max(follower.commit, min(leader.tracker.commit_offset, length - 1)),
                    term=leader.term,
                    role=FOLLOWER,
                    leader=name,
                    tracker=None,
                ),
            )
            label = f"{name} -> {member}: its log up to {length - 1}, acknowledged"
            yield label, self._committed(after, name)

    def _acknowledge(self, state: State, leader_name: str, member: str, offset: int) -> State:
        leader = state.node(leader_name).replica
        assert leader is not None and leader.tracker is not None
        quorum = load_tracker(leader.tracker, self.rules)
        quorum.acknowledge(member, leader.term, offset)
        tracker = save_tracker(quorum, dict(leader.tracker.incarnations))
        state = state.with_replica(
            leader_name, leader._replace(tracker=tracker, commit=tracker.commit_offset)
        )
        return self._committed(state, leader_name)

    def _committed(self, state: State, leader_name: str) -> State:
        leader = state.node(leader_name).replica
        assert leader is not None and leader.tracker is not None
        committed = leader.log[: leader.tracker.commit_offset + 1]
        known = state.committed
        if committed[: len(known)] != known[: len(committed)]:
            raise Unsafe(f"{leader_name} commits {committed} over committed {known}")
        if len(committed) > len(known):
            return state._replace(committed=committed)
        return state

    # -- faults ----------------------------------------------------------------------

    def _fault_steps(self, state: State) -> Iterator[tuple[str, State]]:
        for name, node in state.nodes:
            replica = node.replica
            if node.up and replica is not None and state.crashes_left > 0:
                # It restarts fenced in its term, without its unsynced tail.
                replica = replica._replace(
                    log=replica.log[: replica.durable],
                    commit=min(replica.commit, replica.durable - 1),
                    role=FENCED,
                    leader=None,
                    tracker=None,
                )
                after = state.with_node(name, Node(False, replica))
                yield f"{name} crashes", after._replace(crashes_left=state.crashes_left - 1)
            if not node.up:
                yield f"{name} restarts", state.with_node(name, node._replace(up=True))
            if state.wipes_left > 0 and replica is not None and self._may_wipe(state, name):
                after = state.with_node(name, Node(node.up, None))
                yield f"{name} loses its disk", after._replace(wipes_left=state.wipes_left - 1)

    def _may_wipe(self, state: State, victim: str) -> bool:
        """The simulation's fault model (World._wipe)."""
        voters = state.record.voters
        if victim not in voters:
            return True
        answering = [
            name
            for name in voters
            if name != victim
            and (replica := state.node(name).replica) is not None
            and state.record.intact(name, replica.incarnation)
        ]
        holds = any(
            (replica := state.node(name).replica) is not None
            and replica.log[: replica.durable][: len(state.committed)] == state.committed
            for name in answering
        )
        return len(answering) * 2 > len(voters) and holds

    # -- the controller --------------------------------------------------------------

    def _controller_steps(self, state: State) -> Iterator[tuple[str, State]]:
        record = state.record
        leader = record.leader
        leading = (
            leader is not None
            and state.node(leader).up
            and (replica := state.node(leader).replica) is not None
            and replica.role == LEADER
            and replica.term == record.term
        )
        # The controller polls the leader (of any term still leading).
        for name, node in state.nodes:
            report = leader_report(state, name) if node.up else None
            if (
                report is not None
                and report != state.report
                and (state.report is None or report.term >= state.report.term)
            ):
                yield f"controller polls {name}", state._replace(report=report)
        if self.bounds.controller_restarts:
            if state.report is not None:
                yield "controller restarts", state._replace(report=None)
            yield from self._record_voting(state)
        if record.term < self.bounds.max_term:
            if not (record.state is ShardState.STEADY and leading):
                yield from self._elect(state, None)
            elif self.bounds.leader_moves:
                for target in self._may_take_over(state):
                    yield from self._elect(state, target)
        if leading and record.state is not ShardState.STEADY:
            assert leader is not None
            after = state._replace(
                record=steps.record_steady(
                    status_of(state), SHARD, record.term, leader, None, False
                ).shards[0]
            )
            yield "controller confirms the leader", after
        if leading and record.state is ShardState.STEADY:
            yield from self._ensemble_steps(state)

    def _record_voting(self, state: State) -> Iterator[tuple[str, State]]:
        """RecordVoting, planned from the controller's report when the shard is
        steady with an even number of voters (planner._record_voting), carried
        out from a fresh report of the leader (executor._record_voting)."""
        record = state.record
        last = record.last_leader
        if (
            last is None
            or state.report is None
            or record.state is not ShardState.STEADY
            or len(record.voters) % 2
        ):
            return
        planned = planner.learners_voting(record, state.report, _address_of)
        commit_planned = planner.commit_to_record(record, state.report, _address_of)
        if not planned and not commit_planned:
            return
        # The executor asks the leader the record names (steady: the last one).
        leader = record.leader
        assert leader is not None
        fresh = leader_report(state, leader) if state.node(leader).up else None
        if fresh is None:
            return
        voting = planner.learners_voting(record, fresh, _address_of) & planned
        committed = commit_planned and planner.commit_to_record(record, fresh, _address_of)
        if not voting and not committed:
            return
        status = steps.record_voting(
            status_of(state), SHARD, record.term, leader, sorted(voting), committed
        )
        recorded = [f"{sorted(voting)} voting"] * bool(voting) + ["its term committed"] * committed
        label = f"controller records {', '.join(recorded)}"
        yield label, state._replace(record=status.shards[0])

    def _may_take_over(self, state: State) -> list[str]:
        leader = state.node(state.record.leader or "").replica
        assert leader is not None and leader.tracker is not None
        acked = dict(leader.tracker.acked)
        report = leader_report(state, leader.tracker.leader)
        assert report is not None
        needed = planner.everything_committed_at(report)
        return [
            name
            for name in sorted(leader.tracker.voters - {leader.tracker.leader})
            if name in state.record.ensemble
            and acked.get(name, NO_OFFSET) >= needed
            and state.node(name).up
        ]

    def _elect(self, state: State, preferred: str | None) -> Iterator[tuple[str, State]]:
        record = state.record
        counted = self.rules.counted_voters(record, observed(state), status_of(state))
        term = steps.highest_term(status_of(state), SHARD) + 1
        opened = steps.open_term(status_of(state), SHARD).shards[0]
        assert opened.term == term
        voters = opened.voters
        reachable = [
            name
            for name in voters
            if state.node(name).up and (r := state.node(name).replica) is not None and r.term < term
        ]
        for size in range(len(reachable) + 1):
            for fenced in combinations(reachable, size):
                yield from self._elect_with(
                    state._replace(record=opened), fenced, counted, preferred
                )

    def _elect_with(
        self,
        state: State,
        fenced: tuple[str, ...],
        counted: election.CountedVoters,
        preferred: str | None,
    ) -> Iterator[tuple[str, State]]:
        record = state.record
        term = record.term
        heads = {}
        incarnations = {}
        for name in fenced:
            replica = state.node(name).replica
            assert replica is not None
            # NewTerm: fenced, its log synced, it answers with its head.
            replica = replica._replace(
                durable=len(replica.log), term=term, role=FENCED, leader=None, tracker=None
            )
            state = state.with_replica(name, replica)
            if record.intact(name, replica.incarnation):
                heads[name] = replica.head
                incarnations[name] = replica.incarnation
        alive = {name for name in record.voters if state.node(name).up}
        chosen = election.choose_leader(heads, record.voters, {}, preferred, alive, counted)
        move = f" (move to {preferred})" if preferred else ""
        label = f"election of term {term}{move}: NewTerm to {list(fenced)}, heads {heads}"
        if chosen is None:
            yield f"{label}: no leader", state
            return
        replica = state.node(chosen).replica
        assert replica is not None
        if replica.log[: len(state.committed)] != state.committed:
            raise Unsafe(
                f"{label}: {chosen} takes office with {replica.log}, "
                f"lacking committed {state.committed}"
            )
        status = steps.record_leader(status_of(state), SHARD, term, chosen, incarnations)
        state = state._replace(record=status.shards[0])
        if self.bounds.controller_stops:
            yield f"{label}: {chosen} chosen, BecomeLeader lost", state
        record = state.record
        replica = state.node(chosen).replica
        assert replica is not None
        followers = [name for name in record.ensemble if name != chosen]
        known = {
            name: value for name in followers if (value := record.incarnation_of(name)) is not None
        }
        quorum = self.rules.tracker.for_new_term(
            term, chosen, [chosen, *followers], replica.commit, len(replica.log)
        )
        quorum.acknowledge(chosen, term, replica.durable - 1)
        replica = replica._replace(
            log=(*replica.log, term),
            role=LEADER,
            leader=chosen,
            tracker=save_tracker(quorum, known),
        )
        state = state.with_replica(chosen, replica)
        if self.bounds.controller_stops:
            yield f"{label}: {chosen} leads, not yet confirmed", state
        status = steps.record_steady(status_of(state), SHARD, term, chosen, None, False)
        yield f"{label}: {chosen} leads", state._replace(record=status.shards[0])

    # -- ensemble changes --------------------------------------------------------------

    def _ensemble_steps(self, state: State) -> Iterator[tuple[str, State]]:
        record = state.record
        assert record.leader is not None
        # The planner decides from its last report of the leader, which
        # counted_voters reads later too: one of this moment (the planner's
        # guards read the leader as it is). The executor's refresh after the
        # change may fail: a poll step brings the report up to date.
        state = state._replace(report=leader_report(state, record.leader))
        leader = state.node(record.leader).replica
        assert leader is not None and leader.tracker is not None
        t = leader.tracker
        tracked = t.voters | t.learners
        unfinished = bool(record.leaving) or any(
            name != record.leader
            and (
                (name not in tracked and state.node(name).up)
                or (state.node(name).up and state.node(name).replica is None)
            )
            for name in record.ensemble
        )
        caught_up = {
            name: value
            for name, value in t.incarnations
            if name in t.voters and name in record.ensemble and value != record.incarnation_of(name)
        }
        if unfinished or caught_up:
            yield from self._finish(state)
            return
        in_step = leader.head[0] == record.term and leader.durable - 1 >= t.commit_offset
        in_step = in_step and all(
            name == record.leader or name in t.voters or not state.node(name).up
            for name in record.ensemble
        )
        if not in_step or state.changes_left == 0:
            return
        state = state._replace(changes_left=state.changes_left - 1)
        acked = dict(t.acked)
        assert state.report is not None
        needed = planner.everything_committed_at(state.report)
        holding = {record.leader} | {
            name
            for name in record.ensemble
            if name in t.voters and acked.get(name, NO_OFFSET) >= needed
        }
        settled = len(holding) >= election.majority(len(record.ensemble))
        size = len(record.ensemble)
        if settled and size < self.bounds.max_ensemble:
            for name, node in state.nodes:
                if name not in record.voters and node.up:
                    yield from self._add(state, name)
        if size > self.bounds.min_ensemble:
            for victim in record.ensemble:
                if victim == record.leader:
                    continue
                if not settled and state.node(victim).up:
                    continue  # only a dead member's removal goes on unsettled
                rest = [name for name in record.ensemble if name != victim]
                if sum(state.node(name).up for name in rest) < election.majority(len(rest)):
                    continue
                if len(holding - {victim}) < election.majority(len(rest)):
                    continue
                yield from self._remove(state, victim)

    def _new_member_replica(self, state: State, name: str) -> State:
        """NewTerm at the shard's term on an added member (creating its replica
        if it has none), and its incarnation recorded if none is."""
        record = state.record
        replica = state.node(name).replica
        if replica is None:
            state = state._replace(last_incarnation=state.last_incarnation + 1)
            replica = Replica((), 0, NO_OFFSET, -1, FENCED, None, state.last_incarnation, None)
        if replica.term > record.term or (replica.term == record.term and replica.role != FENCED):
            return state  # refused (already following this term's leader)
        replica = replica._replace(
            durable=len(replica.log), term=record.term, role=FENCED, leader=None, tracker=None
        )
        state = state.with_replica(name, replica)
        status = steps.record_new_member_data(status_of(state), SHARD, name, replica.incarnation)
        return state._replace(record=status.shards[0])

    def _add(self, state: State, name: str) -> Iterator[tuple[str, State]]:
        record = state.record
        status = steps.add_member(status_of(state), SHARD, record.term, name)
        state = state._replace(record=status.shards[0])
        if self.bounds.controller_stops:
            yield f"controller lists {name} as a member (stops there)", state
        state = self._new_member_replica(state, name)
        if self.bounds.controller_stops:
            yield f"controller lists {name} and creates its replica (stops there)", state
        yield f"controller adds {name}", self._add_follower(state, name)

    def _add_follower(self, state: State, name: str) -> State:
        record = state.record
        assert record.leader is not None
        leader = state.node(record.leader).replica
        assert leader is not None and leader.tracker is not None
        quorum = load_tracker(leader.tracker, self.rules)
        if name not in quorum.voters:
            quorum.add_learner(name)
        tracker = save_tracker(quorum, dict(leader.tracker.incarnations))
        return state.with_replica(record.leader, leader._replace(tracker=tracker))

    def _remove(self, state: State, victim: str) -> Iterator[tuple[str, State]]:
        record = state.record
        status = steps.start_removal(status_of(state), SHARD, record.term, victim)
        state = state._replace(record=status.shards[0])
        if self.bounds.controller_stops:
            yield f"controller starts removing {victim} (stops there)", state
        removed = self._remove_follower(state, victim)
        if removed is None:
            return
        status = steps.finish_removal(status_of(removed), SHARD, record.term, (victim,))
        yield f"controller removes {victim}", removed._replace(record=status.shards[0])

    def _remove_follower(self, state: State, name: str) -> State | None:
        """RemoveFollower at the leader; None if it refuses."""
        record = state.record
        assert record.leader is not None
        leader = state.node(record.leader).replica
        assert leader is not None and leader.tracker is not None
        quorum = load_tracker(leader.tracker, self.rules)
        quorum.remove(name)
        if quorum.is_leaving(name):
            # It waits for the rest to catch up: a later try of this step (the
            # runtime's wait ends either way before the controller's).
            return None
        incarnations = dict(leader.tracker.incarnations)
        incarnations.pop(name, None)
        tracker = save_tracker(quorum, incarnations)
        state = state.with_replica(
            record.leader, leader._replace(tracker=tracker, commit=tracker.commit_offset)
        )
        return self._committed(state, record.leader)

    def _finish(self, state: State) -> Iterator[tuple[str, State]]:
        """FinishEnsembleChange: removals first, then members the leader lacks
        (or that lost their replica), then incarnations of members caught up. A
        removal the leader refuses (the rest lack what was committed with the
        leaving member) is left for next time; the rest goes on."""
        record = state.record
        for name in record.leaving:
            removed = self._remove_follower(state, name)
            if removed is None:
                break
            state = removed
        else:
            if record.leaving:
                status = steps.finish_removal(status_of(state), SHARD, record.term, record.leaving)
                state = state._replace(record=status.shards[0])
        record = state.record
        assert record.leader is not None
        leader = state.node(record.leader).replica
        assert leader is not None and leader.tracker is not None
        tracked = leader.tracker.voters | leader.tracker.learners
        for name in record.ensemble:
            if name == record.leader:
                continue
            node = state.node(name)
            if name not in tracked or (node.up and node.replica is None):
                if node.up:
                    state = self._new_member_replica(state, name)
                state = self._add_follower(state, name)
        leader = state.node(record.leader).replica
        assert leader is not None and leader.tracker is not None
        caught_up = {
            name: value
            for name, value in leader.tracker.incarnations
            if name in leader.tracker.voters and name in record.ensemble
        }
        status = steps.record_caught_up_data(status_of(state), SHARD, caught_up)
        # The learners its report (of the action's start) shows voting.
        assert state.report is not None
        voting = planner.learners_voting(record, state.report, _address_of)
        committed = planner.commit_to_record(record, state.report, _address_of)
        if voting or committed:
            status = steps.record_voting(
                status, SHARD, record.term, record.leader, sorted(voting), committed
            )
        yield "controller finishes the ensemble change", state._replace(record=status.shards[0])
