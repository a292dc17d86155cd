"""A leader's write path (one shard replica's): client writes and session events
become log entries, appended to the WAL without an fsync (the pipeline's syncer
covers them, shard_pipeline.py), in the order they came in. Plain puts and
deletes that arrive while entries are uncommitted fold into one entry
(folding.py), which the next commit step logs. Writers wait while the write
buffer is full (ShardCore's backpressure).

Also here: what followers are sent, read from the entries still pending in
memory or else from the WAL.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from google.protobuf.message import Message

from cairn.common import tracing
from cairn.common.errors import Unavailable
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage import folding
from cairn.storage.core.entries import CLIENT_WRITE, Folded, encode_entry
from cairn.storage.core.folding import WriteFold
from cairn.storage.core.pending import PendingEntry
from cairn.storage.shard_context import ShardContext
from cairn.storage.shard_takeover import LeaderTakeover
from cairn.storage.wal import LogEntry, WalError

if TYPE_CHECKING:
    from opentelemetry.context import Context

# An entry logged and not applied yet, and the future of its writer, if any.
_Pending = PendingEntry["asyncio.Future[Any]"]


class LeaderWrites:
    def __init__(self, shard: ShardContext, takeover: LeaderTakeover) -> None:
        self._shard = shard
        self._takeover = takeover

    async def append(
        self,
        kind: int,
        raw_body: bytes,
        body: Message,
        plain_puts: bool = False,
        wait_for_space: bool = True,
    ) -> asyncio.Future[Any]:
        """Log one entry as leader and return the future of its apply result,
        resolved once the entry is committed and applied. Waits only while the
        shard's write buffer is full, so a pipelining caller gets its future without
        a task switch."""
        self._shard.check_writable()
        self._shard.core.check_leader()
        if wait_for_space:
            await self._make_room(len(raw_body) + 1)
        return self._log(kind, encode_entry(kind, raw_body), body, plain_puts)

    async def submit(
        self, raw_request: bytes, request: pb.WriteRequest, plain_puts: bool = False
    ) -> asyncio.Future[bytes]:
        """Log a client write request (validated by the caller); the future holds the
        serialized WriteResponse. With entries uncommitted, a request of plain puts
        and deletes joins the fold that the next commit step logs (folding.py). A new
        leader takes none before it has taken over (lease.py): it must acknowledge
        no write while an older leader may still answer reads."""
        shard = self._shard
        core = shard.core
        shard.check_writable()
        core.check_leader()
        if not core.taken_over:
            await self._takeover.wait_taken_over()
        await self._make_room(len(raw_request) + 1)
        future: asyncio.Future[bytes]
        if core.folds(request, plain_puts, core.has_followers):
            future = self._fold_in(raw_request, request)
        else:
            future = self._log(
                CLIENT_WRITE, encode_entry(CLIENT_WRITE, raw_request), request, plain_puts
            )
        # Counted once taken in; the request is parsed already, so counting its
        # operations is three C-level length reads, plain puts or not.
        counters = shard.counters
        counters.write_requests += 1
        counters.write_operations += (
            len(request.puts) + len(request.deletes) + len(request.delete_ranges)
        )
        return future

    async def write(
        self, raw_request: bytes, request: pb.WriteRequest, plain_puts: bool = False
    ) -> bytes:
        """`submit`, then wait for the answer."""
        response: bytes = await (await self.submit(raw_request, request, plain_puts))
        return response

    # ---- backpressure -------------------------------------------------------------

    async def _make_room(self, size: int) -> None:
        core = self._shard.core
        if not core.has_room(size):
            await self._wait_for_space(size)
            core.check_leader()

    async def _wait_for_space(self, size: int) -> None:
        shard = self._shard
        shard.core.check_fits(size)
        while not shard.core.has_room(size):
            # Backpressure: wait for the pipeline to drain rather than grow without bound.
            shard.space_freed.clear()
            await shard.space_freed.wait()
            shard.check_writable()

    # ---- logging --------------------------------------------------------------------

    def _log(
        self,
        kind: int,
        payload: bytes,
        body: Message | Folded,
        plain_puts: bool,
        traces: tuple[Context, ...] | None = None,
    ) -> asyncio.Future[Any]:
        """Append an entry to the WAL as leader, after any fold collected so far, so
        that entries keep the order their requests came in."""
        self.seal_fold()
        return self._append_entry(kind, payload, body, plain_puts, traces)

    def _append_entry(
        self,
        kind: int,
        payload: bytes,
        body: Message | Folded,
        plain_puts: bool,
        traces: tuple[Context, ...] | None = None,
    ) -> asyncio.Future[Any]:
        """Append an entry to the WAL as leader. `traces`: the contexts of the
        writes it carries (a fold's); by default, the caller's, if sampled."""
        shard = self._shard
        shard.check_writable()
        entry = shard.core.next_entry(payload, shard.clock_ms())
        leader = shard.leader
        assert leader is not None
        started_ns = time.perf_counter_ns()
        try:
            shard.wal.append(entry)
        except (OSError, WalError) as error:
            # e.g. a full disk: the WAL left no partial record; this write fails, the
            # shard stays consistent and takes the next one (a WAL that could not undo
            # a partial write refuses appends until reopened: WalError).
            raise Unavailable(f"shard {shard.shard_id} cannot write its log: {error}") from error
        shard.counters.wal_append_latency.record_since(started_ns)
        # A caller that goes away may cancel this future; the entry still commits and
        # the pipeline skips answering it (it checks done()).
        future: asyncio.Future[Any] = shard.loop.create_future()
        # The class itself: calling the subscripted alias costs a typing call per entry.
        pending: _Pending = PendingEntry(entry, kind, body, plain_puts, future)
        if tracing.ENABLED:
            if traces is None:
                caller = tracing.current_context()
                traces = () if caller is None else (caller,)
            pending.traces = traces
        shard.core.on_logged(pending)
        shard.wake_syncer.set()
        leader.entries_appended()
        return future

    # ---- folding ----------------------------------------------------------------------

    def _fold_in(self, raw_request: bytes, request: pb.WriteRequest) -> asyncio.Future[bytes]:
        future: asyncio.Future[bytes] = self._shard.loop.create_future()
        trace = tracing.current_context() if tracing.ENABLED else None
        sealed = self._shard.core.fold_in(raw_request, request, future, trace)
        if sealed is not None:
            self._log_fold(sealed)
        return future

    def seal_fold(self) -> None:
        """Log the requests folded so far, if any (a commit step, or an entry that
        must come after them)."""
        fold = self._shard.core.seal_fold()
        if fold is not None:
            self._log_fold(fold)

    def _log_fold(self, fold: WriteFold[asyncio.Future[bytes]]) -> None:
        """Log the collected requests (as a plain client write if there is just one)."""
        kind, payload, body = fold.entry()
        try:
            logged = self._append_entry(kind, payload, body, True, tuple(fold.traces))
        except Exception as error:  # not logged: nothing was accepted
            folding.fail(fold.waiters, error)
            return
        counters = self._shard.counters
        counters.folds += 1
        counters.folded_requests += len(fold.requests)
        counters.folded_operations += fold.operations
        logged.add_done_callback(functools.partial(folding.settle, fold.waiters))

    def drop_fold(self, error: BaseException) -> None:
        """Requests collected but never logged: not accepted, safe to send again."""
        fold = self._shard.core.seal_fold()
        if fold is not None:
            folding.fail(fold.waiters, error)

    # ---- what followers are sent ------------------------------------------------------

    def entries(self, first_offset: int, last_offset: int, max_bytes: int) -> list[LogEntry]:
        """Logged entries first_offset..last_offset (at least one if any, then up to
        `max_bytes` of payload), from memory while still pending, else from the WAL.
        Raises ValueError if the WAL no longer holds first_offset."""
        found: list[LogEntry] = []
        size = 0
        pending = self._shard.core.pending
        held_first = pending.first_offset
        held: Iterable[LogEntry]
        if held_first is not None and held_first <= first_offset:
            held = (each.entry for each in pending.held_from(first_offset, last_offset))
        else:
            held = self._shard.wal.read(first_offset, last_offset)
        for entry in held:
            if found and size + len(entry.payload) > max_bytes:
                break
            found.append(entry)
            size += len(entry.payload)
        return found

    def traces_of(self, first_offset: int, last_offset: int, limit: int) -> list[Context]:
        """Up to `limit` trace contexts of the writes in entries first_offset..
        last_offset, of those still pending (a follower catching up on entries
        applied meanwhile gets none: their writes were answered long ago)."""
        found: list[Context] = []
        for pending in self._shard.core.pending.held_from(first_offset, last_offset):
            found.extend(pending.traces[: limit - len(found)])
            if len(found) >= limit:
                break
        return found
