"""A simulated storage replica of the shard: the real ShardCore (the replica's
roles, terms, commit, apply limit, takeover, timestamps and backpressure, as
the storage pod's shard.py uses them) driven by the rules the runtime follows,
over a simulated WAL and KV.

The rules (each one is what keeps an invariant in checkers.py true):
- Persist, then answer: a term the core says changed (fence, follow) is durable
  before the reply; so are truncation and snapshot installs.
- NewTerm syncs the WAL before answering its head, and so does Truncate (see
  RuntimeRules): the controller elects on that head, the leader counts it as an
  acknowledgement.
- Acknowledgements and commit offsets only ever cover durable (synced) entries:
  a follower acks `synced_offset`; ShardCore decides how far to apply (its
  apply limit: committed and durable) and what a follower's commit offset is
  (what its leader said, as far as it holds it durably).
- Entries are applied in groups, each written to the KV with its commit offset
  in one batch; the KV's commit offset is the applied offset.
- A restart comes back FENCED at the persisted term, with the synced log and the
  KV (commit offset = applied offset), and follows no stream until a leader's
  Truncate.
- A follower acts on one stream at a time: the newest Truncate it accepted.
  Entries that do not continue its log end the stream (StreamBroken).
- A log is trimmed only before an offset the KV has applied.
- A wipe (a lost disk) loses the log, the KV and the term; the replica comes
  back empty with a new incarnation of its data, which every answer reports.
- Controller epochs (the real controller's calls): the pod keeps the highest
  epoch it has seen on its disk and refuses a call that changes it with an older
  one (cairn.storage.core.controller_epoch.admit), before anything else, as the
  storage pod's Coordination service does.
- A pod without the shard's replica (a spare node, a wiped disk, a deleted
  replica) answers calls with "not found", except a NewTerm that creates it.
"""

from __future__ import annotations

from dataclasses import dataclass

from cairn.common.errors import InvalidTerm, StaleControllerEpoch
from cairn.common.heartbeat import FollowerReport, ReplicaReport
from cairn.storage.apply_step import ApplyStep, WaitForCommit, WroteLeaderChanges
from cairn.storage.config import Limits, ReplicationSettings
from cairn.storage.core.controller_epoch import admit
from cairn.storage.core.events import NewTerm, Truncate
from cairn.storage.core.ready import Ready, SteppedDown
from cairn.storage.core.replication.replica import Member, Role
from cairn.storage.core.replication.terms import TermHistory
from cairn.storage.core.shard_core import ShardCore
from simulation import messages as m
from simulation.context import Env
from simulation.leading import LeaderRuntime
from simulation.network import Envelope
from simulation.storage import DigestKv, SimLog

# Calls that change a pod: they carry the controller's epoch.
CHANGING = (m.NewTerm, m.BecomeLeader, m.AddFollower, m.RemoveFollower, m.DeleteShard)
ROLE_NAMES = {Role.FENCED: "fenced", Role.FOLLOWER: "follower", Role.LEADER: "leader"}


# The write buffer's bound in bytes (the entry bound is RuntimeRules.max_pending_entries).
MAX_PENDING_BYTES = 1 << 20
# The caches over the KV, small: the simulation's few keys come and go from them.
MAX_READ_CACHE_ENTRIES = 4
MAX_READ_CACHE_BYTES = 256
MAX_CACHED_HEADERS = 3
# Folding (ShardCore.folds): from 1 to this many uncommitted entries, and up to
# this many operations a fold.
FOLD_AFTER_AT_MOST = 3
MAX_FOLD_OPERATIONS = 6


def member_of(name: str) -> Member:
    """A node's member identity: its name is its internal address."""
    return Member(public_address=f"{name}:6648", internal_address=name)


@dataclass(slots=True)
class FollowedStream:
    term: int
    session: int
    leader: str
    broken: bool = False
    snapshot_installed: bool = False
    # The latest leader time received on it, echoed in every answer.
    leader_time_ms: int = -1


