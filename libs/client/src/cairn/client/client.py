"""The asyncio client. One `AsyncClient` serves one namespace; `for_namespace`
makes siblings that share its connections.

    client = await AsyncClient.connect("127.0.0.1:6648")
    result = await client.put("/app/config", b"v1")
    record = await client.get("/app/config")
    await client.close()

Every call retries what is retryable (no leader yet, a leader moving, a pod
restarting, overload) until `ClientOptions.request_timeout_s`, redirecting on a
leader hint; see cairn.client.errors for what reaches the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from opentelemetry.context import Context

from cairn.client import errors
from cairn.client.assignments import ShardMapFollower
from cairn.client.attempts import Attempts
from cairn.client.channels import ChannelPool
from cairn.client.failures import Retry, not_applied_by_version
from cairn.client.merge import nearest
from cairn.client.options import ClientOptions
from cairn.client.reads import ReadOp, ShardReader
from cairn.client.records import (
    Comparison,
    NotificationBatch,
    PutResult,
    Record,
    Version,
)
from cairn.client.routing import ShardMap
from cairn.client.scans import KEYS_END, Scans
from cairn.client.sessions import SessionManager
from cairn.client.writes import DELETE, DELETE_RANGE, PUT, ShardWriter, WriteOp
from cairn.common import tracing
from cairn.common.hashing import KeyHash
from cairn.proto import oxia_client_pb2 as pb

_OK = pb.OK
_KEY_NOT_FOUND = pb.KEY_NOT_FOUND
_UNEXPECTED_VERSION_ID = pb.UNEXPECTED_VERSION_ID
_SESSION_DOES_NOT_EXIST = pb.SESSION_DOES_NOT_EXIST
# The pipelined requests one WriteStream may have unanswered on the server
# (Limits.max_inflight_per_write_stream): the bound when batching is off.
_UNBATCHED_MAX_INFLIGHT = 256
# The client's span of one write (all its attempts), by kind, when tracing is on.
_WRITE_SPANS = {
    PUT: "cairn.client.put",
    DELETE: "cairn.client.delete",
    DELETE_RANGE: "cairn.client.delete_range",
}


# Named outside the class, whose `list` method hides the builtin in annotations.
NotificationBatches = list[NotificationBatch]


def _addresses(address: str | Sequence[str]) -> list[str]:
    if isinstance(address, str):
        found = [part.strip() for part in address.split(",") if part.strip()]
    else:
        found = [part.strip() for part in address if part.strip()]
    if not found:
        raise ValueError("no server address given")
    return found


def _status_error(status: int, what: str) -> errors.ClientError:
    if status == _KEY_NOT_FOUND:
        return errors.KeyNotFound(f"{what}: no such record")
    if status == _UNEXPECTED_VERSION_ID:
        return errors.UnexpectedVersion(f"{what}: the record's version is not the expected one")
    if status == _SESSION_DOES_NOT_EXIST:
        return errors.SessionExpired(f"{what}: the session does not exist (closed or expired)")
    return errors.InvalidArgument(f"{what}: refused by the server")


class AsyncClient:
    def __init__(
        self,
        pool: ChannelPool,
        seeds: list[str],
        namespace: str,
        options: ClientOptions,
        owns_pool: bool,
        map_pool: ChannelPool | None = None,
    ) -> None:
        """Use `AsyncClient.connect`."""
        self.namespace = namespace
        self.options = options
        self._loop = asyncio.get_running_loop()
        self._pool = pool
        self._seeds = seeds
        self._owns_pool = owns_pool
        self._closed = False
        self._writers: dict[int, ShardWriter] = {}
        self._readers: dict[int, ShardReader] = {}
        self._children: list[AsyncClient] = []
        self._parent: AsyncClient | None = None
        # The shard map is read with `map_pool`'s credentials when given: a gateway
        # reads it as itself, its callers' requests go as theirs.
        self._follower = ShardMapFollower(
            map_pool if map_pool is not None else pool,
            seeds,
            namespace,
            options.retry_initial_backoff_s,
            options.retry_max_backoff_s,
            self._map_changed,
            options.key_hash,
        )
        self._sessions = SessionManager(
            lambda shard: self.create_session(shard),
            self.keep_alive,
            self.close_session,
            options.session_timeout_ms,
        )
        self._scans = Scans(pool, self._follower, options, self._check_open)

    # ---- lifecycle ------------------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        address: str | Sequence[str],
        *,
        namespace: str = "default",
        options: ClientOptions | None = None,
    ) -> AsyncClient:
        """Connect to any server(s) of the cluster ("host:port", comma-separated or a
        list) and wait for the namespace's shard map."""
        options = options or ClientOptions()
        pool = ChannelPool(options.max_message_bytes, options.tls, options.call_metadata())
        client = cls(pool, _addresses(address), namespace, options, owns_pool=True)
        try:
            await client._follower.start(options.connect_timeout_s)
        except BaseException:
            await pool.close()
            raise
        return client

    async def for_namespace(
        self,
        namespace: str,
        key_hash: KeyHash | None = None,
        extra_metadata: tuple[tuple[str, str], ...] = (),
    ) -> AsyncClient:
        """A client of another namespace sharing this one's connections; closed with it.
        `key_hash`: how it routes keys, if not as this client does. `extra_metadata`
        goes with its every call besides this client's (a gateway names the caller
        it acts for: `x-cairn-on-behalf-of`)."""
        self._check_open()
        options = self.options if key_hash is None else replace(self.options, key_hash=key_hash)
        pool = self._pool.with_metadata(extra_metadata) if extra_metadata else self._pool
        child = AsyncClient(
            pool, self._seeds, namespace, options, owns_pool=False, map_pool=self._pool
        )
        await child._follower.start(self.options.connect_timeout_s)
        child._parent = self
        self._children.append(child)
        return child

    async def close(self) -> None:
        """Close the managed sessions (their ephemeral records go), fail what is
        still queued with ClientClosed, and release the connections."""
        if self._closed:
            return
        for child in list(self._children):
            await child.close()
        if self._parent is not None and self in self._parent._children:
            self._parent._children.remove(self)
        await self._sessions.close()
        self._closed = True
        await self._follower.close()
        for writer in self._writers.values():
            await writer.close()
        for reader in self._readers.values():
            await reader.close()
        if self._owns_pool:
            await self._pool.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise errors.ClientClosed("the client is closed")

    # ---- routing --------------------------------------------------------------------

    @property
    def shard_map(self) -> ShardMap:
        return self._follower.map

    def shard_for(self, key: str, partition_key: str | None = None) -> int:
        return self._follower.map.shard_for(key, partition_key)

    def _map_changed(self) -> None:
        for writer in self._writers.values():
            writer.leader_changed()

    def _writer(self, shard: int) -> ShardWriter:
        writer = self._writers.get(shard)
        if writer is None:
            options = self.options
            batching = options.batching
            writer = ShardWriter(
                shard,
                self.namespace,
                self._pool,
                self._follower.leader,
                max_batch_ops=options.max_batch_ops if batching else 1,
                max_batch_bytes=options.max_batch_bytes,
                max_inflight=options.max_inflight_batches if batching else _UNBATCHED_MAX_INFLIGHT,
                max_pending_ops=options.max_pending_ops_per_shard,
                linger_s=options.batch_linger_ms / 1000 if batching else 0.0,
                answer_timeout_s=options.request_timeout_s,
            )
            self._writers[shard] = writer
        return writer

    def _reader(self, shard: int) -> ShardReader:
        reader = self._readers.get(shard)
        if reader is None:
            options = self.options
            reader = ShardReader(
                shard,
                self._pool,
                self._follower.leader,
                max_batch=options.max_read_batch_gets if options.batching else 1,
                max_inflight=(
                    options.max_inflight_batches * 2
                    if options.batching
                    else _UNBATCHED_MAX_INFLIGHT
                ),
                max_pending=options.max_pending_ops_per_shard,
                answer_timeout_s=options.request_timeout_s,
            )
            self._readers[shard] = reader
        return reader

    def _attempts(self, verb: str, subject: object = None) -> Attempts:
        return Attempts(verb, subject, self.options, self._loop)

    # ---- writes ---------------------------------------------------------------------

    async def _send_write(
        self,
        shard: int,
        kind: int,
        message: Any,
        size_bytes: int,
        attempts: Attempts,
        idempotent: bool,
    ) -> tuple[Any, bool]:
        """One write, retried until answered: (the operation's response, whether an
        earlier attempt's outcome was unknown). When the write is not idempotent, an
        ambiguous attempt's Retry comes back instead of a response (the caller then
        proves whether it applied)."""
        loop = self._loop
        op = WriteOp(kind, message, size_bytes, loop)
        if tracing.ENABLED:
            with tracing.tracer().start_as_current_span(
                _WRITE_SPANS[kind], attributes={"cairn.shard": shard}
            ):
                op.trace = tracing.current_context()
                return await self._write_attempts(shard, op, attempts, idempotent)
        return await self._write_attempts(shard, op, attempts, idempotent)

    async def _write_attempts(
        self, shard: int, op: WriteOp, attempts: Attempts, idempotent: bool
    ) -> tuple[Any, bool]:
        loop = self._loop
        ambiguous_before = False
        while True:
            self._check_open()
            writer = self._writers.get(shard) or self._writer(shard)
            if not writer.try_submit(op):
                try:
                    async with asyncio.timeout_at(attempts.deadline):
                        await writer.submit(op)
                except TimeoutError:
                    raise attempts.timeout() from None
            # No timer per operation: the writer answers within answer_timeout_s
            # (it breaks a stream that does not), and retries check the deadline.
            outcome = await op.future
            if not isinstance(outcome, Retry):
                return outcome, ambiguous_before
            if outcome.ambiguous:
                if not idempotent:
                    return outcome, ambiguous_before
                ambiguous_before = True
            await self._follower.pause(shard, outcome, attempts)
            op = op.again(loop)

    async def put(
        self,
        key: str,
        value: bytes,
        *,
        expected_version: int | None = None,
        partition_key: str | None = None,
        ephemeral: bool = False,
        session_id: int | None = None,
        sequence_key_deltas: Sequence[int] | None = None,
        secondary_indexes: Mapping[str, str] | None = None,
        client_identity: str | None = None,
    ) -> PutResult:
        """Write a record. `expected_version`: only if the record has that version
        (EXPECTED_RECORD_DOES_NOT_EXIST: only if it does not exist). `ephemeral`: tied
        to this client's session on the key's shard, deleted when the client closes or
        its session expires; `session_id`: tied to a session from `create_session`
        instead. `sequence_key_deltas` (needs a partition key): the server appends
        counters to the key and returns the generated key. `client_identity` (for an
        ephemeral record) overrides the client's own in the record's version."""
        self._check_open()
        if not isinstance(value, bytes | bytearray | memoryview):
            raise errors.InvalidArgument("a value must be bytes")
        if ephemeral and session_id is not None:
            raise errors.InvalidArgument("give either ephemeral=True or a session_id, not both")
        if sequence_key_deltas:
            if partition_key is None:
                raise errors.InvalidArgument("a sequence put needs a partition key")
            if expected_version is not None:
                raise errors.InvalidArgument("a sequence put cannot have an expected version")
        shard = self._follower.map.shard_for(key, partition_key)
        attempts = Attempts("put", key, self.options, self._loop)
        session_renewed = False
        while True:
            message = pb.PutRequest(key=key, value=bytes(value))
            if expected_version is not None:
                message.expected_version_id = expected_version
            if partition_key is not None:
                message.partition_key = partition_key
            if sequence_key_deltas:
                message.sequence_key_delta.extend(sequence_key_deltas)
            if secondary_indexes:
                for name, secondary_key in secondary_indexes.items():
                    message.secondary_indexes.add(index_name=name, secondary_key=secondary_key)
            managed_session = ephemeral
            identity = self.options.client_identity if client_identity is None else client_identity
            if ephemeral:
                message.session_id = await self._sessions.session_for(shard)
                message.client_identity = identity
            elif session_id is not None:
                message.session_id = session_id
                message.client_identity = identity
            idempotent = expected_version is None and not sequence_key_deltas
            outcome, _ = await self._send_write(
                shard, PUT, message, len(key) + len(value), attempts, idempotent
            )
            if isinstance(outcome, Retry):
                await self._settle_ambiguous_put(
                    key, partition_key, expected_version, bool(sequence_key_deltas), attempts
                )
                await self._follower.pause(shard, outcome, attempts)
                continue
            if outcome.status == _OK:
                return PutResult.of(
                    outcome.key if outcome.HasField("key") else key,
                    Version.from_proto(outcome.version),
                )
            if (
                outcome.status == _SESSION_DOES_NOT_EXIST
                and managed_session
                and not session_renewed
            ):
                # Our session expired before the write (its records are gone): the
                # write goes once more, with a new session.
                self._sessions.forget(shard, message.session_id)
                session_renewed = True
                continue
            raise _status_error(outcome.status, f"put {key!r}")

    async def _settle_ambiguous_put(
        self,
        key: str,
        partition_key: str | None,
        expected_version: int | None,
        sequence: bool,
        attempts: Attempts,
    ) -> None:
        """A conditional or sequence put's attempt may have applied. Return only when
        reading proves it did not (the record still has the expected version, which
        version ids never return to), else raise OutcomeUnknown."""
        if not sequence and expected_version is not None:
            current = await self._current_version(key, partition_key, attempts)
            if not_applied_by_version(expected_version, current):
                return
        raise errors.OutcomeUnknown(
            f"put {key!r}: the shard's leader changed while the write was in flight and "
            "it may or may not have applied; read the record to find out"
        )

    async def _current_version(
        self, key: str, partition_key: str | None, attempts: Attempts
    ) -> int | None:
        request = pb.GetRequest(key=key, include_value=False)
        shard = self._follower.map.shard_for(key, partition_key)
        response = await self._send_read(shard, request, attempts)
        if response.status == _KEY_NOT_FOUND:
            return None
        if response.status != _OK:
            raise _status_error(response.status, f"get {key!r}")
        version_id: int = response.version.version_id
        return version_id

    async def delete(
        self,
        key: str,
        *,
        expected_version: int | None = None,
        partition_key: str | None = None,
    ) -> None:
        """Delete a record (KeyNotFound if there is none); with `expected_version`
        only if it has that version (else UnexpectedVersion)."""
        self._check_open()
        shard = self._follower.map.shard_for(key, partition_key)
        attempts = self._attempts("delete", key)
        message = pb.DeleteRequest(key=key)
        if expected_version is not None:
            message.expected_version_id = expected_version
        if partition_key is not None:
            message.partition_key = partition_key
        idempotent = expected_version is None
        while True:
            outcome, ambiguous_before = await self._send_write(
                shard, DELETE, message, len(key), attempts, idempotent
            )
            if isinstance(outcome, Retry):
                assert expected_version is not None
                current = await self._current_version(key, partition_key, attempts)
                if not not_applied_by_version(expected_version, current):
                    raise errors.OutcomeUnknown(
                        f"delete {key!r}: the shard's leader changed while the delete was in "
                        "flight and it may or may not have applied"
                    )
                await self._follower.pause(shard, outcome, attempts)
                continue
            if outcome.status == _OK:
                return
            if outcome.status == _KEY_NOT_FOUND and ambiguous_before:
                return  # an earlier attempt, whose answer was lost, deleted it
            raise _status_error(outcome.status, f"delete {key!r}")

    async def delete_range(
        self, start_inclusive: str, end_exclusive: str, *, partition_key: str | None = None
    ) -> None:
        """Delete every record with start_inclusive <= key < end_exclusive (in the
        namespace's key order), on every shard unless a partition key names one."""
        self._check_open()
        shards = (
            [self._follower.map.shard_for("", partition_key)]
            if partition_key is not None
            else self._follower.map.shard_ids()
        )
        message = pb.DeleteRangeRequest(
            start_inclusive=start_inclusive, end_exclusive=end_exclusive
        )
        size = len(start_inclusive) + len(end_exclusive)

        async def on_shard(shard: int) -> None:
            attempts = self._attempts("delete range", (start_inclusive, end_exclusive))
            outcome, _ = await self._send_write(shard, DELETE_RANGE, message, size, attempts, True)
            if outcome.status != _OK:
                raise _status_error(outcome.status, "delete range")

        await _all(on_shard(shard) for shard in shards)

    # ---- sessions -------------------------------------------------------------------

    async def create_session(
        self, shard: int, *, timeout_ms: int | None = None, client_identity: str | None = None
    ) -> int:
        """A new session on the shard; the caller keeps it alive (`keep_alive`)."""
        self._check_open()
        request = pb.CreateSessionRequest(
            shard=shard,
            session_timeout_ms=self.options.session_timeout_ms
            if timeout_ms is None
            else timeout_ms,
            client_identity=(
                self.options.client_identity if client_identity is None else client_identity
            ),
        )
        response = await self._scans.unary(shard, "create_session", request, "create session")
        session_id: int = response.session_id
        return session_id

    async def keep_alive(self, shard: int, session_id: int) -> None:
        self._check_open()
        request = pb.SessionHeartbeat(shard=shard, session_id=session_id)
        await self._scans.unary(shard, "keep_alive", request, f"keep session {session_id} alive")

    async def close_session(self, shard: int, session_id: int) -> None:
        """Close a session: its ephemeral records are deleted before this returns."""
        self._check_open()
        request = pb.CloseSessionRequest(shard=shard, session_id=session_id)
        await self._scans.unary(shard, "close_session", request, f"close session {session_id}")

    # ---- reads ----------------------------------------------------------------------

    async def _send_read(
        self, shard: int, message: pb.GetRequest, attempts: Attempts
    ) -> pb.GetResponse:
        if tracing.ENABLED:
            with tracing.tracer().start_as_current_span(
                "cairn.client.get", attributes={"cairn.shard": shard}
            ):
                return await self._read_attempts(
                    shard, message, attempts, tracing.current_context()
                )
        return await self._read_attempts(shard, message, attempts, None)

    async def _read_attempts(
        self, shard: int, message: pb.GetRequest, attempts: Attempts, trace: Context | None
    ) -> pb.GetResponse:
        while True:
            self._check_open()
            op = ReadOp(message, self._loop)
            op.trace = trace
            reader = self._readers.get(shard) or self._reader(shard)
            if not reader.try_submit(op):
                try:
                    async with asyncio.timeout_at(attempts.deadline):
                        await reader.submit(op)
                except TimeoutError:
                    raise attempts.timeout() from None
            outcome = await op.future  # each Read call has a deadline
            if not isinstance(outcome, Retry):
                response: pb.GetResponse = outcome
                return response
            await self._follower.pause(shard, outcome, attempts)

    async def get(
        self,
        key: str,
        *,
        comparison: Comparison = Comparison.EQUAL,
        include_value: bool = True,
        partition_key: str | None = None,
        secondary_index: str | None = None,
    ) -> Record:
        """The record at `key` (or the nearest one, per `comparison`; through a
        secondary index, `key` is a secondary key). Raises KeyNotFound."""
        self._check_open()
        message = pb.GetRequest(
            key=key,
            include_value=include_value,
            comparison_type=int(comparison),  # type: ignore[arg-type]
        )
        if secondary_index is not None:
            message.secondary_index_name = secondary_index
        attempts = self._attempts("get", key)
        shard_map = self._follower.map
        if partition_key is not None or (
            comparison == Comparison.EQUAL and secondary_index is None
        ):
            response = await self._send_read(
                shard_map.shard_for(key, partition_key), message, attempts
            )
            if response.status != _OK:
                raise _status_error(response.status, f"get {key!r}")
            return Record.from_proto(response, key)
        responses = await _all(
            self._send_read(shard, message, attempts) for shard in shard_map.shard_ids()
        )
        found = [Record.from_proto(r, key) for r in responses if r.status == _OK]
        chosen = nearest(found, comparison, shard_map.key_order.encoder)
        if chosen is None:
            raise errors.KeyNotFound(f"get {key!r}: no such record")
        return chosen

    async def list(
        self,
        start_inclusive: str,
        end_exclusive: str,
        *,
        partition_key: str | None = None,
        secondary_index: str | None = None,
        limit: int | None = None,
    ) -> list[str]:
        """The keys in [start_inclusive, end_exclusive), in key order (at most
        `limit` of them)."""
        keys: list[str] = []
        if limit is not None and limit <= 0:
            return keys
        iterator = self.iter_list(
            start_inclusive,
            end_exclusive,
            partition_key=partition_key,
            secondary_index=secondary_index,
        )
        try:
            async for key in iterator:
                keys.append(key)
                if limit is not None and len(keys) >= limit:
                    break
        finally:
            await iterator.aclose()
        return keys

    def iter_list(
        self,
        start_inclusive: str,
        end_exclusive: str,
        *,
        partition_key: str | None = None,
        secondary_index: str | None = None,
    ) -> AsyncGenerator[str]:
        """The keys in [start_inclusive, end_exclusive), streamed in key order."""
        self._check_open()
        return self._scans.iter_list(start_inclusive, end_exclusive, partition_key, secondary_index)

    def range_scan(
        self,
        start_inclusive: str,
        end_exclusive: str,
        *,
        partition_key: str | None = None,
        secondary_index: str | None = None,
    ) -> AsyncGenerator[Record]:
        """The records in [start_inclusive, end_exclusive), streamed in key order
        (through an index: in secondary-key order)."""
        self._check_open()
        return self._scans.range_scan(
            start_inclusive, end_exclusive, partition_key, secondary_index
        )

    async def shard_scan(
        self,
        shard: int,
        start_inclusive: str = "",
        end_exclusive: str = KEYS_END,
        *,
        limit: int | None = None,
    ) -> AsyncGenerator[Record]:
        """The records of ONE shard in [start_inclusive, end_exclusive), streamed in
        key order (by default all of them), at most `limit`: a page, to be continued
        from the successor of its last key (`key + "\\x00"`). For work split by
        shard (the Spark source, exports)."""
        self._check_open()
        if not self._follower.map.has_shard(shard):
            raise errors.InvalidArgument(f"namespace {self.namespace!r} has no shard {shard}")
        if limit is not None and limit <= 0:
            return
        stream = self._scans.shard_range_scan(shard, start_inclusive, end_exclusive)
        count = 0
        try:
            async for record in stream:
                yield record
                count += 1
                if limit is not None and count >= limit:
                    return
        finally:
            await stream.aclose()

    # ---- feeds ----------------------------------------------------------------------

    async def notification_head(self, shard: int) -> int:
        """The shard's current commit offset: a feed resumed from it gets only later
        changes."""
        self._check_open()
        return await self._scans.notification_head(shard)

    async def read_notifications(
        self,
        shard: int,
        after_offset: int,
        end_offset: int | None = None,
        *,
        max_batches: int = 1000,
        idle_timeout_s: float | None = None,
        key_prefixes: Sequence[str] = (),
    ) -> NotificationBatches:
        """A bounded read of one shard's feed: its batches with after_offset < offset
        <= end_offset, at most `max_batches`. Offsets of entries that changed nothing
        have no batch: with `idle_timeout_s`, the read ends once no batch came for that
        long (caught up); without, the batch at `end_offset` must come (RequestTimeout
        otherwise). after_offset -1 reads from the oldest retained; an offset older
        than the retention raises NotificationsTrimmed.

        With `key_prefixes`, filtered by the pod as `notifications` is: batches with no
        matching change are not sent, empty ones now and then tell the offset reached,
        and a batch past `end_offset` also ends the read (so an empty result can mean
        that nothing up to `end_offset` matched)."""
        self._check_open()
        if not self._follower.map.has_shard(shard):
            raise errors.InvalidArgument(f"namespace {self.namespace!r} has no shard {shard}")
        return await self._scans.read_notifications(
            shard, after_offset, end_offset, max_batches, idle_timeout_s, tuple(key_prefixes)
        )

    def notifications(
        self,
        start_offsets: Mapping[int, int] | None = None,
        *,
        key_prefixes: Sequence[str] = (),
        include_stat: bool = True,
    ) -> AsyncGenerator[NotificationBatch]:
        """Every change of the namespace, one batch per committed entry and shard.

        With `key_prefixes`, only changes of keys with one of them (and range
        deletions that can cover such a key), filtered by the storage pods: an
        entry with no such change is not sent, and now and then a batch with no
        notifications tells the offset a shard's stream has reached, so that
        resuming from the last offset seen skips what was filtered out.
        `include_stat=False` leaves out the version ids."""
        self._check_open()
        return self._scans.notifications(
            dict(start_offsets or {}), tuple(key_prefixes), include_stat
        )

    def sequence_updates(self, key: str, *, partition_key: str) -> AsyncGenerator[str]:
        """The highest sequence key under `key`: at once if one exists, then each new one."""
        self._check_open()
        return self._scans.sequence_updates(key, partition_key)


async def _all(awaitables: Any) -> list[Any]:
    """Run them together; the first failure cancels the rest and is raised."""
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        raise
