"""Carries out the planner's actions against the storage pods.

Every step is recorded in the cluster state *before* the pods are told, so a
controller killed at any point leaves a status from which the planner resumes:

    election:  term+1, ELECTION  ->  NewTerm to every member  ->  leader chosen
               (recorded, with the incarnations that answered)  ->  BecomeLeader
               ->  STEADY (and the shard map)
    add:       member listed  ->  NewTerm (creates its replica; a new member's
               incarnation recorded)  ->  AddFollower
    remove:    member moved to `leaving`  ->  RemoveFollower  ->  `leaving` cleared
    voting:    the leader asked for its report  ->  learners it shows voting no
               longer recorded as learners (`LastLeader`)

Only members answering NewTerm with the incarnation of their data that is
recorded (or none recorded) count in an election: one that lost its data is
not the replica it was (see the planner's docstring).

A retried election always uses a new term; an interrupted change is finished by
FinishEnsembleChange, which only repeats idempotent calls.

Each step's write is a function of the status it replaces (cairn.controller.steps),
applied by the keeper inside its compare-and-set, and refused once another
controller has taken over (ControllerFenced). Pod calls whose intent is recorded
already (finishing a change, deleting a left replica) are preceded by a check of
the same kind, made against a fresh read. Every call that changes a pod carries
this controller's epoch, so pods refuse it once a newer controller reached them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

import grpc

from cairn.controller import steps
from cairn.controller.actions import (
    Action,
    ActionFailed,
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
from cairn.controller.election import choose_leader, majority
from cairn.controller.fencing import ControllerFenced
from cairn.controller.keeper import StateKeeper
from cairn.controller.model import (
    ClusterState,
    ClusterStatus,
    ElectionRecord,
    NamespaceSpec,
    NodeRecord,
    ShardRecord,
    ShardState,
)
from cairn.controller.observed import NodeViews
from cairn.controller.placement import leader_load
from cairn.controller.planner import (
    commit_to_record,
    counted_voters,
    incarnations_to_record,
    learners_voting,
)
from cairn.controller.pods import Fenced, PodAddress, PodCalls
from cairn.proto import oxia_client_pb2 as pb

log = logging.getLogger(__name__)
__all__ = ["ActionFailed", "Executor", "assignments_of"]


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def assignments_of(state: ClusterState, last_leaders: dict[int, str]) -> pb.ShardAssignments:
    """The shard map pods hand to clients: every shard of every namespace with
    its leader's public address (the last known one during an election). A
    namespace whose shards are not placed yet is there with none, so that pods
    can tell "not ready yet" (clients wait) from "no such namespace"."""
    status = state.status
    addresses = {node.name: node.public_address for node in status.nodes}
    assignments = pb.ShardAssignments()
    for namespace in state.spec.namespaces:
        records = sorted(
            (r for r in status.shards if r.namespace == namespace.name),
            key=lambda r: r.hash_range.min_inclusive,
        )
        target = assignments.namespaces[namespace.name]
        target.shard_key_router = pb.XXHASH3
        target.key_sorting = (
            pb.KEY_SORTING_NATURAL
            if namespace.key_order.value == "natural"
            else pb.KEY_SORTING_HIERARCHICAL
        )
        for record in records:
            leader = addresses.get(record.leader or "", "") or last_leaders.get(record.shard, "")
            if leader:
                last_leaders[record.shard] = leader
            entry = target.assignments.add(shard=record.shard, leader=leader)
            entry.int32_hash_range.min_hash_inclusive = record.hash_range.min_inclusive
            entry.int32_hash_range.max_hash_inclusive = record.hash_range.max_inclusive
    return assignments


class Executor:
    def __init__(
        self,
        keeper: StateKeeper,
        pods: PodCalls,
        observer: NodeViews,
        wall_ms: Callable[[], int] = wall_clock_ms,
        straggler_grace_s: float = 0.1,
    ) -> None:
        self.straggler_grace_s = straggler_grace_s
        self.keeper = keeper
        self.pods = pods
        self.observer = observer
        self.wall_ms = wall_ms
        self._last_leaders: dict[int, str] = {}
        self._pushes: dict[str, asyncio.Task[None]] = {}
        self._push_again: set[str] = set()

    # -- helpers -----------------------------------------------------------------------

    def _internal_address(self, name: str) -> str:
        return self._address(name).internal

    def _address(self, name: str) -> PodAddress:
        view = self.observer.node(name)
        if view is not None:
            return PodAddress(view.public_address, view.internal_address)
        record = self.keeper.state.status.node(name)
        if record is None:
            raise ActionFailed(f"no address known for node {name}")
        return PodAddress(record.public_address, record.internal_address)

    def _record(self, shard: int) -> ShardRecord:
        record = self.keeper.state.status.shard(shard)
        if record is None:
            raise ActionFailed(f"shard {shard} is not in the cluster state")
        return record

    def _namespace(self, record: ShardRecord) -> NamespaceSpec:
        namespace = self.keeper.state.spec.namespace(record.namespace)
        if namespace is None:
            raise ActionFailed(f"namespace {record.namespace!r} is no longer in the spec")
        return namespace

    @property
    def _epoch(self) -> int:
        epoch = self.keeper.epoch
        assert epoch is not None, "the executor acts only once an epoch is taken"
        return epoch

    async def _step(
        self, shard: int, change: Callable[[ClusterStatus], ClusterStatus]
    ) -> ShardRecord:
        """Write (or check) one step; the shard's record as it now stands."""
        state = await self.keeper.update_status(change)
        return steps.shard_record(state.status, shard)

    def push_assignments(self, names: Sequence[str] | None = None) -> None:
        """Send the shard map to these nodes (default: every live one), in the
        background: one push in flight per node, and a newer map queued behind it
        (a hung pod holds up only its own push)."""
        views = self.observer.view().nodes
        for name in names if names is not None else list(views):
            view = views.get(name)
            if view is None or not view.alive or not view.internal_address:
                continue
            address = view.internal_address
            if address in self._pushes:
                self._push_again.add(address)
            else:
                self._pushes[address] = asyncio.create_task(self._push(address))

    async def _push(self, address: str) -> None:
        try:
            while True:
                self._push_again.discard(address)
                state = self.keeper.state
                assignments = assignments_of(state, self._last_leaders)
                try:
                    await self.pods.push_assignments(
                        address, assignments, state.status.assignments_version, self._epoch
                    )
                except grpc.aio.AioRpcError as error:
                    log.debug("shard map push to %s failed: %s", address, _brief(error))
                except ControllerFenced as error:
                    if error.pod_epoch is None or not await self.keeper.outrun(error.pod_epoch):
                        self.keeper.fence(str(error))
                        return
                    self._push_again.add(address)  # again, with the epoch taken
                if address not in self._push_again:
                    return
        finally:
            self._pushes.pop(address, None)

    async def close(self) -> None:
        pushes = list(self._pushes.values())
        for task in pushes:
            task.cancel()
        await asyncio.gather(*pushes, return_exceptions=True)

    # -- dispatch ----------------------------------------------------------------------

    async def run(self, action: Action) -> None:
        try:
            await self._run(action)
        except ControllerFenced as error:
            if error.pod_epoch is not None and await self.keeper.outrun(error.pod_epoch):
                raise ActionFailed(f"{error}; retrying with epoch {self.keeper.epoch}") from None
            # A pod (or the state) says a newer controller took over: stop acting.
            self.keeper.fence(str(error))
            raise

    async def _run(self, action: Action) -> None:
        match action:
            case RecordNode():
                await self._record_node(action)
            case PlaceShards():
                await self._place(action)
            case Elect():
                await self._elect(action)
            case ConfirmLeader():
                await self._confirm(action)
            case ChangeEnsemble():
                await self._change(action)
            case FinishEnsembleChange():
                await self._finish(action)
            case RecordVoting():
                await self._record_voting(action)
            case DeleteReplica():
                await self._delete(action)
            case DropLeaderMove():
                await self._drop_move(action)
            case ObserveGeneration():
                await self.keeper.update_status(
                    lambda s: replace(s, observed_generation=action.generation)
                )

    # -- nodes and namespaces --------------------------------------------------------

    async def _record_node(self, action: RecordNode) -> None:
        record = NodeRecord(
            action.name,
            action.public_address,
            action.internal_address,
            dict(action.labels),
            action.health,
        )
        await self.keeper.update_status(lambda s: s.with_node(record))

    async def _place(self, action: PlaceShards) -> None:
        def change(status: ClusterStatus) -> ClusterStatus:
            if any(r.namespace == action.namespace for r in status.shards):
                return status  # placed already
            for record in action.shards:
                status = status.with_shard(record)
            next_id = max(r.shard for r in action.shards) + 1
            return replace(status, next_shard_id=max(status.next_shard_id, next_id))

        await self.keeper.update_status(change)
        log.info(
            "namespace %s: placed %d shards: %s",
            action.namespace,
            len(action.shards),
            ", ".join(f"{r.shard}={'/'.join(r.ensemble)}" for r in action.shards),
        )

    # -- elections ---------------------------------------------------------------------

    async def _elect(self, action: Elect) -> None:
        started_ms = self.wall_ms()
        outgoing = self._record(action.shard)
        namespace = self._namespace(outgoing)
        # Who the outgoing leader counts toward its commit offset, from its
        # last report (a learner it still catches up does not), taken while
        # the record still names it.
        counted = counted_voters(outgoing, self.observer.view(), self.keeper.state.status)
        # The new term is derived from the recorded ones inside the write, and on
        # record before any member hears of it: it is never handed out twice.
        record = await self._step(action.shard, partial(steps.open_term, shard=action.shard))
        term = record.term
        creating = record.state is ShardState.NEW
        voters = record.voters
        answers = await self._fence(record, term, namespace if creating else None)
        # A member that lost the data it is recorded to hold answers for less
        # than it held: its head must neither count toward the majority nor win.
        heads = {
            name: answer.head
            for name, answer in answers.items()
            if record.intact(name, answer.incarnation)
        }
        lost = sorted(set(answers) - set(heads))
        leaders = leader_load(self.keeper.state.status.shards)
        views = self.observer.view().nodes
        alive = {name for name in voters if name in views and views[name].alive}
        leader = choose_leader(heads, voters, leaders, action.preferred, alive, counted)
        if leader is None:
            raise ActionFailed(
                f"shard {record.shard}: no safe live leader for term {term}: heads {heads}, "
                f"live members {sorted(alive)}"
                + (f", members that lost their data {lost}" if lost else "")
            )
        record = await self._step(
            record.shard,
            partial(
                steps.record_leader,
                shard=record.shard,
                term=term,
                leader=leader,
                incarnations={name: answers[name].incarnation for name in heads},
            ),
        )
        follower_names = [name for name in record.ensemble if name != leader]
        followers = [self._address(name) for name in follower_names]
        # The leader readmits, as learners, followers that answer it with
        # another incarnation than recorded.
        incarnations = {
            self._address(name).internal: value
            for name in follower_names
            if (value := record.incarnation_of(name)) is not None
        }
        try:
            await self.pods.become_leader(
                self._address(leader), record.shard, term, followers, self._epoch, incarnations
            )
        except grpc.aio.AioRpcError as error:
            raise ActionFailed(
                f"shard {record.shard}: BecomeLeader({term}) on {leader}: {_brief(error)}"
            ) from None
        duration_ms = self.wall_ms() - started_ms
        election = ElectionRecord(
            namespace=record.namespace,
            shard=record.shard,
            term=term,
            leader=leader,
            reason=action.reason,
            started_ms=started_ms,
            duration_ms=duration_ms,
        )
        await self._steady(record.shard, term, leader, election, action.preferred == leader)
        log.info(
            "shard %d: %s leads term %d (reason: %s; heads %s; %d ms)",
            record.shard,
            leader,
            term,
            action.reason,
            {name: f"{t}:{o}" for name, (t, o) in sorted(heads.items())},
            duration_ms,
        )
        self.push_assignments()
        await self.observer.refresh(voters)
        if action.preferred is not None and leader != action.preferred:
            # The request stays; failing the action makes the next try wait
            # (backing off), rather than electing again at once under load.
            raise ActionFailed(
                f"shard {record.shard}: could not move the leader to {action.preferred} "
                "now (its log is behind); retrying later"
            )

    async def _fence(
        self, record: ShardRecord, term: int, namespace: NamespaceSpec | None
    ) -> dict[str, Fenced]:
        """NewTerm to every voter at once; their answers. Once a majority has
        answered, stragglers (a hung pod answers only when its RPC times out) get
        `straggler_grace_s` more, then the election goes on without them."""
        calls = {
            asyncio.ensure_future(
                self.pods.new_term(
                    self._address(name).internal, record.shard, term, namespace, self._epoch
                )
            ): name
            for name in record.voters
        }
        heads: dict[str, Fenced] = {}
        fenced: ControllerFenced | None = None
        pending = set(calls)
        deadline: float | None = None
        loop = asyncio.get_running_loop()
        try:
            while pending:
                timeout = None if deadline is None else max(0.0, deadline - loop.time())
                done, pending = await asyncio.wait(
                    pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    break  # the grace ran out
                # In the members' order, not the set's (which follows memory
                # addresses): the same answers always make the same history.
                for call in [call for call in calls if call in done]:
                    name = calls[call]
                    error = call.exception()
                    if error is None:
                        heads[name] = call.result()
                    elif isinstance(error, ControllerFenced):
                        fenced = error
                    else:
                        log.info(
                            "shard %d: %s did not answer NewTerm(%d): %s",
                            record.shard,
                            name,
                            term,
                            _brief(error),
                        )
                if fenced is not None:
                    raise fenced
                if deadline is None and len(heads) >= majority(len(record.voters)):
                    deadline = loop.time() + self.straggler_grace_s
        finally:
            unanswered = [call for call in calls if call in pending]
            for call in unanswered:
                call.cancel()
            await asyncio.gather(*unanswered, return_exceptions=True)
        return heads

    async def _steady(
        self,
        shard: int,
        term: int,
        leader: str,
        election: ElectionRecord | None,
        move_done: bool = False,
    ) -> None:
        await self._step(
            shard,
            partial(
                steps.record_steady,
                shard=shard,
                term=term,
                leader=leader,
                election=election,
                move_done=move_done,
            ),
        )

    async def _confirm(self, action: ConfirmLeader) -> None:
        record = self._record(action.shard)
        if record.leader is None:
            raise ActionFailed(f"shard {record.shard}: no leader to confirm")
        await self._steady(action.shard, record.term, record.leader, None)
        log.info(
            "shard %d: confirmed %s as leader of term %d", record.shard, record.leader, record.term
        )
        self.push_assignments()

    # -- ensemble changes ----------------------------------------------------------------

    def _leader_address(self, record: ShardRecord) -> str:
        if record.leader is None or record.state is not ShardState.STEADY:
            raise ActionFailed(f"shard {record.shard} has no steady leader")
        return self._address(record.leader).internal

    async def _add_member(
        self, record: ShardRecord, name: str, namespace: NamespaceSpec, *, fence: bool = True
    ) -> None:
        """Create (or fence) the member's replica at the shard's term, then have
        the leader send to it. A member that is down is only given to the leader
        (which keeps trying it); its replica is fenced once it is back. The
        caller has recorded (or checked) the member first."""
        address = self._address(name)
        if fence:
            try:
                fenced = await self.pods.new_term(
                    address.internal, record.shard, record.term, namespace, self._epoch
                )
            except grpc.aio.AioRpcError as error:
                # Already following this term's leader: nothing to fence.
                if error.code() != grpc.StatusCode.FAILED_PRECONDITION:
                    raise ActionFailed(
                        f"shard {record.shard}: NewTerm on {name}: {_brief(error)}"
                    ) from None
            else:
                await self._record_new_member(record.shard, name, fenced.incarnation)
        await self.pods.add_follower(
            self._leader_address(record), record.shard, record.term, address, self._epoch
        )

    async def _record_new_member(self, shard: int, name: str, incarnation: int) -> None:
        """Record the incarnation a new member's data comes with (steps.py says
        when a recorded one is kept)."""
        await self._step(
            shard,
            partial(steps.record_new_member_data, shard=shard, name=name, incarnation=incarnation),
        )

    async def _change(self, action: ChangeEnsemble) -> None:
        record = self._record(action.shard)
        namespace = self._namespace(record)
        self._leader_address(record)
        if action.add is not None:
            record = await self._step(
                record.shard,
                partial(steps.add_member, shard=record.shard, term=record.term, name=action.add),
            )
            await self._add_member(record, action.add, namespace)
            touched = [action.add]
        else:
            assert action.remove is not None
            record = await self._step(
                record.shard,
                partial(
                    steps.start_removal, shard=record.shard, term=record.term, name=action.remove
                ),
            )
            await self.pods.remove_follower(
                self._leader_address(record),
                record.shard,
                record.term,
                self._address(action.remove).internal,
                self._epoch,
            )
            await self._step(
                record.shard,
                partial(
                    steps.finish_removal,
                    shard=record.shard,
                    term=record.term,
                    names=(action.remove,),
                ),
            )
            touched = [action.remove]
        log.info(
            "shard %d: %s %s (%s)",
            record.shard,
            "added" if action.add else "removed",
            action.add or action.remove,
            action.reason,
        )
        await self.observer.refresh([*touched, record.leader or ""])

    async def _finish(self, action: FinishEnsembleChange) -> None:
        record = self._record(action.shard)
        namespace = self._namespace(record)
        leader_address = self._leader_address(record)
        assert record.leader is not None
        leader = record.leader
        report = await self.pods.replica_status(leader_address, record.shard)
        followers = {f.internal_address for f in report.followers}
        # Removals first: they are recorded already and need no member alive.
        failures = []
        leaving = record.leaving
        if leaving:
            record = await self._step(
                record.shard,
                partial(steps.require_leaving, shard=record.shard, term=record.term, names=leaving),
            )
            try:
                for name in leaving:
                    await self.pods.remove_follower(
                        leader_address,
                        record.shard,
                        record.term,
                        self._address(name).internal,
                        self._epoch,
                    )
            except grpc.aio.AioRpcError as error:
                if error.code() != grpc.StatusCode.FAILED_PRECONDITION:
                    raise
                # The leader keeps a leaving member until the rest hold what
                # was committed with it (MembersBehind); a member to (re)create
                # below, one that lost its replica, is among the rest, so the
                # additions go on and the removal is finished next time.
                failures.append(f"removing {', '.join(leaving)}: {error.details()}")
            else:
                record = await self._step(
                    record.shard,
                    partial(
                        steps.finish_removal, shard=record.shard, term=record.term, names=leaving
                    ),
                )
                log.info("shard %d: finished removing %s", record.shard, ", ".join(leaving))
        views = self.observer.view().nodes
        for name in record.ensemble:
            if name == record.leader:
                continue
            view = views.get(name)
            alive = view is not None and view.alive
            missing_here = (
                alive
                and view is not None
                and view.replicas is not None
                and record.shard not in view.replicas
            )
            if self._address(name).internal not in followers or missing_here:
                try:
                    checked = await self._step(
                        record.shard,
                        partial(
                            steps.require_member,
                            shard=record.shard,
                            term=record.term,
                            leader=leader,
                            name=name,
                        ),
                    )
                    await self._add_member(checked, name, namespace, fence=alive)
                except (ActionFailed, grpc.aio.AioRpcError) as error:
                    failures.append(f"{name}: {error}")
                    continue
                log.info("shard %d: (re)added member %s", record.shard, name)
        # Members the leader caught up with another incarnation of their data
        # than recorded (re-created after a wipe) hold what they are recorded to
        # hold again: record it, so they count in elections again.
        caught_up = incarnations_to_record(record, report, self._internal_address)
        if caught_up:
            await self._step(
                record.shard,
                partial(steps.record_caught_up_data, shard=record.shard, caught_up=caught_up),
            )
            log.info(
                "shard %d: recorded the data of %s as caught up (incarnations %s)",
                record.shard,
                ", ".join(sorted(caught_up)),
                {name: f"{value:#x}" for name, value in sorted(caught_up.items())},
            )
        # Learners the leader counts now, and its term's first commit:
        # recorded, so that an election after its death knows them too,
        # whoever plans it.
        voting = learners_voting(record, report, self._internal_address)
        committed = commit_to_record(record, report, self._internal_address)
        if voting or committed:
            await self._write_voting(record, leader, voting, committed)
        await self.observer.refresh(list(record.voters))
        if failures:
            raise ActionFailed(f"shard {record.shard}: unfinished: {'; '.join(failures)}")

    async def _record_voting(self, action: RecordVoting) -> None:
        """Record the learners named that the leader counts as voters now, and
        its term's first commit if asked, judged from its report asked for
        here (the planner's may be stale: one of a learner removed and added
        again since would clear it while it still catches up). record_voting
        changes nothing once another leader is chosen."""
        record = self._record(action.shard)
        leader_address = self._leader_address(record)
        assert record.leader is not None
        report = await self.pods.replica_status(leader_address, record.shard)
        voting = learners_voting(record, report, self._internal_address)
        voting &= set(action.names)
        committed = action.term_committed and commit_to_record(
            record, report, self._internal_address
        )
        if not voting and not committed:
            await self.observer.refresh([record.leader])
            raise ActionFailed(f"shard {record.shard}: the leader's report shows nothing new")
        await self._write_voting(record, record.leader, voting, committed)

    async def _write_voting(
        self, record: ShardRecord, leader: str, voting: set[str], committed: bool
    ) -> None:
        """Record the learners the leader of the record's term counts now,
        and whether its term committed."""
        await self._step(
            record.shard,
            partial(
                steps.record_voting,
                shard=record.shard,
                term=record.term,
                leader=leader,
                names=sorted(voting),
                term_committed=committed,
            ),
        )
        if voting:
            log.info("shard %d: %s voting now", record.shard, ", ".join(sorted(voting)))
        if committed:
            log.info("shard %d: term %d has committed", record.shard, record.term)

    async def _delete(self, action: DeleteReplica) -> None:
        await self._step(
            action.shard, partial(steps.require_outside, shard=action.shard, node=action.node)
        )
        await self.pods.delete_shard(
            self._address(action.node).internal, action.shard, action.term, self._epoch
        )
        log.info("shard %d: deleted the replica left on %s", action.shard, action.node)
        await self.observer.refresh([action.node])

    async def _drop_move(self, action: DropLeaderMove) -> None:
        def change(status: ClusterStatus) -> ClusterStatus:
            moves = tuple(m for m in status.leader_moves if m.shard != action.shard)
            return replace(status, leader_moves=moves)

        await self.keeper.update_status(change)
        log.info(
            "shard %d: leader move to %s dropped: %s", action.shard, action.node, action.reason
        )


def _brief(error: BaseException) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return repr(error)
