"""One leader -> follower replication session, retried until the leader stops.

Each session: Truncate (the follower's log is made to agree with ours), then a
snapshot if our WAL no longer holds what the follower needs next, then a
Replicate stream: entries in a window bounded in entries and bytes beyond what
the follower acknowledged as durable, each message carrying our commit offset (as far as we
applied it) and what our apply step wrote for the entries it committed, which
the follower writes rather than applying them itself (applied_changes.py).
Every message carries the time we sent it, which the follower echoes: that
renews our lease (lease.py). An idle stream carries a heartbeat every
`lease_heartbeat_ms`, and a read waiting for the lease asks for one at once. Any
failure (the follower unreachable or restarted, a broken stream, a refused term)
ends the session; the next one starts over with Truncate after a growing delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import grpc

from cairn.common import tracing
from cairn.common.errors import InvalidTerm
from cairn.proto import replication_pb2 as rpb
from cairn.proto import replication_pb2_grpc as rpb_grpc
from cairn.storage.core.replication.applied_changes import commit_for_followers
from cairn.storage.core.replication.leader import FollowerPhase, NotAFollower
from cairn.storage.core.replication.replica import Member
from cairn.storage.core.replication.terms import EntryId
from cairn.storage.replication.wire import (
    entry_id_message,
    entry_id_of,
    history_message,
    incarnation_of,
    log_entry_message,
    node_message,
)
from cairn.storage.wal import LogEntry

if TYPE_CHECKING:
    from cairn.storage.replication.leader import ReplicatingLeader

log = logging.getLogger(__name__)

# How long a commit-only message waits for entries to travel with.
COMMIT_LINGER_S = 0.002
# With tracing on, the trace contexts a message carries at most (one parents the
# follower's spans, the rest are links: a few show a batch; hundreds say nothing).
MAX_TRACES_PER_MESSAGE = 16


class StreamEnded(Exception):
    """The follower closed the Replicate stream."""


# How a session ends in the normal course of things: the follower unreachable,
# restarted or refusing our term, an answer of another term or of another
# incarnation of its data (InvalidTerm, StaleIncarnation: the next Truncate tells
# what it holds), the stream closed or finished under a write (InvalidStateError),
# or our WAL no longer holding what the follower needs (ValueError/OSError:
# trimmed meanwhile; the next session decides again).
_SESSION_ENDINGS = (
    grpc.aio.AioRpcError,
    InvalidTerm,
    NotAFollower,
    StreamEnded,
    asyncio.InvalidStateError,
    ValueError,
    OSError,
)


class FollowerSender:
    def __init__(self, leader: ReplicatingLeader, member: Member, channel: grpc.aio.Channel):
        self.leader = leader
        self.member = member
        self.address = member.internal_address
        self._stub = rpb_grpc.ReplicationStub(channel)
        self._wake = asyncio.Event()
        self.connected = False
        # (offset, bytes) of entries sent and not yet acknowledged as durable by the
        # follower, for the byte bound of the window.
        self._unacked: deque[tuple[int, int]] = deque()
        self._unacked_bytes = 0
        # The last offset of the applied changes this session sent.
        self.changes_sent_through = -1
        self._stopped = False
        # When the stream last carried a message (our clock), and whether a read
        # waits for a heartbeat's answer.
        self._last_sent_ms = 0
        self._heartbeat_requested = False

    def wake(self) -> None:
        self._wake.set()

    def request_heartbeat(self) -> None:
        self._heartbeat_requested = True
        self._wake.set()

    def stop(self) -> None:
        """End `run` at its next step. The caller also cancels the task; this makes
        the end certain even if a cancellation is lost (Python 3.11's wait_for can
        swallow one that arrives as its inner wait completes)."""
        self._stopped = True
        self._wake.set()

    async def run(self) -> None:
        settings = self.leader.settings
        delay_s = settings.reconnect_initial_delay_s
        shard = self.leader.shard
        while not self._stopped:
            try:
                await self._session()
            except Exception as error:  # (cancellation is not an Exception: it ends the task)
                self.connected = False
                self.leader.core.on_disconnected(self.address)
                if self._stopped:
                    return
                if isinstance(error, _SESSION_ENDINGS):
                    log.info(
                        "shard %d: replication to %s interrupted (%s); retrying in %.2f s",
                        shard.shard_id,
                        self.address,
                        _describe(error),
                        delay_s,
                    )
                else:
                    # Unforeseen (a read of our log that failed, a bug): start over
                    # all the same. Ending here would leave the follower without a
                    # sender for the rest of the term, never caught up.
                    log.exception(
                        "shard %d: replication to %s failed; retrying in %.2f s",
                        shard.shard_id,
                        self.address,
                        delay_s,
                    )
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, settings.reconnect_max_delay_s)
            else:
                delay_s = settings.reconnect_initial_delay_s

    async def _session(self) -> None:
        leader, shard = self.leader, self.leader.shard
        starts, head = history_message(shard.log)
        sent_ms = leader.clock_ms()
        answer = await self._stub.Truncate(
            rpb.TruncateRequest(
                shard=shard.shard_id,
                term=leader.term,
                leader=node_message(leader.me),
                leader_terms=starts,
                leader_head=head,
            ),
            timeout=leader.settings.truncate_timeout_s,
        )
        self.connected = True
        # It answered our term: it followed us when it did.
        leader.lease_echo(self.address, sent_ms)
        follower_head = entry_id_of(answer.head)
        phase = leader.core.on_truncated(
            self.address,
            follower_head,
            shard.log.first_readable_offset,
            incarnation_of(answer.incarnation),
        )
        if phase is FollowerPhase.SNAPSHOT:
            installed = await self._send_snapshot()
            leader.core.on_snapshot_installed(self.address, installed)
        leader.follower_acknowledged(
            self.address, leader.term, leader.core.progress(self.address).acked_offset
        )
        await self._stream()

    async def _send_snapshot(self) -> EntryId:
        from cairn.storage.snapshot import snapshot_chunks

        leader, shard = self.leader, self.leader.shard
        applied = shard.applied_offset
        term = shard.log.term_at(applied)
        last_included = EntryId(term if term is not None else -1, applied)
        header = rpb.SnapshotHeader(
            shard=shard.shard_id,
            term=leader.term,
            leader=node_message(leader.me),
            last_included=entry_id_message(last_included),
        )
        log.info(
            "shard %d: sending a snapshot up to %s to %s",
            shard.shard_id,
            last_included,
            self.address,
        )
        # Opened here, between two KV writes: a consistent view (see snapshot.py).
        chunks = snapshot_chunks(
            shard.kv,
            header,
            leader.settings.max_snapshot_chunk_records,
            leader.settings.max_snapshot_chunk_bytes,
        )

        async def stream() -> AsyncIterator[rpb.SnapshotChunk]:
            for chunk in chunks:
                # Once per chunk (bounded in size), not per record: cheap enough.
                shard.counters.snapshot_sent_bytes += chunk.ByteSize()
                yield chunk

        shard.counters.snapshots_sent_started += 1
        started_ns = time.perf_counter_ns()
        try:
            answer = await self._stub.SendSnapshot(stream())
        except BaseException:  # a cancelled send failed too (the follower has none)
            shard.counters.snapshots_sent_failed += 1
            raise
        shard.counters.snapshots_sent_completed += 1
        shard.counters.snapshot_send_latency.record_since(started_ns)
        return entry_id_of(answer.head)

    async def _stream(self) -> None:
        self._unacked.clear()
        self._unacked_bytes = 0
        self.changes_sent_through = -1
        call = self._stub.Replicate()
        acks = asyncio.get_running_loop().create_task(self._read_acks(call))
        sent_commit = -2
        heartbeat_ms = self.leader.settings.lease_heartbeat_ms
        try:
            while not self._stopped:
                if acks.done():
                    acks.result()  # raises why it ended
                    raise StreamEnded("the follower ended the stream")
                self._wake.clear()
                clock_ms = self.leader.clock_ms
                heartbeat = (
                    self._heartbeat_requested or clock_ms() - self._last_sent_ms >= heartbeat_ms
                )
                request = self._next_request(sent_commit, heartbeat)
                if request is None:
                    idle_s = (self._last_sent_ms + heartbeat_ms - clock_ms()) / 1000
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(max(idle_s, 0.001)):
                            await self._wake.wait()
                    continue
                if not request.entries and not request.heartbeat:
                    # Only the commit offset moved (and with it, applied changes):
                    # followers need it to apply, not to acknowledge, so let it ride
                    # with the entries that may follow within a moment rather than
                    # send a message per commit step.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(COMMIT_LINGER_S):
                            await self._wake.wait()
                    request = self._next_request(sent_commit, False) or request
                if request.heartbeat:
                    self._heartbeat_requested = False
                self._last_sent_ms = request.leader_time_ms = clock_ms()
                await call.write(request)
                sent_commit = request.commit_offset
                if request.applied_changes:
                    self.changes_sent_through = request.applied_changes[-1].last_offset
                    self.leader.changes_sent()
        finally:
            acks.cancel()
            call.cancel()

    def _next_request(self, sent_commit: int, heartbeat: bool) -> rpb.ReplicateRequest | None:
        """Entries within the window (bounded in entries and bytes beyond what the
        follower acknowledged as durable) and the applied changes of entries
        committed, or just a newer commit offset, or a heartbeat if one is due, or
        None."""
        leader, shard = self.leader, self.leader.shard
        core, settings = leader.core, leader.settings
        span = core.to_send(self.address, shard.log.last_offset)
        room_bytes = settings.max_in_flight_bytes - self._unacked_bytes
        commit = commit_for_followers(core.commit_offset, shard.applied_offset)
        entries: list[LogEntry] = []
        entries_bytes = 0
        if span is not None and room_bytes > 0:
            entries = shard.entries(
                span[0], span[1], min(settings.max_entries_bytes_per_message, room_bytes)
            )
            for entry in entries:
                self._unacked.append((entry.offset, len(entry.payload)))
                entries_bytes += len(entry.payload)
            self._unacked_bytes += entries_bytes
            core.on_sent(self.address, entries[-1].offset)
        # Changes only for entries the follower holds (its head at the session's
        # start, then what we sent), in what room the entries leave: a message with
        # one large entry carries none, and stays within gRPC's message bound (a
        # group of changes alone is within it: KeptChanges keeps none larger than
        # max_applied_changes_bytes).
        holds_through = core.progress(self.address).next_offset - 1
        room = settings.max_entries_bytes_per_message - entries_bytes
        changes = (
            shard.changes_for_followers.between(
                self.changes_sent_through, min(commit, holds_through), room
            )
            if room > 0
            else []
        )
        if entries or changes or commit != sent_commit or heartbeat:
            request = rpb.ReplicateRequest(
                shard=shard.shard_id,
                term=leader.term,
                entries=[log_entry_message(entry) for entry in entries],
                commit_offset=commit,
                applied_changes=changes,
                heartbeat=heartbeat,
            )
            if tracing.ENABLED and entries:
                for context in shard.traces_of(
                    entries[0].offset, entries[-1].offset, MAX_TRACES_PER_MESSAGE
                ):
                    request.traces.add(fields=tracing.fields_of(context))
            return request
        return None

    async def _read_acks(self, call: grpc.aio.StreamStreamCall) -> None:
        try:
            while (answer := await call.read()) is not grpc.aio.EOF:
                assert isinstance(answer, rpb.ReplicateResponse)
                durable = answer.durable_offset
                while self._unacked and self._unacked[0][0] <= durable:
                    self._unacked_bytes -= self._unacked.popleft()[1]
                self.leader.follower_acknowledged(
                    self.address,
                    answer.term,
                    durable,
                    answer.applied_offset,
                    incarnation_of(answer.incarnation),
                )
                self.leader.lease_echo(self.address, answer.leader_time_ms)
                self._wake.set()  # the window may have opened
        finally:
            self._wake.set()


def _describe(error: BaseException) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return repr(error)
