"""The leader's runtime around the real LeaderCore and LeaderLease: its term-start
entry, one stream session per follower (Truncate, then entries or a snapshot),
client writes and answers once applied, and reads answered under the lease once
it has taken over.

Each follower's stream: Truncate opens a session; the answer starts streaming
(or a snapshot); any sign that the stream is gone (StreamBroken, no answer for
`stream_timeout_steps`, our log trimmed past what the follower needs) ends it
with `on_disconnected` and opens a new one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cairn.common.errors import InvalidTerm
from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import storage_internal_pb2 as internal_pb
from cairn.storage.core import reads
from cairn.storage.core.apply import CloseOutcome
from cairn.storage.core.entries import (
    CLOSE_SESSION,
    CREATE_SESSION,
    TERM_START,
    LogEntry,
    encode_client_write,
    encode_entry,
)
from cairn.storage.core.fastpath import has_plain_puts
from cairn.storage.core.folding import WriteFold, responses
from cairn.storage.core.pending import decoded
from cairn.storage.core.replication.applied_changes import commit_for_followers
from cairn.storage.core.replication.leader import FollowerPhase, NotAFollower
from cairn.storage.core.replication.lease import LeaderLease, takeover_wait_ms
from cairn.storage.core.replication.replica import Member
from cairn.storage.core.replication.terms import NO_OFFSET, EntryId
from cairn.storage.core.sessions import SessionTracker, stored_sessions
from simulation import messages as m
from simulation.clients import AckedWrite
from simulation.context import STEP_MS
from simulation.observer import AnsweredRead, LeaderLog

if TYPE_CHECKING:
    from simulation.replica import SimReplica


# Bytes of applied changes in one Replicate message, at most (one group goes alone).
MAX_CHANGES_BYTES = 1 << 16


@dataclass(slots=True)
class Session:
    session: int
    opened_step: int
    last_heard_step: int
    last_sent_step: int = -1
    commit_sent: int = NO_OFFSET
    # The last offset of the applied changes this session sent.
    changes_sent_through: int = NO_OFFSET


class LeaderRuntime:
    def __init__(
        self,
        replica: SimReplica,
        term: int,
        followers: Iterable[Member],
        term_start: EntryId,
        incarnations: Mapping[str, int] | None = None,
    ) -> None:
        self.replica = replica
        self.term = term
        self.sessions: dict[str, Session] = {}
        # Every session this leadership opened: acks of an earlier stream of this
        # term still count (durable entries of this term are never lost).
        self.own_sessions: set[int] = set()
        # offset -> the client writes waiting for their answers (several when
        # the entry is a fold), in the entry's order
        self.pending: dict[int, list[int]] = {}
        # The commit offset when the fold was last sealed: a commit step logs it.
        self.commit_seen = NO_OFFSET
        # Sessions (the storage pod's rules, shard.py): the leader's tracker,
        # re-armed with a full timeout for every stored session once it has taken
        # over; keep-alives only while serving (taken over, under the lease);
        # expiry a CloseSession entry.
        self.client_sessions = SessionTracker()
        self.sessions_rearmed = False
        # offset -> (client, request id) of a CreateSession waiting to be applied
        self.pending_sessions: dict[int, tuple[str, int, int]] = {}
        # offset -> the session a CloseSession entry closes
        self.closing: dict[int, int] = {}
        # follower -> (controller, call, step to give up) of a RemoveFollower
        # waiting for the other members to catch up
        self.removals: dict[str, tuple[str, int, int]] = {}
        env, log, core = replica.env, replica.log, replica.live_core()
        env.observer.took_office(
            LeaderLog(
                term,
                replica.name,
                replica.incarnation,
                env.now,
                log.base,
                tuple(log.entries),
                replica.kv.applied_offset,
            )
        )
        body = internal_pb.TermStartEntry(leader=replica.member.internal_address)
        self._append(encode_entry(TERM_START, body.SerializeToString()))
        assert log.last_offset == term_start.offset
        self.core = env.leader_core_class(
            term,
            replica.member,
            followers,
            commit_offset=core.commit_offset,
            term_start_offset=term_start.offset if env.rules.term_start_rule else NO_OFFSET,
            max_in_flight_entries=env.rules.max_in_flight_entries,
            incarnations=incarnations,
        )
        core.on_leading(term_start, self.core)
        core.on_local_durable(log.synced_offset)
        rules = env.rules
        self.lease = LeaderLease(replica.name, rules.lease_ms)
        wait_ms = takeover_wait_ms(rules.lease_ms, 0.0)
        waits = rules.takeover_waits_for_old_leases and bool(self.core.followers)
        self.serves_from_ms = env.now_ms + (wait_ms if waits else 0)
        for member in list(self.core.followers):
            self._connect(member)

    # -- clients -----------------------------------------------------------------------

    def taken_over(self) -> bool:
        """Its term's first entry applied, and any older leader's lease over
        (ShardCore decides, as for the storage pod)."""
        core = self.replica.live_core()
        core.takeover_wait_ms(self.replica.env.now_ms, self.serves_from_ms)
        return core.taken_over

    def client_write(self, request_id: int, request: bytes) -> None:
        env = self.replica.env
        if env.rules.takeover_waits_for_old_leases and not self.taken_over():
            env.count("writes refused (taking over)")
            return
        payload = encode_client_write(request)
        if not self._has_room(len(payload)):
            env.count("writes refused (backpressure)")
            return
        # As the storage pod's leader: plain writes fold while entries wait for
        # their commit (ShardCore.folds), the rest are logged at once, after the
        # fold collected so far.
        core = self.replica.live_core()
        parsed = pb.WriteRequest.FromString(request)
        if core.folds(parsed, has_plain_puts(request), bool(self.core.followers)):
            sealed = core.fold_in(request, parsed, request_id)
            if sealed is not None:
                self._log_fold(sealed)
            return
        offset = self._append(payload)
        self.pending[offset] = [request_id]

    def commit_step(self) -> None:
        """The commit offset moved: the writes folded meanwhile are logged now."""
        commit = self.replica.live_core().commit_offset
        if commit > self.commit_seen:
            self.commit_seen = commit
            self._seal_fold()

    def _seal_fold(self) -> None:
        fold = self.replica.live_core().seal_fold()
        if fold is not None:
            self._log_fold(fold)

    def _log_fold(self, fold: WriteFold[int]) -> None:
        _, payload, _ = fold.entry()
        offset = self._append_entry(payload)
        self.pending[offset] = list(fold.waiters)
        if len(fold.waiters) > 1:
            self.replica.env.count("folds logged")
            self.replica.env.count("writes folded", len(fold.waiters))

    def applied(self, entry: LogEntry, result: Any) -> None:
        created = self.pending_sessions.pop(entry.offset, None)
        if created is not None:
            client, request_id, timeout_ms = created
            env = self.replica.env
            self.client_sessions.open(entry.offset, timeout_ms, env.now_ms)
            env.observer.sessions_created.append((client, request_id, entry.offset, env.now))
            env.count("sessions created")
            return
        closed = self.closing.pop(entry.offset, None)
        if closed is not None:
            if result is CloseOutcome.MORE:
                self._close_session(closed)
            else:
                self.client_sessions.forget(closed)
            return
        waiting = self.pending.pop(entry.offset, None)
        if waiting is None:
            return
        assert entry.term == self.term
        env = self.replica.env
        for index, (request_id, response) in enumerate(
            zip(waiting, responses(result), strict=True)
        ):
            write = AckedWrite(
                self.term,
                entry.offset,
                entry.payload,
                response,
                request_id,
                self.replica.name,
                env.now,
                index,
            )
            env.observer.acknowledged(write)
            env.count("writes acknowledged")

    # -- sessions ----------------------------------------------------------------------

    def _serving(self) -> bool:
        """Taken over and under its lease (what reads and keep-alives wait for)."""
        env = self.replica.env
        quorum = self.core.quorum
        holds = self.lease.holds(quorum.voters, env.now_ms, quorum.majority)
        return self.taken_over() and (holds or not env.rules.reads_need_lease)

    def _rearm_sessions(self) -> None:
        if self.sessions_rearmed or not self.taken_over():
            return
        self.sessions_rearmed = True
        now_ms = self.replica.env.now_ms
        for session_id, state in stored_sessions(self.replica.kv):
            self.client_sessions.open(session_id, 0 if state.closing else state.timeout_ms, now_ms)

    def create_session(self, request: m.CreateSession) -> None:
        env = self.replica.env
        body = internal_pb.CreateSessionEntry(
            timeout_ms=request.timeout_ms, client_identity=request.client
        )
        payload = encode_entry(CREATE_SESSION, body.SerializeToString())
        if not self.taken_over() or not self._has_room(len(payload)):
            env.count("sessions refused (taking over or backpressure)")
            return
        offset = self._append(payload)
        self.pending_sessions[offset] = (request.client, request.request_id, request.timeout_ms)

    def keep_alive(self, request: m.KeepAlive) -> None:
        env = self.replica.env
        self._rearm_sessions()
        if not self._serving():
            env.count("keep-alives refused (taking over or no lease)")
            return
        if not self.client_sessions.heartbeat(request.session_id, env.now_ms):
            env.count("keep-alives of unknown sessions")
            return
        env.observer.keepalives.append(
            (request.client, request.session_id, request.sent_step, env.now)
        )

    def _expire_sessions(self) -> None:
        self._rearm_sessions()
        if not self.sessions_rearmed or not self._serving():
            return
        for session_id in self.client_sessions.expired(self.replica.env.now_ms):
            if self.client_sessions.start_closing(session_id):
                self.replica.env.log(
                    f"{self.replica.name}: session {session_id} expired", "sessions expired"
                )
                self._close_session(session_id)

    def _close_session(self, session_id: int) -> None:
        body = internal_pb.CloseSessionEntry(session_id=session_id, reason=internal_pb.EXPIRED)
        offset = self._append(encode_entry(CLOSE_SESSION, body.SerializeToString()))
        self.closing[offset] = session_id

    def client_read(self, read: m.ClientRead) -> None:
        replica, env = self.replica, self.replica.env
        quorum = self.core.quorum
        holds = self.lease.holds(quorum.voters, env.now_ms, quorum.majority)
        if not self.taken_over() or (env.rules.reads_need_lease and not holds):
            env.count("reads refused (taking over or no lease)")
            return
        env.count("reads answered")
        # An exact-key get, as the storage pod answers it: through the read cache.
        cache = replica.live_apply_step().read_cache
        key = KeyOrder.HIERARCHICAL.encode(read.key)
        hits = cache.lookups - cache.misses
        [answer] = cache.answers(replica.kv, [key])
        if cache.lookups - cache.misses > hits:
            env.count("reads answered from the read cache")
        [stored] = reads.read_answers(replica.kv, [key])
        env.observer.answered(
            AnsweredRead(
                read.read_id,
                read.reader,
                read.sent_step,
                env.now,
                replica.name,
                self.term,
                replica.kv.applied_offset,
                answer,
                stored,
            )
        )

    def _has_room(self, size: int) -> bool:
        """Backpressure (ShardCore.has_room): entries logged but not applied yet."""
        return self.replica.live_core().has_room(size)

    def _append(self, payload: bytes) -> int:
        """Log an entry after the fold collected so far (arrival order)."""
        self._seal_fold()
        return self._append_entry(payload)

    def _append_entry(self, payload: bytes) -> int:
        replica = self.replica
        core = replica.live_core()
        entry = core.next_entry(payload, replica.env.now_ms)
        replica.log.append(entry)
        # Its writer waits (the leader answers it once applied).
        core.on_logged(decoded(entry, waiter=entry.offset))
        return entry.offset

    # -- ensemble ----------------------------------------------------------------------

    def add_follower(self, member: Member) -> None:
        if member.internal_address not in self.core.followers:
            self.core.add_follower(member)
            self._connect(member.internal_address)

    def remove_follower(self, name: str) -> bool:
        """Whether `name` is gone; else it is leaving until the rest caught up."""
        self.core.remove_follower(name)
        if self.core.is_leaving(name):
            return False
        self._forget(name)
        return True

    def _forget(self, name: str) -> None:
        self.lease.forget(name)
        self.sessions.pop(name, None)

    def _finish_removals(self) -> None:
        """Answer the removals that finished, and call off those that waited
        too long (the runtime's `ReplicatingLeader.remove_follower`)."""
        env = self.replica.env
        for name, (src, call, deadline) in list(self.removals.items()):
            if not self.core.is_leaving(name):
                del self.removals[name]
                self._forget(name)
                env.log(f"{self.replica.name} ensemble now {sorted(self.core.followers)}")
                env.send(self.replica.name, src, m.EnsembleChangeResponse(self.term, name, call))
            elif env.now >= deadline:
                del self.removals[name]
                self.core.cancel_removal(name)
                reason = f"{name} still holds committed entries the rest lack"
                env.log(f"{self.replica.name} calls off the removal: {reason}")
                env.send(
                    self.replica.name, src, m.Refused(self.term, "ensemble change", reason, call)
                )

    # -- streams -----------------------------------------------------------------------

    def _connect(self, name: str) -> None:
        env = self.replica.env
        session = Session(env.net.new_session(), env.now, env.now)
        self.sessions[name] = session
        self.own_sessions.add(session.session)
        history = self.replica.live_core().log
        env.send(
            self.replica.name,
            name,
            m.Truncate(session.session, self.term, self.core.me, history.starts, history.head),
        )

    def _reconnect(self, name: str, why: str, count: str) -> None:
        self.replica.env.log(f"{self.replica.name} restarts the stream to {name}: {why}", count)
        self.core.on_disconnected(name)
        self._connect(name)

    def _session(self, src: str, session: int) -> Session | None:
        current = self.sessions.get(src)
        if current is None or current.session != session:
            return None
        current.last_heard_step = self.replica.env.now
        return current

    def receive(self, src: str, body: m.Body) -> None:
        if isinstance(body, m.ReplicateResponse):
            if body.session in self.own_sessions:
                self._session(src, body.session)
                try:
                    self.core.on_ack(
                        src,
                        body.term,
                        body.durable_offset,
                        body.applied_offset,
                        incarnation=body.incarnation or None,
                    )
                except InvalidTerm:
                    self.replica.env.count("acknowledgements of another term ignored")
                else:
                    self.lease.on_echo(src, body.leader_time_ms)
        elif isinstance(body, m.TruncateResponse | m.SnapshotResponse):
            try:
                if self._session(src, body.session) is not None:
                    self._answered(src, body)
            except NotAFollower:
                self.replica.env.count("answers of members no longer followed ignored")
        elif isinstance(body, m.StreamBroken):
            if self._session(src, body.session) is not None:
                self._reconnect(src, body.reason, "streams ended by the follower")
        elif isinstance(body, m.ClientWrite):
            self.client_write(body.request_id, body.request)
        elif isinstance(body, m.ClientRead):
            self.client_read(body)
        elif isinstance(body, m.CreateSession):
            self.create_session(body)
        elif isinstance(body, m.KeepAlive):
            self.keep_alive(body)
        elif isinstance(body, m.AddFollower | m.RemoveFollower):
            self._ensemble_change(src, body)
        elif isinstance(body, m.GetStatus) and body.term == self.term:
            quorum = self.core.quorum
            voters = tuple((name, quorum.acked.get(name, NO_OFFSET)) for name in quorum.voters)
            incarnations = tuple(
                (name, progress.incarnation)
                for name, progress in self.core.followers.items()
                if progress.incarnation is not None and self.core.is_voting(name)
            )
            status = m.StatusResponse(
                self.term, body.request_id, self.core.commit_offset, voters, incarnations
            )
            self.replica.env.send(self.replica.name, src, status)

    def _ensemble_change(self, src: str, body: m.AddFollower | m.RemoveFollower) -> None:
        env = self.replica.env
        if body.term != self.term:
            refusal = m.Refused(body.term, "ensemble change", "term", body.call)
            env.send(self.replica.name, src, refusal)
            return
        if isinstance(body, m.AddFollower):
            self.add_follower(body.follower)
            name = body.follower.internal_address
        else:
            if body.follower in self.removals:
                return  # asked again while waiting: the first call is answered
            if not self.remove_follower(body.follower):
                deadline = env.now + env.rules.removal_wait_steps
                self.removals[body.follower] = (src, body.call, deadline)
                env.log(f"{self.replica.name} keeps {body.follower} until the rest caught up")
                return
            name = body.follower
        env.log(f"{self.replica.name} ensemble now {sorted(self.core.followers)}")
        env.send(self.replica.name, src, m.EnsembleChangeResponse(self.term, name, body.call))

    def _answered(self, src: str, answer: m.TruncateResponse | m.SnapshotResponse) -> None:
        if isinstance(answer, m.TruncateResponse):
            self._truncated(src, answer)
        elif self.core.progress(src).phase is FollowerPhase.SNAPSHOT:
            self.core.on_snapshot_installed(src, answer.head)

    def _truncated(self, src: str, answer: m.TruncateResponse) -> None:
        if self.core.progress(src).phase is not FollowerPhase.CONNECTING:
            return
        log = self.replica.log
        first_available = log.last_offset + 1 if not log.entries else log.first_offset
        # It answered our term's Truncate, so it followed us when we sent it.
        self.lease.on_echo(src, self.sessions[src].opened_step * STEP_MS)
        phase = self.core.on_truncated(
            src, answer.head, first_available, incarnation=answer.incarnation or None
        )
        if phase is FollowerPhase.SNAPSHOT:
            self.replica.env.count("snapshots sent")
            self._send_snapshot(src)

    def _send_snapshot(self, name: str) -> None:
        replica = self.replica
        applied = replica.kv.applied_offset
        term = replica.log.term_at(applied)
        assert term is not None, (applied, replica.log.base)
        replica.env.send(
            replica.name,
            name,
            m.SendSnapshot(
                self.sessions[name].session,
                self.term,
                self.core.me,
                EntryId(term, applied),
                replica.kv.dump(),
            ),
        )

    # -- each step ---------------------------------------------------------------------

    def pump(self) -> None:
        replica, env = self.replica, self.replica.env
        replica.live_core().on_local_durable(replica.log.synced_offset)
        if self.removals:
            self._finish_removals()
        self._expire_sessions()
        for name in list(self.core.followers):
            session = self.sessions[name]
            if env.now - session.last_heard_step > env.rules.stream_timeout_steps:
                self._reconnect(name, "no answer", "streams timed out")
                continue
            if self.core.progress(name).phase is FollowerPhase.STREAMING:
                self._stream(name, session)

    def _stream(self, name: str, session: Session) -> None:
        replica, env = self.replica, self.replica.env
        log = replica.log
        entries: tuple[LogEntry, ...] = ()
        to_send = self.core.to_send(name, log.last_offset)
        if to_send is not None:
            first, last = to_send
            if first < log.first_offset:
                self._reconnect(
                    name, f"our log was trimmed past {first}", "streams ended by a trim"
                )
                return
            entries = tuple(log.slice(first, last))
            self.core.on_sent(name, last)
        # As the storage pod's sender does: the commit offset as far as applied,
        # with the changes the apply step wrote for entries the follower holds.
        commit = commit_for_followers(self.core.commit_offset, replica.kv.applied_offset)
        holds_through = self.core.progress(name).next_offset - 1
        kept = replica.live_apply_step().changes_for_followers
        changes = tuple(
            kept.between(
                session.changes_sent_through, min(commit, holds_through), MAX_CHANGES_BYTES
            )
        )
        due = env.now - session.last_sent_step >= env.rules.heartbeat_steps
        if entries or changes or commit > session.commit_sent or due:
            env.send(
                replica.name,
                name,
                m.Replicate(session.session, self.term, entries, commit, env.now_ms, changes),
            )
            session.commit_sent = commit
            session.last_sent_step = env.now
            if changes:
                session.changes_sent_through = changes[-1].last_offset
                # Kept only until every follower's stream carried them.
                kept.drop_through(
                    min(other.changes_sent_through for other in self.sessions.values())
                )