class SimReplica:
    def __init__(self, name: str, env: Env, absent: bool = False) -> None:
        self.name = name
        self.member = member_of(name)
        self.env = env
        # Durable state.
        self.persisted_term = 0
        self.log = SimLog()
        self.kv = DigestKv()
        self.data_incarnation = env.new_data_incarnation()
        # Its disk was lost: no replica of the shard is on it until the
        # controller's NewTerm creates one (a real pod answers everything else
        # with "no such shard"). Until then it takes no leader's Truncate or
        # entries, nor BecomeLeader: it would take them in whatever term it came
        # back with, for a stale leader, or lead a term it answered before the
        # wipe with an empty log.
        self.absent = absent
        # The highest controller epoch seen (durable, on the data disk).
        self.highest_epoch = 0
        # Volatile state (gone on a crash).
        self.incarnation = 0
        self.core: ShardCore[int] | None = None
        self.apply_step: ApplyStep[int] | None = None
        self.leading: LeaderRuntime | None = None
        self.stream: FollowedStream | None = None
        # Set to crash once the message being handled is done (the reply is out):
        # the window between answering and acting on the answer.
        self.crash_requested = False
        self.start()

    # -- life cycle --------------------------------------------------------------------

    @property
    def up(self) -> bool:
        return self.core is not None

    def start(self) -> None:
        self.incarnation += 1
        self.core, self.apply_step = self._recovered()
        self.leading = None
        self.stream = None
        self.crash_requested = False
        self.env.net.up(self.name, self.incarnation)

    def _recovered(self) -> tuple[ShardCore[int], ApplyStep[int]]:
        """The core of a replica (re)started over what its disk holds: recovered
        at the persisted term, everything applied committed; and its apply step
        over its KV. Its apply groups' and folds' bounds are drawn at each start
        (up to RuntimeRules.max_apply_group and MAX_FOLD_OPERATIONS): groups and
        folds of every size meet every history."""
        rules, rng = self.env.rules, self.env.rng
        limits = Limits(
            fold_writes_after_uncommitted_entries=rng.randint(1, FOLD_AFTER_AT_MOST),
            max_operations_per_fold=rng.randint(1, MAX_FOLD_OPERATIONS),
            max_pending_entries_per_shard=rules.max_pending_entries,
            max_pending_bytes_per_shard=MAX_PENDING_BYTES,
            max_entries_per_apply_batch=self.env.rng.randint(1, rules.max_apply_group),
            max_operations_per_apply_batch=self.env.rng.randint(1, rules.max_apply_group),
            max_read_cache_entries_per_shard=MAX_READ_CACHE_ENTRIES,
            max_read_cache_bytes_per_shard=MAX_READ_CACHE_BYTES,
            max_cached_headers_per_shard=MAX_CACHED_HEADERS,
        )
        core: ShardCore[int] = ShardCore(
            shard_id=0,
            term=self.persisted_term,
            log=self.log.history(),
            commit_offset=self.kv.applied_offset,
            applied_offset=self.kv.applied_offset,
            limits=limits.pipeline(),
        )
        return core, ApplyStep(core, self.kv, self.env.shard_rules, limits, ReplicationSettings())

    def crash(self) -> None:
        if self.log.synced_offset < self.log.last_offset:
            self.env.count("crashes losing an unsynced tail")
        self.log.crash()
        self.core = None
        self.leading = None
        self.stream = None
        self.env.net.down(self.name)

    def wipe(self) -> None:
        """The disk is lost: down, and created empty when it starts again."""
        if self.up:
            self.crash()
        self.persisted_term = 0
        self.log = SimLog()
        self.kv = DigestKv()
        self.data_incarnation = self.env.new_data_incarnation()
        self.absent = True
        self.highest_epoch = 0

    def delete(self) -> None:
        """DeleteShard: the replica and its data are gone; the pod stays up."""
        self.persisted_term = 0
        self.log = SimLog()
        self.kv = DigestKv()
        self.data_incarnation = self.env.new_data_incarnation()
        self.absent = True
        self.core, self.apply_step = self._recovered()
        self.leading = None
        self.stream = None

    def status_reports(self) -> tuple[ReplicaReport, ...]:
        """The shard's replica as GetStatus reports it (none if the pod lacks it)."""
        core = self.core
        if core is None or self.absent:
            return ()
        followers: tuple[FollowerReport, ...] = ()
        leading = self.leading
        if leading is not None:
            followers = tuple(
                FollowerReport(
                    internal_address=name,
                    acked_offset=progress.acked_offset,
                    voting=leading.core.is_voting(name),
                    state=progress.phase.value,
                    incarnation=progress.incarnation or 0,
                )
                for name, progress in leading.core.followers.items()
            )
        report = ReplicaReport(
            shard=0,
            namespace="default",
            role=ROLE_NAMES[core.role],
            term=core.term,
            head_term=core.head.term,
            head_offset=core.head.offset,
            commit_offset=self.commit_offset,
            durable_offset=self.log.synced_offset,
            applied_offset=self.kv.applied_offset,
            leader_internal_address=core.leader.internal_address if core.leader else "",
            followers=followers,
            incarnation=self.data_incarnation,
            term_start_offset=leading.core.quorum.term_start_offset if leading else None,
            commit_term=core.log.term_at(self.commit_offset),
        )
        return (report,)

    def sync(self) -> None:
        core = self.live_core()
        before = self.log.synced_offset
        self.log.sync()
        stream = self.stream
        if stream is not None and not stream.broken and core.role is Role.FOLLOWER:
            core.on_follower_durable(self.log.synced_offset)
        if stream is not None and not stream.broken and self.log.synced_offset > before:
            self._ack(stream)

    def trim(self, before_offset: int) -> None:
        """Forget log entries before `before_offset` (at most the applied offset)."""
        assert before_offset <= self.kv.applied_offset
        if not self.log.first_offset < before_offset <= self.log.last_offset:
            return
        self.log.trim_before(before_offset)
        self.live_core().log.trim_before(before_offset)

    @property
    def commit_offset(self) -> int:
        """The highest offset this replica knows committed."""
        core = self.live_core()
        if self.leading is not None:
            return max(core.commit_offset, self.leading.core.commit_offset)
        return core.commit_offset

    # -- each step ---------------------------------------------------------------------

    def pump(self) -> None:
        """What the runtime does on its own: apply what is committed and durable;
        as leader, stream to followers and notice dead streams."""
        core = self.live_core()
        if self.leading is not None:
            self.leading.pump()
            core.on_commit(self.leading.core.commit_offset)
            self.leading.commit_step()
        self._apply()

    def _apply(self) -> None:
        """The storage pod's apply step (apply_step.py) over the simulated KV."""
        step, env = self.live_apply_step(), self.env
        leading = self.leading
        while step.has_more(self.log.synced_offset):
            first = self.kv.applied_offset + 1
            outcome = step.next(
                self.log.synced_offset,
                self.log.slice,
                leading is not None,
                leading is not None and bool(leading.core.followers),
            )
            if isinstance(outcome, WaitForCommit):
                env.count("leader changes waiting for their commit")
                break
            if isinstance(outcome, WroteLeaderChanges):
                env.count("apply groups written from the leader's changes")
                for entry in self.log.slice(first, outcome.last_offset):
                    env.observer.saw_committed(entry, self.name)
                continue
            env.count("apply groups")
            for pending, result in zip(outcome.group, outcome.results, strict=True):
                env.observer.saw_committed(pending.entry, self.name)
                if leading is not None:
                    leading.applied(pending.entry, result)

    # -- messages ----------------------------------------------------------------------

    def receive(self, envelope: Envelope) -> None:
        body, src = envelope.body, envelope.src
        if isinstance(body, m.PodStatus):
            self.env.send(self.name, src, m.PodStatusResponse(body.call, self.status_reports()))
            return
        if isinstance(body, (*CHANGING, m.PushAssignments)):
            try:
                self.highest_epoch = admit(self.highest_epoch, body.epoch)
            except StaleControllerEpoch as error:
                self.env.count("calls of stale controllers refused")
                self.env.send(
                    self.name,
                    src,
                    m.Refused(
                        getattr(body, "term", 0),
                        type(body).__name__,
                        str(error),
                        body.call,
                        epoch_seen=self.highest_epoch,
                    ),
                )
                return
        if isinstance(body, m.PushAssignments):
            self.env.send(self.name, src, m.Done(body.call))
            return
        if self.absent:
            if not isinstance(body, m.NewTerm) or not body.create:
                self.env.count("messages to a wiped replica not yet created")
                call = getattr(body, "call", 0)
                if call:
                    refusal = m.Refused(0, type(body).__name__, "no such shard", call, "NOT_FOUND")
                    self.env.send(self.name, src, refusal)
                return
            self.absent = False
        if isinstance(body, m.DeleteShard):
            self._delete_shard(src, body)
        elif isinstance(body, m.NewTerm):
            self._new_term(src, body)
        elif isinstance(body, m.BecomeLeader):
            self._become_leader(src, body)
        elif isinstance(body, m.Truncate):
            self._truncate(src, body)
        elif isinstance(body, m.Replicate):
            self._replicate(src, body)
        elif isinstance(body, m.SendSnapshot):
            self._install_snapshot(src, body)
        elif self.leading is not None:
            self.leading.receive(src, body)
        elif isinstance(body, m.ClientRead):
            self.env.count("reads refused (not leading)")
        elif isinstance(body, m.AddFollower | m.RemoveFollower):
            refusal = m.Refused(body.term, "ensemble change", "not leader", body.call)
            self.env.send(self.name, src, refusal)

    def _delete_shard(self, src: str, request: m.DeleteShard) -> None:
        core = self.live_core()
        try:
            core.check_not_older(request.term)
        except InvalidTerm as error:
            refusal = m.Refused(request.term, "DeleteShard", str(error), request.call)
            self.env.send(self.name, src, refusal)
            return
        self.env.log(f"{self.name} deletes its replica", "replicas deleted")
        self.delete()
        self.env.send(self.name, src, m.Done(request.call))

    # -- coordination ------------------------------------------------------------------

    def _new_term(self, src: str, request: m.NewTerm) -> None:
        core = self.live_core()
        try:
            ready = core.step(NewTerm(request.term))
        except InvalidTerm as error:
            refusal = m.Refused(request.term, "NewTerm", str(error), request.call)
            self.env.send(self.name, src, refusal)
            return
        self._carry_out(ready, "fenced")
        if self.env.rules.end_streams_on_new_term:
            self.stream = None
        self.env.log(f"{self.name} fenced at {request.term}, head {core.head}")
        self.env.send(
            self.name,
            src,
            m.NewTermResponse(
                request.term, core.head, core.commit_offset, self.data_incarnation, request.call
            ),
        )
        self._maybe_crash_after_answering("crashes after answering NewTerm")

    def _become_leader(self, src: str, request: m.BecomeLeader) -> None:
        core = self.live_core()
        try:
            term_start = core.become_leader(request.term, self.member)
        except InvalidTerm as error:
            refusal = m.Refused(request.term, "BecomeLeader", str(error), request.call)
            self.env.send(self.name, src, refusal)
            return
        self.live_apply_step().on_leading()
        self.leading = LeaderRuntime(
            self, request.term, request.followers, term_start, dict(request.incarnations)
        )
        self.env.log(f"{self.name} leads term {request.term} from {term_start}")
        answer = m.BecomeLeaderResponse(request.term, term_start, request.call)
        self.env.send(self.name, src, answer)

    def _carry_out(self, ready: Ready[int], why: str) -> None:
        """What the core decided for an event (ready.py), in its order, as the
        storage pod's driver does it (ShardReplica._carry_out)."""
        core = self.live_core()
        if ready.persist_term:
            self.persisted_term = core.term
        if ready.stepped_down is not None:
            self._stop_leading(ready.stepped_down, why)
        if ready.new_stream:
            self.live_apply_step().on_new_stream()
        if ready.cut_log_after is not None:
            keep = ready.cut_log_after
            self.env.log(
                f"{self.name} truncates after {keep} (log ends {self.log.last_offset})",
                "logs truncated",
            )
            self.log.truncate_after(keep)
            core.on_log_cut(keep)
        if ready.sync_log:
            self.log.sync()

    def _stop_leading(self, stepped_down: SteppedDown[int], why: str) -> None:
        assert self.leading is not None
        self.env.log(f"{self.name} stops leading term {self.leading.term}: {why}")
        self.leading = None
        if stepped_down.not_logged is not None:
            # Never logged: not accepted, safe for their clients to send again.
            self.env.count("folds dropped (leadership changed)")
        self.live_apply_step().on_stepped_down()

    # -- follower side -----------------------------------------------------------------

    def _truncate(self, src: str, request: m.Truncate) -> None:
        core = self.live_core()
        stream = self.stream
        if (
            self.env.rules.ignore_stale_truncates
            and stream is not None
            and (stream.term, stream.leader) == (request.term, src)
            and request.session <= stream.session
        ):
            self.env.count("stale truncates ignored")
            return  # a late or repeated Truncate of a stream already replaced
        if request.leader_terms:
            leader_log = TermHistory(request.leader_terms, request.leader_head.offset)
        else:
            leader_log = TermHistory(base=request.leader_head)
        try:
            ready = core.step(Truncate(request.term, request.leader, leader_log))
        except InvalidTerm as error:
            self.env.send(self.name, src, m.StreamBroken(request.session, str(error)))
            return
        self._carry_out(ready, "follows another leader")
        self.stream = FollowedStream(request.term, request.session, src)
        self.env.send(
            self.name,
            src,
            m.TruncateResponse(
                request.session,
                core.head,
                core.commit_offset,
                core.log.first_offset,
                self.data_incarnation,
            ),
        )
        self._maybe_crash_after_answering("crashes after answering Truncate")

    def _maybe_crash_after_answering(self, what: str) -> None:
        if self.env.buggify(what, self.env.rules.crash_after_answer_probability):
            self.crash_requested = True

    def _current_stream(self, src: str, session: int) -> FollowedStream | None:
        stream = self.stream
        if stream is None or stream.broken or stream.session != session or stream.leader != src:
            return None
        return stream

    def _replicate(self, src: str, request: m.Replicate) -> None:
        core = self.live_core()
        stream = self._current_stream(src, request.session)
        if stream is None:
            self.env.count("messages of ended streams ignored")
            return
        try:
            if request.entries:
                core.check_entries(request.term, request.entries[0].offset)
            else:
                core.check_entries(request.term, core.log.last_offset + 1)
        except InvalidTerm as error:
            self.env.count("entries not continuing the log")
            stream.broken = True
            self.env.send(self.name, src, m.StreamBroken(request.session, str(error)))
            return
        # The changes first, as the storage pod takes them (rpc/replication.py).
        self.live_apply_step().take_leader_changes(request.term, request.applied_changes)
        for entry in request.entries:
            self.log.append(entry)
        core.on_replicated(request.entries, request.commit_offset, self._durable())
        stream.leader_time_ms = max(stream.leader_time_ms, request.leader_time_ms)
        self._ack(stream)

    def _ack(self, stream: FollowedStream) -> None:
        try:
            self.live_core().check_following(stream.term)
        except InvalidTerm:
            if self.env.rules.end_streams_on_new_term:
                return  # the stream ended with the term (the runtime aborts it)
        # (A broken runtime goes on: offsets of whatever the log now holds,
        # reported as acknowledgements of the stream's term.)
        self.env.send(
            self.name,
            stream.leader,
            m.ReplicateResponse(
                stream.session,
                self._durable(),
                self.kv.applied_offset,
                stream.term,
                stream.leader_time_ms,
                self.data_incarnation,
            ),
        )

    def _durable(self) -> int:
        if self.env.rules.ack_only_durable:
            return self.log.synced_offset
        return self.log.last_offset

    def _install_snapshot(self, src: str, request: m.SendSnapshot) -> None:
        core = self.live_core()
        stream = self._current_stream(src, request.session)
        if stream is None or stream.snapshot_installed:
            return
        if core.role is not Role.FOLLOWER or core.term != request.term:
            return
        base = request.last_included
        # The leader sends one only when our log ends before its first entry.
        assert base.offset > self.log.last_offset, (base, self.log.last_offset)
        step = self.live_apply_step()
        step.on_storage_replaced()
        self.kv = DigestKv.from_dump(request.records)
        step.on_reopened(self.kv)
        assert self.kv.applied_offset == base.offset, (self.kv.applied_offset, base)
        self.log.reset(base)
        core.on_snapshot_installed(base)
        stream.snapshot_installed = True
        self.env.log(f"{self.name} installed a snapshot at {base}", "snapshots installed")
        self.env.send(self.name, src, m.SnapshotResponse(request.session, base))

    def live_core(self) -> ShardCore[int]:
        assert self.core is not None, f"{self.name} is down"
        return self.core

    def live_apply_step(self) -> ApplyStep[int]:
        assert self.core is not None and self.apply_step is not None, f"{self.name} is down"
        return self.apply_step
