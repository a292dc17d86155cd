"""The reconciler's brain: `plan(spec, status, observed) -> actions`. Pure.

The planner compares what operators want (spec), what the controller has
recorded (status) and what it sees of the pods (observed), and returns the next
steps, at most one per shard. The executor performs them, recording each in the
status before acting; the planner is then asked again. A step never depends on
memory outside its three inputs, so a controller restarted at any point plans
the same way from the recorded status.

Per shard, in order of urgency:

1. an election that did not finish (NEW, ELECTION) is run again with a new
   term, or confirmed if its leader took office;
2. a leader that is unreachable, or lost its role (it restarted) or its
   replica (a wiped disk), is replaced by an election, if a majority of the
   members can answer;
3. an ensemble change that did not finish is finished (for members alive to
   take it: a dead one is left to come back or to be replaced);
4. once the ensemble is settled (every live member voting, a majority holding
   every committed entry in this term, see `everything_committed_at`): a
   long-dead follower is removed when a spare exists, members on nodes being
   drained or released are replaced (a leader there hands over first, or is
   replaced like a follower when no member can take over), the ensemble grows
   or shrinks one member at a time to the replication factor (nothing is
   added while a member is still a learner, alive or not), a requested
   leader move is made (once its target has caught up);
   if none of those is due, members added since the leader took office that
   its report shows voting are recorded as its voters, and the first commit
   of its term once reported (`RecordVoting`, only where it matters: see
   `_record_voting`), so that an election after its death knows them even
   without its report;
5. then, if nothing else is changing: members and leaders are balanced across
   the nodes that have been up for a while (damping flapping nodes); a member
   is moved only where the shrink that follows takes it off the busier node
   without adding anti-affinity conflicts (so balancing always settles), and
   only in a shard settled as in 4.

Leadership is handed over (a requested move, a drain, balancing) only to a
follower the leader counts as a voter and that holds every committed entry in
this term: a learner still catching up holds less than what was committed, and
so may a lagging voter. The election would not choose either (see election.py),
but would bump the term for nothing.

Stale replicas (kept by a node that is no longer a member) are deleted while
nothing else happens to their shard; new namespaces are placed; node records
follow what is observed.

No plan leaves a shard without a majority: a removal is planned only once a
majority of the members that remain hold every committed entry (so every
majority of them includes one holding it) and a majority of them can answer;
an election only with enough members answering (`enough_answers`).

Holding every committed entry is not holding the commit offset. A new leader
starts from the commit offset it knew, which may be lower than what the
earlier term committed (its last acknowledgements never reached it); its term
commits nothing until a majority holds the term's first entry, and then
holds everything committed before. Until then, a member holding only the
commit offset may lack committed entries: removing a member that held them
could leave them on too few of the rest, and a majority without them could
elect a leader without them. So the members that count are those holding the
term's first entry too (the leader's report carries its offset).

A member answers for the data it is recorded to hold (ShardRecord.incarnations)
or not at all: one whose replica is gone, or came back with another incarnation
of its data (a wiped disk, the replica created again), holds less than its
record says, so it does not count toward an election's majority until its
leader has caught it up (it reports it voting again, and FinishEnsembleChange
records the new incarnation). Without a majority of intact members a shard
waits for an operator; `election_blocked` says why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from cairn.common.hashing import split_hash_space
from cairn.common.heartbeat import ReplicaReport
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
    shard_of,
)
from cairn.controller.election import CountedVoters, enough_answers, majority
from cairn.controller.model import (
    ClusterSpec,
    ClusterStatus,
    LastLeader,
    NamespaceSpec,
    NodeHealth,
    ShardRecord,
    ShardState,
)
from cairn.controller.observed import Observed
from cairn.controller.placement import (
    Candidate,
    conflicts,
    leader_load,
    member_load,
    pick_member_to_remove,
    pick_members,
)

LEADER = "leader"
FOLLOWER = "follower"
# How an election asked for by an operator starts its reason (the balancer
# recognises those leaders by it).
REQUESTED_MOVE_REASON = "leader moved to"


def answer_problem(record: ShardRecord, observed: Observed, name: str) -> str | None:
    """Why the member cannot answer NewTerm for the data it is recorded to hold,
    or None if it can: it must be alive and (unless the shard never had a
    leader, when NewTerm creates replicas) neither known to have lost its
    replica nor reporting another incarnation of its data than recorded: a
    wiped member's empty log, or one it holds only partly again, must not vote."""
    view = observed.nodes.get(name)
    if view is None or not view.alive:
        return "unreachable"
    if view.replicas is None:
        return None  # not polled since it came back: NewTerm will tell
    report = view.replicas.get(record.shard)
    if report is None:
        return None if record.state is ShardState.NEW else "lost its replica"
    if not record.intact(name, report.incarnation):
        return (
            f"lost its data (incarnation {report.incarnation:#x}, "
            f"recorded {record.incarnation_of(name) or 0:#x}; not caught up since)"
        )
    return None


