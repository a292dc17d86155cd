"""One shard replica: WAL + KV + the asyncio pipeline that drives them.

Write path (leader, replication factor 1):

    submit()  -> validate, assign offset and timestamp, append to the WAL (no fsync)
    syncer    -> one fdatasync in a worker thread covers every entry appended so far
                 (group commit: writers arriving during an fsync ride the next one)
    applier   -> applies durable entries in order, a group at a time, as ONE atomic
                 KV batch that also records the new commit offset; then answers

So an answer is only sent for an entry that is durable in the WAL and applied.
On restart, entries after the KV's commit offset are re-applied from the WAL.

Entries are client writes and session lifecycle events (open, close/expire): all
state changes go through the log, so a replica that applies it is identical.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from cairn.common.errors import InvalidRequest, Overloaded, SessionNotFound, Unavailable
from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import storage_internal_pb2 as internal_pb
from cairn.storage.config import Limits
from cairn.storage.core.apply import (
    MAX_RECORDS_PER_CLOSE_ENTRY,
    CloseOutcome,
    HeaderCache,
    PendingChanges,
)
from cairn.storage.core.entries import (
    CLIENT_WRITE,
    CLOSE_SESSION,
    CREATE_SESSION,
    decode_entry,
    encode_entry,
)
from cairn.storage.core.entry_apply import ShardRules, apply_entry
from cairn.storage.core.fastpath import has_plain_puts
from cairn.storage.core.meta import COMMIT_OFFSET_KEY, decode_i64
from cairn.storage.core.sessions import (
    MAX_SESSION_TIMEOUT_MS,
    MIN_SESSION_TIMEOUT_MS,
    SessionTracker,
    stored_sessions,
)
from cairn.storage.kv import Column, KvStore, RocksKv
from cairn.storage.wal import Wal, WalEntry, WalError, WalOptions

log = logging.getLogger(__name__)

# How often the leader looks for expired sessions; expiry happens at most this
# late after a full timeout without a heartbeat.
SESSION_CHECK_INTERVAL_S = 0.25
# How often a shard compares its WAL size with the retention.
WAL_RETENTION_CHECK_INTERVAL_S = 1.0


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _operation_count(kind: int, body: Message) -> int:
    """What an entry may cost to apply, in record operations."""
    if kind == CLIENT_WRITE:
        assert isinstance(body, pb.WriteRequest)
        return len(body.puts) + len(body.deletes) + len(body.delete_ranges)
    if kind == CLOSE_SESSION:
        return MAX_RECORDS_PER_CLOSE_ENTRY
    return 1


@dataclass(slots=True)
class _Pending:
    offset: int
    timestamp_ms: int
    kind: int
    body: Message
    plain_puts: bool
    size_bytes: int
    future: asyncio.Future[Any]


class ShardReplica:
    def __init__(
        self,
        shard_id: int,
        namespace: str,
        key_order: KeyOrder,
        kv: KvStore,
        wal: Wal,
        limits: Limits,
        clock_ms: Callable[[], int] = wall_clock_ms,
        session_clock_ms: Callable[[], int] = monotonic_ms,
        notifications_enabled: bool = True,
        wal_retention_bytes: int | None = None,
    ) -> None:
        """`wal_retention_bytes` None keeps the whole WAL."""
        self.shard_id = shard_id
        self.namespace = namespace
        self.key_order = key_order
        self.kv = kv
        self.wal = wal
        self.limits = limits
        self._clock_ms = clock_ms
        self._session_clock_ms = session_clock_ms
        self.notifications_enabled = notifications_enabled
        self._rules = ShardRules(
            shard_id,
            key_order,
            notifications_enabled,
            limits.notification_retention_ms,
            limits.max_notification_batches_trimmed_per_entry,
        )
        self._loop = asyncio.get_running_loop()
        # Replaced (and the old one set) whenever the commit offset advances.
        self._commit_advanced = asyncio.Event()
        # Counts committed groups that generated sequence keys; the event is replaced
        # (and the old one set) at each, for GetSequenceUpdates subscribers.
        self.sequence_generation = 0
        self._sequence_advanced = asyncio.Event()
        self.term = max(wal.last_term, 0)
        self._header_cache = HeaderCache(limits.max_cached_headers_per_shard)
        self.commit_offset = decode_i64(kv.get(Column.META, COMMIT_OFFSET_KEY), -1)
        self._replay()
        last = wal.last_entry()
        self._next_offset = max(wal.last_offset, self.commit_offset) + 1
        self._last_timestamp_ms = last.timestamp_ms if last is not None else 0
        # Every stored session starts with a fresh full timeout under this leader.
        self.sessions = SessionTracker()
        now = session_clock_ms()
        for session_id, state in stored_sessions(kv):
            # A close interrupted by a crash is finished at once (as an expiry).
            self.sessions.open(session_id, 0 if state.closing else state.timeout_ms, now)
        self._appended: deque[_Pending] = deque()
        self._durable: deque[_Pending] = deque()
        self._pending_entries = 0
        self._pending_bytes = 0
        self._space_freed = asyncio.Event()
        self._wake_syncer = asyncio.Event()
        self._wake_applier = asyncio.Event()
        self._failure: BaseException | None = None
        self._closing = False
        self._streams_ending = False
        # One thread per shard: fsyncs of different shards proceed in parallel.
        self._sync_executor = ThreadPoolExecutor(1, thread_name_prefix=f"wal-sync-{shard_id}")
        self._tasks = [
            self._loop.create_task(self._sync_loop(), name=f"syncer-{shard_id}"),
            self._loop.create_task(self._apply_loop(), name=f"applier-{shard_id}"),
        ]
        self._expiry_task = self._loop.create_task(
            self._expiry_loop(), name=f"session-expiry-{shard_id}"
        )
        self._wal_retention_bytes = wal_retention_bytes
        self._retention_task = self._loop.create_task(
            self._retention_loop(), name=f"wal-retention-{shard_id}"
        )

    @classmethod
    def open(
        cls,
        shard_id: int,
        namespace: str,
        key_order: KeyOrder,
        directory: Path,
        limits: Limits,
        wal_segment_size_bytes: int,
        notifications_enabled: bool = True,
        wal_retention_bytes: int | None = None,
    ) -> ShardReplica:
        kv = RocksKv(directory / "kv")
        wal = Wal.open(directory / "wal", WalOptions(segment_size_bytes=wal_segment_size_bytes))
        return cls(
            shard_id,
            namespace,
            key_order,
            kv,
            wal,
            limits,
            notifications_enabled=notifications_enabled,
            wal_retention_bytes=wal_retention_bytes,
        )

    # ---- applying entries (the same on every replica, and on replay) ----------------

    def _apply_entry(
        self,
        state: PendingChanges,
        kind: int,
        body: Message,
        offset: int,
        timestamp_ms: int,
        plain_puts: bool,
    ) -> Any:
        return apply_entry(
            self._rules, state, self.kv, kind, body, offset, timestamp_ms, plain_puts
        )

    def _replay(self) -> None:
        wal = self.wal
        if wal.last_offset < self.commit_offset:
            # The KV is ahead of the log (the log's tail was lost while the KV kept it):
            # nothing to re-apply; new entries continue after what the KV has.
            log.warning(
                "shard %d: WAL ends at %d but the KV has applied up to %d",
                self.shard_id,
                wal.last_offset,
                self.commit_offset,
            )
            wal.reset(self.commit_offset + 1)
            return
        start = self.commit_offset + 1
        if wal.first_offset > start:
            raise RuntimeError(
                f"shard {self.shard_id}: WAL starts at {wal.first_offset} but entries from "
                f"{start} were never applied"
            )
        replayed = 0
        state = PendingChanges(self.kv)
        for entry in wal.read(start):
            kind, body = decode_entry(entry.payload)
            plain = kind == CLIENT_WRITE and has_plain_puts(entry.payload[1:])
            self._apply_entry(state, kind, body, entry.offset, entry.timestamp_ms, plain)
            state.set_commit_offset(entry.offset)
            replayed += 1
            if replayed % self.limits.max_entries_per_apply_batch == 0:
                self.kv.write(state.changes())
                state = PendingChanges(self.kv)
        if len(state):
            self.kv.write(state.changes())
        if replayed:
            self.commit_offset = wal.last_offset
            log.info("shard %d: re-applied %d entries from the WAL", self.shard_id, replayed)

    # ---- write path -----------------------------------------------------------------

    def _check_writable(self) -> None:
        if self._failure is not None:
            raise Unavailable(f"shard {self.shard_id} has failed: {self._failure}")
        if self._closing:
            raise Unavailable(f"shard {self.shard_id} is shutting down")

    async def _append(
        self, kind: int, raw_body: bytes, body: Message, plain_puts: bool = False
    ) -> asyncio.Future[Any]:
        """Log one entry and return the future of its apply result, resolved once the
        entry is durable and applied. Waits only while the shard's write buffer is
        full, so a pipelining caller gets its future without a task switch."""
        self._check_writable()
        size = len(raw_body)
        if size > self.limits.max_pending_bytes_per_shard:
            raise Overloaded(f"a single request of {size} bytes exceeds the shard's write buffer")
        while (
            self._pending_entries >= self.limits.max_pending_entries_per_shard
            or self._pending_bytes + size > self.limits.max_pending_bytes_per_shard
        ):
            # Backpressure: wait for the pipeline to drain rather than grow without bound.
            self._space_freed.clear()
            await self._space_freed.wait()
            self._check_writable()
        timestamp_ms = max(self._clock_ms(), self._last_timestamp_ms)
        offset = self._next_offset
        try:
            self.wal.append(WalEntry(self.term, offset, timestamp_ms, encode_entry(kind, raw_body)))
        except (OSError, WalError) as error:
            # e.g. a full disk: the WAL left no partial record; this write fails, the
            # shard stays consistent and takes the next one (a WAL that could not undo
            # a partial write refuses appends until reopened: WalError).
            raise Unavailable(f"shard {self.shard_id} cannot write its log: {error}") from error
        self._next_offset = offset + 1
        self._last_timestamp_ms = timestamp_ms
        # A caller that goes away may cancel this future; the entry still commits and
        # the pipeline skips answering it (it checks done()).
        future: asyncio.Future[Any] = self._loop.create_future()
        self._appended.append(_Pending(offset, timestamp_ms, kind, body, plain_puts, size, future))
        self._pending_entries += 1
        self._pending_bytes += size
        self._wake_syncer.set()
        return future

    async def submit(
        self, raw_request: bytes, request: pb.WriteRequest, plain_puts: bool = False
    ) -> asyncio.Future[bytes]:
        """Log a client write request (validated by the caller); the future holds the
        serialized WriteResponse."""
        return await self._append(CLIENT_WRITE, raw_request, request, plain_puts)

    async def write(
        self, raw_request: bytes, request: pb.WriteRequest, plain_puts: bool = False
    ) -> bytes:
        """`submit`, then wait for the answer."""
        response: bytes = await (await self.submit(raw_request, request, plain_puts))
        return response

    # ---- sessions -------------------------------------------------------------------

    async def create_session(self, timeout_ms: int, client_identity: str) -> int:
        if not MIN_SESSION_TIMEOUT_MS <= timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            raise InvalidRequest(
                f"session timeout {timeout_ms} ms is outside "
                f"[{MIN_SESSION_TIMEOUT_MS}, {MAX_SESSION_TIMEOUT_MS}] ms"
            )
        entry = internal_pb.CreateSessionEntry(
            timeout_ms=timeout_ms, client_identity=client_identity
        )
        future = await self._append(CREATE_SESSION, entry.SerializeToString(), entry)
        session_id: int = await future
        self.sessions.open(session_id, timeout_ms, self._session_clock_ms())
        return session_id

    def keep_alive(self, session_id: int) -> None:
        if not self.sessions.heartbeat(session_id, self._session_clock_ms()):
            raise SessionNotFound(f"session {session_id} does not exist on shard {self.shard_id}")

    async def close_session(self, session_id: int) -> None:
        """Delete the session's ephemeral records, through the log, then answer."""
        if not self.sessions.start_closing(session_id):
            raise SessionNotFound(f"session {session_id} does not exist on shard {self.shard_id}")
        await self._close_session(session_id, internal_pb.CLOSED_BY_CLIENT)

    async def _close_session(self, session_id: int, reason: int) -> None:
        """Append CloseSession entries until one reports the session gone (each
        deletes a bounded number of its records)."""
        entry = internal_pb.CloseSessionEntry(session_id=session_id, reason=reason)  # type: ignore[arg-type]
        raw = entry.SerializeToString()
        try:
            while await (await self._append(CLOSE_SESSION, raw, entry)) is CloseOutcome.MORE:
                pass
        finally:
            self.sessions.forget(session_id)

    async def _expiry_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(SESSION_CHECK_INTERVAL_S)
            for session_id in self.sessions.expired(self._session_clock_ms()):
                if self.sessions.start_closing(session_id):
                    log.info("shard %d: session %d expired", self.shard_id, session_id)
                    # Expiry waits its turn in the log like any write; a failure leaves
                    # the session for the next leader (it restarts the timeout).
                    with contextlib.suppress(Unavailable):
                        await self._close_session(session_id, internal_pb.EXPIRED)

    # ---- WAL retention ----------------------------------------------------------------

    async def _retention_loop(self) -> None:
        limit = self._wal_retention_bytes
        if limit is None:
            return
        while not self._closing:
            await asyncio.sleep(WAL_RETENTION_CHECK_INTERVAL_S)
            if self.wal.total_size_bytes() <= limit or self._failure is not None:
                continue
            try:
                # On the sync thread: serialised with fsyncs, never blocking the loop.
                await self._loop.run_in_executor(
                    self._sync_executor, self._trim_wal, self.commit_offset
                )
            except Exception as error:  # keep serving; the next round retries
                log.warning("shard %d: WAL trimming failed: %r", self.shard_id, error)

    def _trim_wal(self, applied_offset: int) -> None:
        """Delete segments the KV durably holds: once RocksDB's own log is synced,
        every entry up to `applied_offset` survives power loss in the KV, and replay
        never needs it again."""
        self.kv.sync()
        self.wal.trim_before(applied_offset + 1)

    # ---- notifications --------------------------------------------------------------

    @property
    def closing(self) -> bool:
        """True once open-ended streams (notifications, sequence updates) should end."""
        return self._closing or self._streams_ending

    def end_streams(self) -> None:
        """Tell open-ended streams to finish, so that a shutdown's grace period only
        waits for requests that end by themselves."""
        self._streams_ending = True
        self._commit_advanced.set()
        self._sequence_advanced.set()

    async def wait_for_commit_after(self, offset: int) -> None:
        """Return once the commit offset is past `offset` (or the shard closes)."""
        while self.commit_offset <= offset and not self.closing:
            await self._commit_advanced.wait()

    async def wait_for_sequence_update(self, generation: int) -> None:
        """Return once a group with sequence puts committed after `generation` was
        read from `sequence_generation` (or the shard closes)."""
        while self.sequence_generation == generation and not self.closing:
            await self._sequence_advanced.wait()

    # ---- the pipeline ---------------------------------------------------------------

    async def _sync_loop(self) -> None:
        loop = self._loop
        while True:
            if not self._appended:
                if self._closing:
                    self._wake_applier.set()
                    return
                await self._wake_syncer.wait()
                self._wake_syncer.clear()
                continue
            batch = list(self._appended)
            self._appended.clear()
            try:
                await loop.run_in_executor(self._sync_executor, self.wal.sync)
            except Exception as error:  # an fsync failure leaves the disk state unknown
                self._fail(error, batch)
                return
            self._durable.extend(batch)
            self._wake_applier.set()

    async def _apply_loop(self) -> None:
        while True:
            await self._wake_applier.wait()
            self._wake_applier.clear()
            while self._durable:
                group = self._take_apply_group()
                try:
                    state, results = self._apply_group(group)
                    # Inline on purpose: rocksdict holds the GIL while RocksDB writes,
                    # so a worker thread would only add hand-off cost.
                    self.kv.write(state.changes())
                    state.written()
                    self.commit_offset = group[-1].offset
                    advanced, self._commit_advanced = self._commit_advanced, asyncio.Event()
                    advanced.set()
                    if state.sequence_keys_generated:
                        self.sequence_generation += 1
                        advanced, self._sequence_advanced = (
                            self._sequence_advanced,
                            asyncio.Event(),
                        )
                        advanced.set()
                except Exception as error:
                    self._fail(error, group)
                    return
                for pending, result in zip(group, results, strict=True):
                    if not pending.future.done():
                        pending.future.set_result(result)
                self._release(group)
                # Let the loop take in more requests between groups.
                await asyncio.sleep(0)
            if self._closing and not self._durable and self._tasks[0].done():
                return

    def _take_apply_group(self) -> list[_Pending]:
        """The next durable entries to apply together: at least one, then as many as
        fit the entry and operation bounds."""
        durable = self._durable
        group = [durable.popleft()]
        operations = _operation_count(group[0].kind, group[0].body)
        while durable and len(group) < self.limits.max_entries_per_apply_batch:
            operations += _operation_count(durable[0].kind, durable[0].body)
            if operations > self.limits.max_operations_per_apply_batch:
                break
            group.append(durable.popleft())
        return group

    def _apply_group(self, group: list[_Pending]) -> tuple[PendingChanges, list[Any]]:
        state = PendingChanges(self.kv, self._header_cache)
        results = [
            self._apply_entry(state, p.kind, p.body, p.offset, p.timestamp_ms, p.plain_puts)
            for p in group
        ]
        state.set_commit_offset(group[-1].offset)
        return state, results

    def _release(self, group: list[_Pending]) -> None:
        self._pending_entries -= len(group)
        self._pending_bytes -= sum(p.size_bytes for p in group)
        self._space_freed.set()

    def _fail(self, error: BaseException, in_flight: list[_Pending]) -> None:
        log.error("shard %d failed, refusing further writes: %r", self.shard_id, error)
        self._failure = error
        failure = Unavailable(f"shard {self.shard_id} failed: {error}")
        for pending in (*in_flight, *self._appended, *self._durable):
            if not pending.future.done():
                pending.future.set_exception(failure)
        self._appended.clear()
        self._durable.clear()
        self._space_freed.set()

    # ---- lifecycle ------------------------------------------------------------------

    async def close(self) -> None:
        """Finish every accepted write, then release the WAL and KV."""
        self._closing = True
        self._commit_advanced.set()  # subscribers waiting for commits see the close
        self._sequence_advanced.set()
        for background in (self._expiry_task, self._retention_task):
            background.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await background
        self._wake_syncer.set()
        self._wake_applier.set()
        self._space_freed.set()
        for task in self._tasks:
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout=30)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
        self._sync_executor.shutdown(wait=True)
        self.wal.close()
        self.kv.close()
