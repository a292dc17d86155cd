"""The Oxia-compatible client service, served under both of its names.

Handlers are registered with raw-bytes request (de)serialization where it
pays: a write request's bytes go into the WAL exactly as received.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from cairn.common import tracing
from cairn.common.auth.config import disabled as disabled_auth
from cairn.common.auth.rules import Access
from cairn.common.errors import CairnError, InvalidRequest, NotificationsTrimmed, QuotaExceeded
from cairn.common.identity import Role
from cairn.common.telemetry import LatencyCounter
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.clock import wall_clock_ms
from cairn.storage.config import Limits
from cairn.storage.core import reads
from cairn.storage.core.access import (
    Caller,
    ScanFilter,
    key_problem,
    namespace_problem,
    read_problem,
    session_problem,
    some_access_problem,
    write_problem,
)
from cairn.storage.core.fastpath import has_plain_puts
from cairn.storage.core.notification_filter import change_filter
from cairn.storage.core.notifications import stored_batches, trimmed_before
from cairn.storage.core.quotas import Quota, session_cap_problem
from cairn.storage.core.routing_check import misrouted, routing_key_of_write
from cairn.storage.core.sequences import SequenceSearchTooLong, highest_sequence_key
from cairn.storage.core.validation import (
    validate_range,
    validate_read,
    validate_sequence_updates,
    validate_write,
)
from cairn.storage.directory import ShardDirectory
from cairn.storage.kv.store import Column
from cairn.storage.rpc.access import AccessControl
from cairn.storage.rpc.status import abort
from cairn.storage.shard import ShardReplica

SERVICE_NAMES = ("io.oxia.proto.v1.OxiaClient", "io.streamnative.oxia.proto.OxiaClient")
log = logging.getLogger(__name__)
SHARD_ID_HEADER = "shard-id"
MISROUTED_LOG_INTERVAL_S = 60.0
NAMESPACE_HEADER = "namespace"


def _parse(message_type: Any, raw: bytes) -> Any:
    try:
        return message_type.FromString(raw)
    except DecodeError as error:
        raise InvalidRequest(f"malformed {message_type.DESCRIPTOR.name}: {error}") from None


def _header(context: grpc.aio.ServicerContext, name: str) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == name:
            return str(value)
    return None


class ClientService:
    def __init__(
        self, directory: ShardDirectory, limits: Limits, access: AccessControl | None = None
    ) -> None:
        self.directory = directory
        self.limits = limits
        # Without one: no authentication, everything allowed (an explicit choice of
        # whoever builds the service; cairn-storage asks for it by flag).
        self.access = access if access is not None else AccessControl(disabled_auth())
        self.notification_quota = Quota(
            "notification streams",
            limits.max_notification_streams_per_principal,
            limits.max_notification_streams_per_pod,
        )
        self.sequence_quota = Quota(
            "sequence-update streams",
            limits.max_sequence_streams_per_principal,
            limits.max_sequence_streams_per_pod,
        )
        # Metrics (metrics.py publishes them): call durations of the calls that end
        # (unary, and the bounded server streams: a read's chunks, a list's, a scan's),
        # each request's duration on a WriteStream (the call itself lives as long as
        # its client), and the streams open per shard id.
        self.call_latency = {
            "Write": LatencyCounter(),
            "Read": LatencyCounter(),
            "List": LatencyCounter(),
            "RangeScan": LatencyCounter(),
        }
        self.stream_request_latency = {"WriteStream": LatencyCounter()}
        self.notification_subscribers: dict[int, int] = {}
        self.sequence_subscribers: dict[int, int] = {}
        # Write requests whose first key XXH3 routes to another shard, per shard id
        # (core/routing_check.py), and when each shard last said so in the log.
        self.misrouted_writes: dict[int, int] = {}
        self._misrouted_logged: dict[int, tuple[float, int]] = {}

    # ---- shard map ------------------------------------------------------------------

    async def get_shard_assignments(
        self, request: pb.ShardAssignmentsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ShardAssignments]:
        try:
            namespace = request.namespace or self.directory.default_namespace
            caller = self.access.caller(context, "GetShardAssignments")
            # A gateway reads every namespace's map to route its callers' requests
            # (which carry their own identity); the map holds no records.
            if caller.policy.enabled and caller.principal.role is not Role.GATEWAY:
                self._check(
                    caller,
                    "GetShardAssignments",
                    some_access_problem(caller, Access.READ, namespace),
                )
            first = await self.directory.first_assignments(namespace)
        except CairnError as error:
            await abort(context, error)
        if first is None:
            return
        version, message = first
        yield message
        # The stream stays open: later messages are full snapshots after a change.
        while True:
            changed = await self.directory.wait_for_assignment_change(version)
            if changed is None:
                return
            version, message = self.directory.assignments(namespace)
            yield message

    # ---- writes ---------------------------------------------------------------------

    def _check(self, caller: Caller, method: str, problem: str | None) -> None:
        if problem is not None:
            self.access.refuse(caller, method, problem)

    async def _submit_one(
        self, raw: bytes, header_shard: int | None, caller: Caller, peer: str
    ) -> tuple[ShardReplica, asyncio.Future[bytes]]:
        request: pb.WriteRequest = _parse(pb.WriteRequest, raw)
        if request.HasField("shard"):
            shard_id = request.shard
        elif header_shard is not None:
            shard_id = header_shard
        else:
            raise InvalidRequest("write request names no shard")
        shard = self.directory.leader_shard(shard_id)
        plain_puts = has_plain_puts(raw)
        validate_write(request, self.limits, len(raw), plain_puts)
        # Checked before the entry is logged: a refused write changes nothing.
        self._check(
            caller, "Write", write_problem(caller, shard.namespace, request, shard.sessions.owner)
        )
        routing_key = routing_key_of_write(request)
        if misrouted(routing_key, self.directory.hash_range(shard_id)):
            self._count_misrouted(shard_id, routing_key, peer)
        return shard, await shard.submit(raw, request, plain_puts)

    def _count_misrouted(self, shard_id: int, key: str | None, peer: str) -> None:
        """Count a misrouted write; say so in the log at most once a minute per shard."""
        count = self.misrouted_writes.get(shard_id, 0) + 1
        self.misrouted_writes[shard_id] = count
        now_s = time.monotonic()
        logged_s, logged_count = self._misrouted_logged.get(shard_id, (-math.inf, 0))
        if now_s - logged_s < MISROUTED_LOG_INTERVAL_S:
            return
        self._misrouted_logged[shard_id] = (now_s, count)
        log.warning(
            "shard %d: %d write request(s) since the last report were sent here although "
            "the shard map's XXH3 routes their keys elsewhere (the last from %s, key %r): a "
            "client hashing keys another way (the oxia 0.2.1 Python client hashes with "
            "XXH64) puts data where XXH3 clients do not find it",
            shard_id,
            count - logged_count,
            peer,
            (key or "")[:100],
        )

    async def write(self, raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        """Raw bytes in and out: the request goes to the WAL as received, and the
        response comes hand-encoded from the apply step."""
        if tracing.ENABLED:
            return await self._write_traced(raw, context)
        started_ns = time.perf_counter_ns()
        try:
            caller = self.access.caller(context, "Write")
            shard, future = await self._submit_one(raw, None, caller, context.peer())
            response = await future
        except CairnError as error:
            await abort(context, error)
        shard.counters.write_latency.record_since(started_ns)
        self.call_latency["Write"].record_since(started_ns)
        return response

    async def _write_traced(self, raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        """`write` with the leader's two steps as spans (one per request, never per
        operation): append (validate, then log the entry or join the fold) and
        commit (fsync, a quorum of the ensemble durable, apply)."""
        tracer = tracing.tracer()
        started_ns = time.perf_counter_ns()
        try:
            caller = self.access.caller(context, "Write")
            with tracer.start_as_current_span("cairn.shard.append") as span:
                shard, future = await self._submit_one(raw, None, caller, context.peer())
                attributes: dict[str, str | int] = {
                    "cairn.shard": shard.shard_id,
                    "cairn.namespace": shard.namespace,
                }
                span.set_attributes(attributes)
            with tracer.start_as_current_span("cairn.shard.commit", attributes=attributes):
                response = await future
        except CairnError as error:
            await abort(context, error)
        shard.counters.write_latency.record_since(started_ns)
        self.call_latency["Write"].record_since(started_ns)
        return response

    async def write_stream(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        header = _header(context, SHARD_ID_HEADER)
        try:
            header_shard = int(header) if header is not None else None
        except ValueError:
            await abort(context, InvalidRequest(f"invalid {SHARD_ID_HEADER} header {header!r}"))
        try:
            caller = self.access.caller(context, "WriteStream")
        except CairnError as error:
            await abort(context, error)
        namespace = _header(context, NAMESPACE_HEADER)
        if namespace is not None and header_shard is not None:
            try:
                self.directory.check_shard_namespace(header_shard, namespace)
            except CairnError as error:
                await abort(context, error)
        # Requests are pipelined: up to a bound of them are in flight, and the
        # responses go back in request order.
        # (shard, start time, future) per request; the shard None for a refused one.
        in_flight: asyncio.Queue[tuple[ShardReplica | None, int, asyncio.Future[bytes]] | None] = (
            asyncio.Queue(self.limits.max_inflight_per_write_stream)
        )

        loop = asyncio.get_running_loop()
        peer = context.peer()

        async def read_requests() -> None:
            try:
                async for raw in requests:
                    started_ns = time.perf_counter_ns()
                    shard: ShardReplica | None
                    try:
                        shard, future = await self._submit_one(raw, header_shard, caller, peer)
                    except CairnError as error:
                        shard, future = None, loop.create_future()
                        future.set_exception(error)
                    await in_flight.put((shard, started_ns, future))
            finally:
                await in_flight.put(None)

        stream_latency = self.stream_request_latency["WriteStream"]
        reader = asyncio.create_task(read_requests())
        try:
            while (taken := await in_flight.get()) is not None:
                shard, started_ns, future = taken
                try:
                    response = await future
                except CairnError as error:
                    await abort(context, error)
                if shard is not None:
                    shard.counters.write_latency.record_since(started_ns)
                    stream_latency.record_since(started_ns)
                yield response
            await reader  # surfaces a failure to read the request stream
        finally:
            reader.cancel()
            while not in_flight.empty():
                pending = in_flight.get_nowait()
                if pending is not None:
                    pending[2].cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    # ---- reads ----------------------------------------------------------------------

    async def read(
        self, request: pb.ReadRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        started_ns = time.perf_counter_ns()
        try:
            caller = self.access.caller(context, "Read")
            shard = await self.directory.serving_shard(self._shard_of(request, context))
            validate_read(request, self.limits)
            self._check(caller, "Read", read_problem(caller, shard.namespace, request))
        except CairnError as error:
            await abort(context, error)
        shard.count_read(len(request.gets))
        chunks = reads.get_chunks(
            shard.kv,
            request.gets,
            shard.key_order,
            self.limits.max_gets_per_read_chunk,
            shard.read_cache,
        )
        try:
            for chunk in chunks:
                yield chunk
        except CairnError as error:
            await abort(context, error)
        shard.counters.read_latency.record_since(started_ns)
        self.call_latency["Read"].record_since(started_ns)

    async def list(
        self, request: pb.ListRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ListResponse]:
        started_ns = time.perf_counter_ns()
        try:
            shard, index, allowed = await self._range_target(request, context, "List")
        except CairnError as error:
            await abort(context, error)
        max_keys, max_bytes = self.limits.max_keys_per_list_chunk, self.limits.max_bytes_per_chunk
        keys: list[str] = []
        size = 0
        start, end = request.start_inclusive, request.end_exclusive
        found = (
            reads.list_index(shard.kv, index, start, end, shard.key_order)
            if index is not None
            else (key for key, _ in reads.scan_records(shard.kv, start, end, shard.key_order))
        )
        for key in found:
            if not allowed.allows(key):
                continue
            keys.append(key)
            size += len(key)
            if len(keys) >= max_keys or size >= max_bytes:
                yield pb.ListResponse(keys=keys)
                keys, size = [], 0
        if keys:
            yield pb.ListResponse(keys=keys)
        self.call_latency["List"].record_since(started_ns)

    async def range_scan(
        self, request: pb.RangeScanRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.RangeScanResponse]:
        started_ns = time.perf_counter_ns()
        try:
            shard, index, allowed = await self._range_target(request, context, "RangeScan")
        except CairnError as error:
            await abort(context, error)
        max_records = self.limits.max_records_per_scan_chunk
        max_bytes = self.limits.max_bytes_per_chunk
        chunk = pb.RangeScanResponse()
        size = 0
        start, end = request.start_inclusive, request.end_exclusive
        records: Iterator[tuple[str, bytes, str | None]] = (
            reads.scan_index_records(shard.kv, index, start, end, shard.key_order)
            if index is not None
            else (
                (k, d, None) for k, d in reads.scan_records(shard.kv, start, end, shard.key_order)
            )
        )
        shard.counters.scan_requests += 1
        for key, data, secondary in records:
            shard.counters.scan_records += 1
            if not allowed.allows(key):
                continue
            record = reads.record_response(
                key, data, include_value=True, response=chunk.records.add()
            )
            if secondary is not None:
                record.secondary_index_key = secondary
            size += len(key) + len(data)
            if len(chunk.records) >= max_records or size >= max_bytes:
                yield chunk
                chunk, size = pb.RangeScanResponse(), 0
        if chunk.records:
            yield chunk
        self.call_latency["RangeScan"].record_since(started_ns)

    # ---- notifications --------------------------------------------------------------

    async def get_notifications(
        self, request: pb.NotificationsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        try:
            caller = self.access.caller(context, "GetNotifications")
            if caller.policy.enabled:
                shard = await self.directory.serving_shard(request.shard)
                self._check(
                    caller,
                    "GetNotifications",
                    namespace_problem(caller, Access.READ, shard.namespace),
                )
        except CairnError as error:
            await abort(context, error)
        async with (
            self._quota(self.notification_quota, caller, context),
            _counted(self.notification_subscribers, request.shard),
        ):
            async for shard, batch in self._notifications(request, context):
                shard.counters.notification_batches_sent += 1
                shard.counters.notification_bytes_sent += len(batch)
                yield batch

    @contextlib.asynccontextmanager
    async def _quota(
        self, quota: Quota, caller: Caller, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[None]:
        problem = quota.acquire(caller.owner)
        if problem is not None:
            log.warning("stream of %s refused: %s", caller.principal, problem)
            await abort(context, QuotaExceeded(problem))
        try:
            yield
        finally:
            quota.release(caller.owner)

    async def _notifications(
        self, request: pb.NotificationsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[tuple[ShardReplica, bytes]]:
        """Serialized NotificationBatches (with the replica sending them, which
        counts them), read from the shard's durable store at the subscriber's own
        pace: no per-subscriber buffer, so a slow subscriber costs no memory (gRPC
        flow control pauses this generator); one that falls behind the retention is
        told so and can resubscribe.

        A filtered subscriber (key prefixes, no version ids: notification_filter.py)
        is sent only the entries with a change it wants. So that it can resume past
        the entries it was not sent, it gets the offset reached in a batch with no
        notifications once it is caught up, at most once per
        `notification_progress_interval_ms`; a resume from an older offset is still
        exact, it only reads those entries again."""
        try:
            shard = await self.directory.serving_shard(request.shard)
            if not shard.notifications_enabled:
                raise InvalidRequest(
                    f"notifications are disabled for namespace {shard.namespace!r}"
                )
            wanted = change_filter(
                request,
                shard.key_order,
                self.limits.max_prefixes_per_subscription,
                self.limits.max_key_bytes,
            )
        except CairnError as error:
            await abort(context, error)
        if request.HasField("start_offset_exclusive"):
            position = request.start_offset_exclusive
        else:
            # A new subscriber learns where "now" is at once.
            position = shard.applied_offset
            yield shard, self._progress(shard, position)
        limit = self.limits.max_notification_batches_per_read
        progress_interval_s = self.limits.notification_progress_interval_ms / 1000
        loop = asyncio.get_running_loop()
        last_sent_s = loop.time()
        # Whether entries were passed over since the last batch sent.
        passed_over = False
        while True:
            if position + 1 < trimmed_before(shard.kv):
                await abort(
                    context,
                    NotificationsTrimmed(
                        f"notifications after offset {position} of shard {shard.shard_id} "
                        "were trimmed (retention); subscribe again without a start offset"
                    ),
                )
            # Everything committed up to here is in the KV before the scan starts.
            seen_commit = shard.applied_offset
            batches = stored_batches(shard.kv, position, limit)
            for offset, batch in batches:
                position = offset
                selected = wanted.select(batch)
                passed_over = selected is None
                if selected is not None:
                    yield shard, selected
                    last_sent_s = loop.time()
            if len(batches) == limit:
                continue
            if shard.closing:
                return
            if not passed_over:
                await shard.wait_for_commit_after(seen_commit)
                continue
            due_in_s = last_sent_s + progress_interval_s - loop.time()
            if due_in_s <= 0:
                yield shard, self._progress(shard, position)
                last_sent_s = loop.time()
                passed_over = False
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(due_in_s):
                    await shard.wait_for_commit_after(seen_commit)

    @staticmethod
    def _progress(shard: ShardReplica, offset: int) -> bytes:
        """A batch with no notifications: the stream has reached `offset`."""
        return pb.NotificationBatch(
            shard=shard.shard_id, offset=offset, timestamp=wall_clock_ms()
        ).SerializeToString()

    # ---- sequence updates -----------------------------------------------------------

    async def get_sequence_updates(
        self, request: pb.GetSequenceUpdatesRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GetSequenceUpdatesResponse]:
        try:
            caller = self.access.caller(context, "GetSequenceUpdates")
            if caller.policy.enabled:
                shard = await self.directory.serving_shard(request.shard)
                self._check(
                    caller,
                    "GetSequenceUpdates",
                    key_problem(caller, Access.READ, shard.namespace, request.key),
                )
        except CairnError as error:
            await abort(context, error)
        async with (
            self._quota(self.sequence_quota, caller, context),
            _counted(self.sequence_subscribers, request.shard),
        ):
            async for update in self._sequence_updates(request, context):
                yield update

    async def _sequence_updates(
        self, request: pb.GetSequenceUpdatesRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GetSequenceUpdatesResponse]:
        """The highest sequence key of `request.key` at once (if there is one), then
        the new highest key after each commit of sequence puts on the shard; several
        commits between two looks coalesce into the latest key. Nothing is buffered
        per subscriber: each wake-up is one bounded search of the committed state.
        Ends only when the client cancels or the shard stops serving."""
        try:
            shard = await self.directory.serving_shard(request.shard)
            validate_sequence_updates(request, self.limits)
        except CairnError as error:
            await abort(context, error)
        prefix = shard.key_order.encode(request.key)
        kv = shard.kv

        def floor(key: bytes, inclusive: bool) -> bytes | None:
            found = kv.floor(Column.RECORDS, key, inclusive)
            return None if found is None else found[0]

        sent: bytes | None = None
        while True:
            generation = shard.sequence_generation
            try:
                highest = highest_sequence_key(floor, prefix)
            except SequenceSearchTooLong:
                highest = None  # sequence puts on this prefix are refused too
            if highest is not None and highest != sent:
                sent = highest
                yield pb.GetSequenceUpdatesResponse(
                    highest_sequence_key=shard.key_order.decode(highest)
                )
            if shard.closing:
                return
            await shard.wait_for_sequence_update(generation)

    # ---- sessions -------------------------------------------------------------------

    async def create_session(
        self, request: pb.CreateSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateSessionResponse:
        try:
            caller = self.access.caller(context, "CreateSession")
            shard = self.directory.leader_shard(request.shard)
            if caller.policy.enabled:
                self._check(
                    caller,
                    "CreateSession",
                    some_access_problem(caller, Access.WRITE, shard.namespace),
                )
            if len(request.client_identity.encode("utf-8")) > self.limits.max_key_bytes:
                raise InvalidRequest("client identity is too long")
            self._check_session_cap(caller)
            # The owner is the authenticated caller, never the client_identity it sent.
            session_id = await shard.sessions.create(
                request.session_timeout_ms, request.client_identity, caller.owner
            )
        except CairnError as error:
            await abort(context, error)
        return pb.CreateSessionResponse(session_id=session_id)

    async def keep_alive(
        self, request: pb.SessionHeartbeat, context: grpc.aio.ServicerContext
    ) -> pb.KeepAliveResponse:
        try:
            caller = self.access.caller(context, "KeepAlive")
            shard = self.directory.leader_shard(request.shard)
            self._check(
                caller,
                "KeepAlive",
                session_problem(caller, shard.sessions.owner(request.session_id)),
            )
            await shard.sessions.keep_alive(request.session_id)
        except CairnError as error:
            await abort(context, error)
        return pb.KeepAliveResponse()

    async def close_session(
        self, request: pb.CloseSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.CloseSessionResponse:
        try:
            caller = self.access.caller(context, "CloseSession")
            shard = self.directory.leader_shard(request.shard)
            self._check(
                caller,
                "CloseSession",
                session_problem(caller, shard.sessions.owner(request.session_id)),
            )
            await shard.sessions.close(request.session_id)
        except CairnError as error:
            await abort(context, error)
        return pb.CloseSessionResponse()

    def _check_session_cap(self, caller: Caller) -> None:
        leaders = [r for r in self.directory.replicas() if r.leader_role is not None]
        problem = session_cap_problem(
            caller.owner,
            sum(r.sessions.owned_by(caller.owner) for r in leaders),
            sum(len(r.sessions) for r in leaders),
            self.limits.max_sessions_per_principal,
            self.limits.max_sessions_per_pod,
        )
        if problem is not None:
            log.warning("session of %s refused: %s", caller.principal, problem)
            raise QuotaExceeded(problem)

    async def _range_target(
        self,
        request: pb.ListRequest | pb.RangeScanRequest,
        context: grpc.aio.ServicerContext,
        method: str,
    ) -> tuple[ShardReplica, str | None, ScanFilter]:
        """The shard a List/RangeScan reads, the secondary index it uses, if any,
        and which of the keys found the caller may see (primary keys, also when
        listing by index)."""
        caller = self.access.caller(context, method)
        shard = await self.directory.serving_shard(self._shard_of(request, context))
        index = request.secondary_index_name if request.HasField("secondary_index_name") else None
        validate_range(request.start_inclusive, request.end_exclusive, index, self.limits)
        allowed = ScanFilter(caller, shard.namespace)
        self._check(caller, method, allowed.refusal)
        return shard, index, allowed

    def _shard_of(self, request: Any, context: grpc.aio.ServicerContext) -> int:
        if request.HasField("shard"):
            return int(request.shard)
        header = _header(context, SHARD_ID_HEADER)
        if header is None:
            raise InvalidRequest("request names no shard")
        try:
            return int(header)
        except ValueError:
            raise InvalidRequest(f"invalid {SHARD_ID_HEADER} header {header!r}") from None


@contextlib.asynccontextmanager
async def _counted(counts: dict[int, int], shard_id: int) -> AsyncIterator[None]:
    """One more open stream on `shard_id` while the block runs."""
    counts[shard_id] = counts.get(shard_id, 0) + 1
    try:
        yield
    finally:
        left = counts[shard_id] - 1
        if left:
            counts[shard_id] = left
        else:
            del counts[shard_id]


def _unary(
    behavior: Callable[..., Any], request_type: Any, response_type: Any
) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(
        behavior,
        request_deserializer=request_type.FromString,
        response_serializer=response_type.SerializeToString,
    )


def _unary_stream(
    behavior: Callable[..., AsyncIterator[Any]], request_type: Any, response_type: Any
) -> grpc.RpcMethodHandler:
    return grpc.unary_stream_rpc_method_handler(
        behavior,
        request_deserializer=request_type.FromString,
        response_serializer=response_type.SerializeToString,
    )


def generic_handlers(service: ClientService) -> list[grpc.GenericRpcHandler]:
    """Handlers for both service names."""
    methods = {
        "GetShardAssignments": _unary_stream(
            service.get_shard_assignments, pb.ShardAssignmentsRequest, pb.ShardAssignments
        ),
        # Writes: raw bytes both ways (no (de)serializer), see ClientService.write.
        "Write": grpc.unary_unary_rpc_method_handler(service.write),
        "WriteStream": grpc.stream_stream_rpc_method_handler(service.write_stream),
        # Answers are serialized as they are built (reads.get_chunks).
        "Read": grpc.unary_stream_rpc_method_handler(
            service.read, request_deserializer=pb.ReadRequest.FromString
        ),
        "List": _unary_stream(service.list, pb.ListRequest, pb.ListResponse),
        "RangeScan": _unary_stream(service.range_scan, pb.RangeScanRequest, pb.RangeScanResponse),
        "GetSequenceUpdates": _unary_stream(
            service.get_sequence_updates,
            pb.GetSequenceUpdatesRequest,
            pb.GetSequenceUpdatesResponse,
        ),
        # Stored batches are sent as they were serialized when committed.
        "GetNotifications": grpc.unary_stream_rpc_method_handler(
            service.get_notifications, request_deserializer=pb.NotificationsRequest.FromString
        ),
        "CreateSession": _unary(
            service.create_session, pb.CreateSessionRequest, pb.CreateSessionResponse
        ),
        "KeepAlive": _unary(service.keep_alive, pb.SessionHeartbeat, pb.KeepAliveResponse),
        "CloseSession": _unary(
            service.close_session, pb.CloseSessionRequest, pb.CloseSessionResponse
        ),
    }
    return [grpc.method_handlers_generic_handler(name, methods) for name in SERVICE_NAMES]