def election_blocked(record: ShardRecord, observed: Observed, status: ClusterStatus) -> str | None:
    """Why no election of the shard can be planned now (too few of its members
    can answer for their data, see `enough_answers`), or None. Such a shard
    waits: for members to come back, or for an operator when their data is lost."""
    voters = record.voters
    problems = {name: answer_problem(record, observed, name) for name in voters}
    answering = [name for name, problem in problems.items() if problem is None]
    if enough_answers(answering, voters, counted_voters(record, observed, status)):
        return None
    missing = "; ".join(f"{name} {problem}" for name, problem in problems.items() if problem)
    return (
        f"only {len(answering)} of {len(voters)} members can answer for their data, "
        f"{majority(len(voters))} needed: {missing}"
    )


def incarnations_to_record(
    record: ShardRecord, report: ReplicaReport, address_of: Callable[[str], str | None]
) -> dict[str, int]:
    """Members whose leader (`report`) counts them as voters with another
    incarnation of their data than recorded: the leader readmitted them with it
    (a voter is one holding everything committed), so the record may follow."""
    by_address = {follower.internal_address: follower for follower in report.followers}
    changes = {}
    for name in record.ensemble:
        follower = by_address.get(address_of(name) or "")
        if (
            follower is not None
            and follower.voting
            and follower.incarnation
            and follower.incarnation != record.incarnation_of(name)
        ):
            changes[name] = follower.incarnation
    return changes


@dataclass(frozen=True)
class PlannerSettings:
    # A follower unreachable this long is replaced (when a spare node exists).
    replace_after_ms: int = 30_000
    # A node counts for rebalancing once it has been up this long.
    rebalance_after_ms: int = 10_000
    # Ensemble changes and leader moves under way at once, cluster-wide
    # (failure handling is not limited).
    max_concurrent_changes: int = 2


def everything_committed_at(report: ReplicaReport) -> int:
    """The offset a member must have acknowledged in the term of the leader
    that made `report` to hold every committed entry: the commit offset and
    the term's first entry (see the module's docstring). A pod that does not
    report where its term began: its head, which lies at or past it."""
    term_start = report.term_start_offset
    if term_start is None:
        term_start = report.head_offset
    return max(report.commit_offset, term_start)


def term_committed(report: ReplicaReport) -> bool:
    """Has the leader's term (of `report`) committed its first entry? From
    then on its commit offset is at or past everything earlier terms committed.
    A pod that does not report where its term began: only if the commit offset
    is at its head and the head is of its term."""
    if report.term_start_offset is None:
        return report.head_term == report.term and report.commit_offset == report.head_offset
    return report.commit_offset >= report.term_start_offset


def counted_voters(record: ShardRecord, observed: Observed, status: ClusterStatus) -> CountedVoters:
    """Who the shard's last leader (`ShardRecord.last_leader`: the leader last
    chosen, kept through elections that chose no one after it) counts toward
    its commit offset in its term. From its last report in that term, when
    one is at hand (kept after it died or restarted, see `LeaderReports`):
    itself and the members it reports voting, and whether it committed in
    its term. Members being removed are left out (the leader may have
    dropped them already).

    Whether it committed in its term is known from that report, from the
    record (`LastLeader.committed`), or from any member whose commit offset is
    at an entry of its term (`commit_seen_in_term`).

    Without such a report (it was not polled while leading, or this
    controller restarted since), from the record: the leader, and every
    member but those leaving and its recorded learners. Each of those was
    either handed to it as a follower (they vote from the start of its term,
    LeaderCore) or added since and then seen voting (`record_voting`), and
    a voter votes until removed, unless it comes back with another
    incarnation of its data (then it is a learner again, but it does not
    answer an election for the data it is recorded to hold, so counting it
    lets no answer count that should not). Learners are recorded before the
    leader hears of them (`steps.add_member`), and leave the record only once
    the leader reported them voting, so no member it does not count is ever
    taken as counted; one it counts may be missed, which only makes
    `choose_leader` more careful.

    A record written before last leaders were kept knows no learners: then
    the leader counts itself, and, while its election is not confirmed, the
    members it was handed as followers; once it is steady, members may have
    been added since as learners, so only the leader is known to count; and a
    shard whose election chose no one knows of no leader."""
    last = record.last_leader
    learners: frozenset[str] | None
    recorded_commit = False
    if last is not None and (
        record.leader is None or (last.term, last.name) == (record.term, record.leader)
    ):
        term, leader, learners = last.term, last.name, frozenset(last.learners)
        recorded_commit = last.committed
    elif record.leader is not None:
        term, leader, learners = record.term, record.leader, None
    else:
        return CountedVoters(record.term, frozenset())
    report = observed.report(leader, record.shard)
    if report is None or report.role != LEADER or report.term != term:
        report = observed.leader_reports.get(record.shard)
    if (
        report is None
        or report.term != term
        or report.role != LEADER
        or report.leader_internal_address != address_of(leader, observed, status)
    ):
        if learners is not None:
            handed: Sequence[str] = [name for name in record.ensemble if name not in learners]
        else:
            handed = () if record.state is ShardState.STEADY else record.ensemble
        known = {leader, *(name for name in handed if name not in record.leaving)}
        committed = recorded_commit or commit_seen_in_term(record, observed, term)
        return CountedVoters(term, frozenset(known), committed, leader)
    voting = {follower.internal_address for follower in report.followers if follower.voting}
    members = {
        name
        for name in record.ensemble
        if name not in record.leaving and address_of(name, observed, status) in voting
    }
    committed = (
        recorded_commit or term_committed(report) or commit_seen_in_term(record, observed, term)
    )
    return CountedVoters(term, frozenset({leader, *members}), committed, leader)


def commit_seen_in_term(record: ShardRecord, observed: Observed, term: int) -> bool:
    """Does a member, holding the data it is recorded to hold, report its
    commit offset at an entry of `term` (the last leader's)? Then that leader
    committed in its term: a replica learns its commit offset from its leader
    only, entries of `term` are that leader's, and a later leader would be
    the last one. The fact never changes once true, so a stale report shows
    it as well as a fresh one; and it needs no report of the leader itself,
    which may have lost its disk before any controller saw it commit."""
    for name in record.ensemble:
        view = observed.nodes.get(name)
        report = None if view is None or view.replicas is None else view.replicas.get(record.shard)
        if (
            report is not None
            and report.commit_term == term
            and record.intact(name, report.incarnation)
        ):
            return True
    return False


def _of_last_leader(
    record: ShardRecord, report: ReplicaReport, address_of: Callable[[str], str | None]
) -> LastLeader | None:
    """The record's last leader, if `report` is its report in its term."""
    last = record.last_leader
    if (
        last is None
        or report.role != LEADER
        or report.term != last.term
        or report.leader_internal_address != address_of(last.name)
    ):
        return None
    return last


def learners_voting(
    record: ShardRecord, report: ReplicaReport, address_of: Callable[[str], str | None]
) -> set[str]:
    """The last leader's recorded learners that its report (`report`, of the
    last leader's term) shows voting: they count from now on, and the record
    may say so (`steps.record_voting`)."""
    last = _of_last_leader(record, report, address_of)
    if last is None:
        return set()
    voting = {follower.internal_address for follower in report.followers if follower.voting}
    return {name for name in last.learners if address_of(name) in voting}


def commit_to_record(
    record: ShardRecord, report: ReplicaReport, address_of: Callable[[str], str | None]
) -> bool:
    """Does the last leader's report (of its term) show its term committed,
    which the record does not say yet (`LastLeader.committed`)?"""
    last = _of_last_leader(record, report, address_of)
    return last is not None and not last.committed and term_committed(report)


def address_of(name: str, observed: Observed, status: ClusterStatus) -> str | None:
    """A node's internal address: as observed, else as recorded."""
    view = observed.nodes.get(name)
    if view is not None:
        return view.internal_address
    node = status.node(name)
    return node.internal_address if node is not None else None


def requested_leaders(status: ClusterStatus) -> set[tuple[int, str]]:
    """(shard, leader) of shards whose latest recorded election was a leader move
    an operator asked for: balancing leaves those leaders where they are."""
    latest: dict[int, tuple[str, str]] = {}
    for election in status.elections:  # oldest first
        latest[election.shard] = (election.reason, election.leader)
    return {
        (shard, leader)
        for shard, (reason, leader) in latest.items()
        if reason.startswith(REQUESTED_MOVE_REASON)
    }


def plan(
    spec: ClusterSpec,
    status: ClusterStatus,
    generation: int,
    observed: Observed,
    settings: PlannerSettings | None = None,
) -> list[Action]:
    return _Planner(spec, status, observed, settings or PlannerSettings()).run(generation)


class _Planner:
    def __init__(
        self,
        spec: ClusterSpec,
        status: ClusterStatus,
        observed: Observed,
        settings: PlannerSettings,
    ) -> None:
        self.spec = spec
        self.status = status
        self.observed = observed
        self.settings = settings
        self.load = member_load(status.shards)
        # Leaders per node, counting first elections planned in this round.
        self._first_leaders: Counter[str] = leader_load(status.shards)
        # Changes under way: removals not finished, but not those of a shard
        # whose leader is unreachable or lost its replica (nothing is under way
        # there, and it may stay so for good, without a majority: it must not
        # hold up the rest).
        self.changes_left = settings.max_concurrent_changes - sum(
            1
            for record in status.shards
            if record.leaving
            and observed.alive(record.leader)
            and not self._lost_replica(record.leader, record.shard)
        )

    # -- the whole plan --------------------------------------------------------------

    def run(self, generation: int) -> list[Action]:
        actions: list[Action] = list(self._node_records())
        actions.extend(self._placements())
        busy: set[int] = set()
        for record in self.status.shards:
            action = self._shard_action(record)
            if action is not None:
                actions.append(action)
                busy.add(record.shard)
        if not busy and self._all_settled():
            actions.extend(self._rebalance())
        # A shard acted on now may be adding the very node whose old replica
        # would be deleted (the actions run concurrently): wait a round.
        busy.update(shard for action in actions if (shard := shard_of(action)) is not None)
        actions.extend(self._stale_replicas(busy))
        if generation != self.status.observed_generation:
            actions.append(ObserveGeneration(generation))
        return actions

    # -- nodes -----------------------------------------------------------------------

    def _node_records(self) -> Iterator[RecordNode]:
        for view in sorted(self.observed.nodes.values(), key=lambda v: v.name):
            health = NodeHealth.HEALTHY if view.alive else NodeHealth.UNHEALTHY
            wanted = RecordNode(
                view.name, view.public_address, view.internal_address, dict(view.labels), health
            )
            record = self.status.node(view.name)
            if record is None or (
                record.public_address,
                record.internal_address,
                dict(record.labels),
                record.health,
            ) != (wanted.public_address, wanted.internal_address, wanted.labels, health):
                yield wanted

    def _eligible(self, name: str) -> bool:
        """May hold new members: wanted by the spec and alive."""
        try:
            return self.spec.wants_node(name) and self.observed.alive(name)
        except ValueError:
            return False

    def _candidates(self) -> list[Candidate]:
        return [
            Candidate(view.name, dict(view.labels))
            for view in sorted(self.observed.nodes.values(), key=lambda v: v.name)
            if self._eligible(view.name)
        ]

    def _as_candidate(self, name: str) -> Candidate:
        view = self.observed.nodes.get(name)
        if view is not None:
            return Candidate(name, dict(view.labels))
        record = self.status.node(name)
        return Candidate(name, dict(record.labels) if record is not None else {})

    def _unwanted(self, name: str) -> bool:
        try:
            return not self.spec.wants_node(name)
        except ValueError:
            return True

    def _long_dead(self, name: str) -> bool:
        view = self.observed.nodes.get(name)
        if view is None:
            # Never seen by this controller: as good as dead once it has had
            # time to report (observer clock starts at 0 on controller start).
            return self.observed.now_ms >= self.settings.replace_after_ms
        return (
            not view.alive
            and self.observed.now_ms - view.dead_since_ms >= self.settings.replace_after_ms
        )

    # -- new namespaces --------------------------------------------------------------

    def _placements(self) -> Iterator[PlaceShards]:
        placed = {record.namespace for record in self.status.shards}
        next_id = self.status.next_shard_id
        load = Counter(self.load)
        for namespace in self.spec.namespaces:
            if namespace.name in placed:
                continue
            records = self._place(namespace, next_id, load)
            if records is None:
                continue
            next_id += len(records)
            yield PlaceShards(namespace.name, records)

    def _place(
        self, namespace: NamespaceSpec, first_id: int, load: Counter[str]
    ) -> tuple[ShardRecord, ...] | None:
        candidates = self._candidates()
        if len(candidates) < namespace.replication_factor:
            return None  # wait for enough pods
        records = []
        for offset, hash_range in enumerate(split_hash_space(namespace.shards)):
            members = pick_members(
                candidates, [], namespace.replication_factor, load, self.spec.anti_affinity
            )
            for name in members:
                load[name] += 1
            records.append(
                ShardRecord(
                    namespace=namespace.name,
                    shard=first_id + offset,
                    hash_range=hash_range,
                    term=0,
                    state=ShardState.NEW,
                    leader=None,
                    ensemble=tuple(members),
                )
            )
        return tuple(records)

    # -- one shard -------------------------------------------------------------------

    def _shard_action(self, record: ShardRecord) -> Action | None:
        namespace = self.spec.namespace(record.namespace)
        if record.state is not ShardState.STEADY:
            return self._unfinished_election(record)
        leader_report = self.observed.report(record.leader, record.shard)
        if not self.observed.alive(record.leader):
            return self._election(record, f"leader {record.leader} is unreachable")
        if (
            leader_report is not None
            and leader_report.term == record.term
            and leader_report.role != LEADER
        ):
            return self._election(
                record, f"leader {record.leader} is {leader_report.role}, not leading"
            )
        if leader_report is None and self._lost_replica(record.leader, record.shard):
            # Polled since it came back, and the replica is gone (a wiped disk):
            # it will never report leading again.
            return self._election(record, f"leader {record.leader} lost its replica")
        if (
            leader_report is None
            or leader_report.term != record.term
            or leader_report.role != LEADER
        ):
            return None  # not observed yet (or a stale observation): wait
        stray = self._drop_never_added(record, leader_report)
        if stray is not None:
            return stray
        if self._unfinished_change(record, leader_report):
            return FinishEnsembleChange(record.shard)
        if namespace is not None and self._in_step(record, leader_report):
            settled = self._settled(record, leader_report)
            change = self._ensemble_change(record, namespace, leader_report, settled)
            if isinstance(change, ChangeEnsemble) and self._commit_unrecorded(record):
                # The change makes an odd ensemble even: record the commit first.
                return self._record_commit(record, leader_report)
            if change is not None:
                return change
        return self._record_voting(record, leader_report)

    def _commit_unrecorded(self, record: ShardRecord) -> bool:
        """Is the ensemble odd (a change makes it even), and does the record
        not say yet that its leader committed in its term? The change waits
        for that: should the leader then lose its data, half of an even
        ensemble elects only with the commit known (`enough_answers`;
        without it a majority of every member must answer, one more than
        before the change, and the member being added may be one that
        cannot). An odd ensemble does not record the commit otherwise
        (`_record_voting`)."""
        last = record.last_leader
        return (
            len(record.voters) % 2 == 1
            and last is not None
            and (last.term, last.name) == (record.term, record.leader)
            and not last.committed
        )

    def _record_commit(self, record: ShardRecord, report: ReplicaReport) -> RecordVoting | None:
        """Record the term's first commit once the leader's report shows it
        (with the learners it shows voting); until then, wait."""
        if not commit_to_record(record, report, self._address):
            return None
        voting = learners_voting(record, report, self._address)
        return RecordVoting(record.shard, tuple(sorted(voting)), term_committed=True)

    def _election(
        self, record: ShardRecord, reason: str, preferred: str | None = None
    ) -> Elect | None:
        voters = record.voters
        answering = [name for name in voters if self._can_answer(record, name)]
        counted = counted_voters(record, self.observed, self.status)
        if not enough_answers(answering, voters, counted):
            return None  # too few can answer: nothing safe to do but wait
        return Elect(record.shard, reason, preferred)

    def _can_answer(self, record: ShardRecord, name: str) -> bool:
        return answer_problem(record, self.observed, name) is None

    def _unfinished_election(self, record: ShardRecord) -> Action | None:
        if record.leader is not None:
            report = self.observed.report(record.leader, record.shard)
            if report is not None and report.term == record.term and report.role == LEADER:
                return ConfirmLeader(record.shard)
        if record.state is ShardState.NEW:
            # All logs are empty: any member may lead, so spread the leaders of
            # new shards now rather than move them by balancing later.
            leaders = self._first_leaders
            candidates = [name for name in record.ensemble if self._can_answer(record, name)]
            preferred = min(candidates, key=lambda n: (leaders[n], n)) if candidates else None
            action = self._election(record, "first election", preferred)
            if action is not None and preferred is not None:
                leaders[preferred] += 1
            return action
        return self._election(record, "election interrupted")

    def _lost_replica(self, name: str | None, shard: int) -> bool:
        """A live node polled since it turned alive that holds no replica of the shard."""
        view = self.observed.nodes.get(name) if name is not None else None
        return (
            view is not None
            and view.alive
            and view.replicas is not None
            and shard not in view.replicas
        )

    def _ensemble_intact(self, record: ShardRecord) -> bool:
        """Is every voter up and reporting the data it is recorded to hold?
        Only then does a majority of them surely hold everything committed,
        and a replica outside the ensemble is no longer needed by anyone (an
        operator recovering a shard whose members lost their disks may be)."""
        for name in record.voters:
            report = self.observed.report(name, record.shard)
            if report is None or not record.intact(name, report.incarnation):
                return False
        return True

    def _follower_addresses(self, report: ReplicaReport) -> set[str]:
        return {follower.internal_address for follower in report.followers}

    def _address(self, name: str) -> str | None:
        return address_of(name, self.observed, self.status)

    def _unfinished_change(self, record: ShardRecord, report: ReplicaReport) -> bool:
        followers = self._follower_addresses(report)
        if record.leaving:
            return True
        for name in record.ensemble:
            if name == record.leader:
                continue
            # A member the leader lacks is added by FinishEnsembleChange, which
            # can only reach it alive; a dead one waits (or is replaced).
            if self._address(name) not in followers and self.observed.alive(name):
                return True
            # A member that came back without its replica (a wiped disk): the
            # leader cannot catch it up until NewTerm creates the replica again.
            if self._lost_replica(name, record.shard):
                return True
        # A member its leader caught up with another incarnation of its data
        # than recorded (re-created after a wipe): from now on it holds what
        # it is recorded to hold; FinishEnsembleChange records it.
        return bool(incarnations_to_record(record, report, self._address))

    def _record_voting(self, record: ShardRecord, report: ReplicaReport) -> RecordVoting | None:
        """Recorded learners the leader (`report`) counts as voters now, and
        its term's first commit, to be recorded when nothing else is due for
        the shard. Only in an ensemble of an even number of voters: in an odd
        one, answers from fewer than a majority are never enough, whoever is
        known to count and whatever it committed (`enough_answers`), so a
        learner left in the record there only makes `choose_leader` more
        careful; they are recorded once the ensemble is even
        (FinishEnsembleChange records what it sees too)."""
        even = len(record.voters) % 2 == 0
        voting = learners_voting(record, report, self._address) if even else set()
        committed = commit_to_record(record, report, self._address)
        if not voting and not committed:
            return None
        return RecordVoting(record.shard, tuple(sorted(voting)), committed)

    def _drop_never_added(self, record: ShardRecord, report: ReplicaReport) -> Action | None:
        """A long-dead member the leader never had (its addition was cut short,
        then it died): FinishEnsembleChange cannot reach it (and fails on it),
        and it holds nothing the leader counts, so it is removed at once,
        without waiting for the ensemble to settle (which may wait on the
        very FinishEnsembleChange it blocks). Removing a member the leader
        never had changes nothing of its voters, so this may go on while a
        removal is unfinished too."""
        followers = self._follower_addresses(report)
        for name in record.ensemble:
            if (
                name != record.leader
                and self._long_dead(name)
                and self._address(name) not in followers
                and self._removal_keeps_majority(record, name)
            ):
                return ChangeEnsemble(
                    record.shard, f"drop {name}: unreachable, never added", remove=name
                )
        return None

    def _in_step(self, record: ShardRecord, report: ReplicaReport) -> bool:
        """Do the leader's voters match the ensemble: every member a follower
        of the leader's, every live one voting (no change half done)?"""
        if report.head_term != record.term or report.durable_offset < report.commit_offset:
            return False
        by_address = {follower.internal_address: follower for follower in report.followers}
        for name in record.ensemble:
            if name == record.leader:
                continue
            follower = by_address.get(self._address(name) or "")
            if follower is None:
                return False
            if not follower.voting and self.observed.alive(name):
                return False
        return True

    def _learners(self, record: ShardRecord, report: ReplicaReport) -> list[str]:
        """Members the leader (`report`) has as followers not voting yet."""
        by_address = {follower.internal_address: follower for follower in report.followers}
        return [
            name
            for name in record.ensemble
            if (follower := by_address.get(self._address(name) or "")) is not None
            and not follower.voting
        ]

    def _settled(self, record: ShardRecord, report: ReplicaReport) -> bool:
        """May the ensemble change again (once in step): a majority holding
        every committed entry durably in this term (so the term has committed
        its first entry, and a member added now votes from there)."""
        return len(self._holding(record, report)) >= majority(len(record.ensemble))

    def _holding(self, record: ShardRecord, report: ReplicaReport) -> set[str]:
        """The members holding every committed entry: the leader, and the
        voting followers that acknowledged `everything_committed_at` in this
        term, still with the data the record says they hold. The leader learns
        that a follower lost its disk only once the follower answers again: a
        follower whose own report says so (no replica, or another incarnation
        of its data) holds nothing, whatever its leader last heard from it;
        and it counts again once its new incarnation is recorded, as an
        election would count it."""
        by_address = {follower.internal_address: follower for follower in report.followers}
        needed = everything_committed_at(report)
        holding = {record.leader} if record.leader is not None else set()
        for name in record.ensemble:
            follower = by_address.get(self._address(name) or "")
            if (
                follower is not None
                and follower.voting
                and follower.acked_offset >= needed
                and record.intact(name, follower.incarnation)
                and not self._lost_data(record, name)
            ):
                holding.add(name)
        return holding

    def _lost_data(self, record: ShardRecord, name: str) -> bool:
        """Does `name`'s own latest report show it lost the data it is recorded
        to hold (no replica any more, or another incarnation of it)?"""
        if self._lost_replica(name, record.shard):
            return True
        own = self.observed.report(name, record.shard)
        return own is not None and not record.intact(name, own.incarnation)

    def _ensemble_change(
        self,
        record: ShardRecord,
        namespace: NamespaceSpec,
        report: ReplicaReport,
        settled: bool,
    ) -> Action | None:
        move = next((m for m in self.status.leader_moves if m.shard == record.shard), None)
        if move is not None and settled:
            action = self._leader_move(record, move.node, report)
            if action is not None:
                return action
            # The target still catches up (or no majority could answer): the
            # move waits, and other changes may go on meanwhile.
        if self.changes_left <= 0:
            return None
        size = len(record.ensemble)
        rf = namespace.replication_factor
        followers = [name for name in record.ensemble if name != record.leader]
        dead = [name for name in followers if self._long_dead(name)]
        unwanted = [name for name in followers if self._unwanted(name) and name not in dead]
        spares = self._spares(record)
        if not settled:
            # No majority holds every committed entry: perhaps because the leader
            # waits for a member that died before acknowledging it (say one of
            # two, after an election). Only that member's removal may go on, if
            # the rest hold every committed entry (see _remove); anything else
            # waits for the ensemble to settle.
            if dead and (spares or size > rf):
                return self._remove(record, f"replace unreachable {dead[0]}", dead, report)
            return None
        # A leader on a node being drained or released hands over first; with
        # no live wanted follower to take over (an ensemble of one, say) it is
        # replaced like an unwanted follower: its replacement is added first,
        # then takes over, then the old leader is removed.
        leader_unwanted = record.leader is not None and self._unwanted(record.leader)
        if leader_unwanted and size > 1:
            handover = self._handover(record, report)
            if handover is not None:
                return handover
        if leader_unwanted and record.leader is not None:
            unwanted = [*unwanted, record.leader]
        # A dead member goes first (it adds nothing to the majority), a live
        # unwanted one last (its replacement catches up while it still counts).
        if dead and (spares or size > rf):
            return self._remove(record, f"replace unreachable {dead[0]}", dead, report)
        # One member catching up at a time: nothing is added while a learner
        # (a follower not voting, alive or dead) is a member. With two, a
        # majority of the members could be the two learners and a voter, and
        # miss every entry the others committed (an election hands every
        # member to the new leader as a voter); with one, any majority of the
        # members meets every majority of the voters.
        if self._learners(record, report):
            return None
        if size < rf and spares:
            return self._add(record, spares, f"grow to replication factor {rf}", unwanted)
        if unwanted and size <= rf and spares:
            return self._add(
                record, spares, f"replace {unwanted[0]} (drained or released)", unwanted
            )
        if size > rf:
            return self._remove(
                record, f"shrink to replication factor {rf}", dead + unwanted, report
            )
        if size == rf and spares:
            return self._spread(record, spares)
        return None

    def _spread(self, record: ShardRecord, spares: Sequence[Candidate]) -> Action | None:
        """Members sharing anti-affinity label values although a spare elsewhere
        exists (a failure or a drain left no better choice at the time): add
        the spare that, once the shrink that follows removes the worst member,
        leaves the fewest conflicts."""
        if not self.spec.anti_affinity:
            return None
        members = [self._as_candidate(name) for name in record.ensemble]
        before = self._conflicts(members)
        if before == 0:
            return None
        better: list[tuple[int, int, str]] = []
        for spare in spares:
            grown = [*members, spare]
            load = Counter(self.load)
            load[spare.name] += 1
            victim = pick_member_to_remove(grown, record.leader, load, self.spec.anti_affinity)
            if victim is None or victim == spare.name:
                continue
            after = self._conflicts([member for member in grown if member.name != victim])
            if after < before:
                better.append((after, self.load.get(spare.name, 0), spare.name))
        if not better:
            return None
        chosen = min(better)[2]
        self.changes_left -= 1
        self.load[chosen] += 1
        labels = ", ".join(self.spec.anti_affinity)
        return ChangeEnsemble(record.shard, f"spread over {labels}", add=chosen)

    def _spares(self, record: ShardRecord) -> list[Candidate]:
        return [c for c in self._candidates() if c.name not in record.voters]

    def _add(
        self,
        record: ShardRecord,
        spares: Sequence[Candidate],
        reason: str,
        replaced: Sequence[str] = (),
    ) -> Action | None:
        # Anti-affinity counts against the members that stay: a node replacing
        # a drained member may share that member's zone (it takes its place).
        members = [self._as_candidate(name) for name in record.ensemble if name not in replaced]
        chosen = pick_members(spares, members, 1, self.load, self.spec.anti_affinity)
        if not chosen:
            return None
        self.changes_left -= 1
        self.load[chosen[0]] += 1
        return ChangeEnsemble(record.shard, reason, add=chosen[0])

    def _remove(
        self, record: ShardRecord, reason: str, prefer: Sequence[str], report: ReplicaReport
    ) -> Action | None:
        members = [self._as_candidate(name) for name in record.ensemble]
        victim = pick_member_to_remove(
            members, record.leader, self.load, self.spec.anti_affinity, prefer
        )
        if victim is None:
            return None
        if not self._removal_keeps_majority(record, victim):
            return None
        # The members that remain must include a majority holding every
        # committed entry: else a majority of them could elect a leader
        # without one (see the module's docstring); and were the commit offset
        # left to one lagging behind, and that one died, the leader could
        # commit nothing more and the shard would never settle again to have
        # it replaced. Wait for it to catch up instead.
        holding = self._holding(record, report) - {victim}
        if len(holding) < majority(len(record.ensemble) - 1):
            return None
        self.changes_left -= 1
        return ChangeEnsemble(record.shard, reason, remove=victim)

    def _removal_keeps_majority(self, record: ShardRecord, victim: str) -> bool:
        """After removing `victim`, can a majority of the rest still answer?"""
        rest = [name for name in record.ensemble if name != victim]
        alive = sum(1 for name in rest if self.observed.alive(name))
        return bool(rest) and alive >= majority(len(rest))

    def _handover(self, record: ShardRecord, report: ReplicaReport) -> Action | None:
        targets = [
            name
            for name in record.ensemble
            if self._eligible(name) and self._may_take_over(record, report, name)
        ]
        if not targets:
            return None
        leaders = leader_load(self.status.shards)
        target = min(targets, key=lambda name: (leaders.get(name, 0), name))
        election = self._election(record, f"hand leadership off {record.leader}", target)
        if election is not None:
            self.changes_left -= 1
        return election

    def _leader_move(
        self, record: ShardRecord, target: str, report: ReplicaReport
    ) -> Action | None:
        """The requested move's next step; None while it has to wait."""
        if target == record.leader:
            return DropLeaderMove(record.shard, target, "already the leader")
        if target not in record.ensemble or not self.observed.alive(target):
            return DropLeaderMove(record.shard, target, f"{target} is not a live member")
        if not self._may_take_over(record, report, target):
            return None
        return self._election(
            record, f"{REQUESTED_MOVE_REASON} {target} on request", preferred=target
        )

    def _may_take_over(self, record: ShardRecord, report: ReplicaReport, name: str) -> bool:
        """Is `name` a follower the leader (of `report`) counts as a voter, and
        holding every committed entry in this term? A learner is neither: it
        joined with nothing and votes only once it has caught up."""
        address = self._address(name)
        needed = everything_committed_at(report)
        return name != record.leader and any(
            follower.internal_address == address
            and follower.voting
            and follower.acked_offset >= needed
            for follower in report.followers
        )

    def _settled_report(self, record: ShardRecord) -> ReplicaReport | None:
        """The leader's report, if the shard may change now: steady, its leader
        reporting in the recorded term, no change under way, in step (every
        live member voting) and settled (a majority holding every committed
        entry), as `_shard_action` requires before any change. None otherwise."""
        if record.state is not ShardState.STEADY or record.leaving:
            return None
        report = self.observed.report(record.leader, record.shard)
        if report is None or report.term != record.term or report.role != LEADER:
            return None
        if self._unfinished_change(record, report) or not self._in_step(record, report):
            return None
        return report if self._settled(record, report) else None

    # -- balance ---------------------------------------------------------------------

    def _all_settled(self) -> bool:
        """Balancing waits until every shard is steady with its full ensemble and
        every wanted node has been up for a while."""
        now = self.observed.now_ms
        for view in self.observed.nodes.values():
            try:
                wanted = self.spec.wants_node(view.name)
            except ValueError:
                wanted = False
            if not wanted:
                continue
            if not view.alive:
                # Down only briefly (restarting, flapping): balancing now would
                # move shards off it only to move them back.
                if not self._long_dead(view.name):
                    return False
                continue
            if now - view.alive_since_ms < self.settings.rebalance_after_ms:
                return False
        for record in self.status.shards:
            namespace = self.spec.namespace(record.namespace)
            if record.state is not ShardState.STEADY or record.leaving:
                return False
            if namespace is not None and len(record.ensemble) != namespace.replication_factor:
                return False
        return True

    def _rebalance(self) -> Iterator[Action]:
        if self.changes_left <= 0:
            return
        nodes = [c.name for c in self._candidates()]
        if len(nodes) < 2:
            return
        members = {name: self.load.get(name, 0) for name in nodes}
        # Busiest first, idlest first: the first pair two or more apart that some
        # shard can move a member between; only if none can, the first where
        # the busier node must hand a shard's leadership over first.
        pairs = [
            (most, least)
            for most in sorted(nodes, key=lambda name: (-members[name], name))
            for least in sorted(nodes, key=lambda name: (members[name], name))
            if members[most] - members[least] > 1
        ]
        for handover in (False, True):
            for most, least in pairs:
                for record in self.status.shards:
                    action = self._member_move(record, most, least, handover)
                    if action is not None:
                        self.changes_left -= 1
                        yield action
                        return
        leaders = leader_load(self.status.shards)
        counts = {name: leaders.get(name, 0) for name in nodes}
        # A leader an operator placed stays until it changes for another reason (a
        # failure, a drain, another request): balancing shifts the others around
        # it, and waits while none of them can move (under load a follower lags
        # for a moment), rather than undo the request.
        requested = requested_leaders(self.status)
        shards = [r for r in self.status.shards if (r.shard, r.leader) not in requested]
        for most in sorted(nodes, key=lambda name: (-counts[name], name)):
            for least in sorted(nodes, key=lambda name: (counts[name], name)):
                if counts[most] - counts[least] <= 1:
                    break
                for record in shards:
                    if record.leader != most or least not in record.ensemble:
                        continue
                    report = self._settled_report(record)
                    if report is not None and self._may_take_over(record, report, least):
                        reason = f"balance leaders: {most} -> {least}"
                        election = self._election(record, reason, least)
                        if election is not None:
                            self.changes_left -= 1
                            yield election
                            return

    def _member_move(
        self, record: ShardRecord, most: str, least: str, handover: bool
    ) -> Action | None:
        """The first step of moving a member of the shard from `most` to `least`:
        add `least` (the shrink that follows removes `most`), or, with
        `handover` and if `most` leads the shard, hand its leadership to another
        member first (the leader is never removed)."""
        if most not in record.ensemble or least in record.voters or record.leader is None:
            return None
        if handover != (record.leader == most):
            return None
        # One change at a time: not while a member catches up, say.
        report = self._settled_report(record)
        if report is None:
            return None
        leader = record.leader
        if handover:
            targets = [
                name
                for name in record.ensemble
                if self._eligible(name) and self._may_take_over(record, report, name)
            ]
            if not targets:
                return None
            leaders = leader_load(self.status.shards)
            leader = min(targets, key=lambda name: (leaders.get(name, 0), name))
        if not self._member_move_fits(record, leader, most, least):
            return None
        if leader != record.leader:
            return self._election(record, f"hand leadership off {most} to balance members", leader)
        return ChangeEnsemble(record.shard, f"balance members: {most} -> {least}", add=least)

    def _member_move_fits(self, record: ShardRecord, leader: str, most: str, least: str) -> bool:
        """Would adding `least` to the shard (led by `leader`) make the shrink
        that follows remove `most`, without more anti-affinity conflicts than
        before? (Otherwise the shrink removes `least` again, or another member,
        and balancing adds it back: it would never settle.)"""
        members = [self._as_candidate(name) for name in record.ensemble]
        grown = [*members, self._as_candidate(least)]
        load = Counter(self.load)
        load[least] += 1
        prefer = [name for name in record.ensemble if self._long_dead(name) or self._unwanted(name)]
        victim = pick_member_to_remove(grown, leader, load, self.spec.anti_affinity, prefer)
        if victim != most:
            return False
        shrunk = [member for member in grown if member.name != most]
        return self._conflicts(shrunk) <= self._conflicts(members)

    def _conflicts(self, members: Sequence[Candidate]) -> int:
        return sum(
            conflicts(member, members[index + 1 :], self.spec.anti_affinity)
            for index, member in enumerate(members)
        )

    # -- stale replicas ----------------------------------------------------------------

    def _stale_replicas(self, busy: set[int]) -> Iterator[DeleteReplica]:
        records = {
            record.shard: record for record in self.status.shards if record.shard not in busy
        }
        for view in sorted(self.observed.nodes.values(), key=lambda v: v.name):
            if not view.alive or view.replicas is None:
                continue
            for shard, report in sorted(view.replicas.items()):
                record = records.get(shard)
                if record is None:
                    continue  # not ours to judge (another cluster's, or not yet recorded)
                if view.name in record.voters or record.state is not ShardState.STEADY:
                    continue
                if not self._ensemble_intact(record):
                    continue  # it may hold one of the last copies of what was committed
                leader_report = self.observed.report(record.leader, shard)
                if leader_report is not None and view.internal_address in self._follower_addresses(
                    leader_report
                ):
                    continue  # the leader still sends to it: remove it there first
                yield DeleteReplica(view.name, shard, max(record.term, report.term))
