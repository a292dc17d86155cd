"""The follower side of replication: Truncate, Replicate, SendSnapshot.

Decode, call the shard replica, encode; the rules are in the replica's core.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc

from cairn.common import tracing
from cairn.common.errors import CairnError, InvalidRequest
from cairn.proto import replication_pb2 as rpb
from cairn.storage.directory import ShardDirectory
from cairn.storage.replication.follower_spans import FollowerSpans
from cairn.storage.replication.wire import (
    entry_id_message,
    history_of_message,
    log_entry_of,
    member_of,
)
from cairn.storage.rpc.status import abort
from cairn.storage.snapshot import SnapshotError

# How long an acknowledgement that only reports applying waits for more progress.
APPLIED_LINGER_S = 0.005


class ReplicationService:
    def __init__(self, directory: ShardDirectory) -> None:
        self.directory = directory

    async def truncate(
        self, request: rpb.TruncateRequest, context: grpc.aio.ServicerContext
    ) -> rpb.TruncateResponse:
        try:
            replica = self.directory.replica(request.shard)
            head = await replica.truncate(
                request.term,
                member_of(request.leader),
                history_of_message(request.leader_terms, request.leader_head),
            )
        except CairnError as error:
            await abort(context, error)
        return rpb.TruncateResponse(
            head=entry_id_message(head),
            commit_offset=replica.commit_offset,
            first_offset=replica.log.first_offset,
            incarnation=replica.incarnation,
        )

    async def replicate(
        self, requests: AsyncIterator[rpb.ReplicateRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[rpb.ReplicateResponse]:
        """Appends what arrives; answers the durable and applied offsets each time
        one advances, and at once to a heartbeat, echoing the latest leader time."""
        first = await anext(requests, None)
        if first is None:
            return
        try:
            replica = self.directory.replica(first.shard)
        except CairnError as error:
            await abort(context, error)

        leader_time_ms = 0
        heartbeat = asyncio.Event()
        spans = FollowerSpans(first.shard) if tracing.ENABLED else None

        async def take_entries() -> None:
            nonlocal leader_time_ms
            request: rpb.ReplicateRequest | None = first
            while request is not None:
                # The changes first: the commit offset that comes with them lets
                # the applier run, which should find them.
                replica.take_leader_changes(request.term, request.applied_changes)
                with spans.appending(request) if spans is not None else contextlib.nullcontext():
                    await replica.append_replicated(
                        request.term,
                        [log_entry_of(entry) for entry in request.entries],
                        request.commit_offset,
                    )
                # Echoed with our next answer: the leader's lease (lease.py).
                leader_time_ms = max(leader_time_ms, request.leader_time_ms)
                if request.heartbeat:
                    heartbeat.set()
                request = await anext(requests, None)

        stream_term = first.term
        loop = asyncio.get_running_loop()
        taker = loop.create_task(take_entries())
        beat = loop.create_task(heartbeat.wait())
        durable, applied = -2, -2
        try:
            while True:
                progress = asyncio.ensure_future(replica.wait_progress_after(durable, applied))
                done, _ = await asyncio.wait(
                    (taker, progress, beat), return_when=asyncio.FIRST_COMPLETED
                )
                beaten = beat in done
                if beaten:
                    heartbeat.clear()
                    beat = loop.create_task(heartbeat.wait())
                elif progress in done:
                    now_durable, _ = progress.result()
                    if now_durable == durable and not replica.closing:
                        # Only the applied offset moved: the leader shows it in its
                        # status, and commits on durable steps only; let a few such
                        # steps travel together, but not hold back a durable one.
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(APPLIED_LINGER_S):
                                await replica.wait_durable_after(now_durable)
                if progress in done or beaten:
                    try:
                        replica.core.check_following(stream_term)
                    except CairnError as error:
                        await abort(context, error)
                    durable, applied = replica.durable_offset, replica.applied_offset
                    if spans is not None:
                        spans.acknowledged(durable)
                    yield rpb.ReplicateResponse(
                        durable_offset=durable,
                        applied_offset=applied,
                        term=stream_term,
                        leader_time_ms=leader_time_ms,
                        incarnation=replica.incarnation,
                    )
                    if replica.closing:
                        return  # shutting down: the leader reconnects elsewhere or later
                if progress not in done:
                    progress.cancel()
                if taker in done:
                    try:
                        taker.result()
                    except CairnError as error:
                        await abort(context, error)
                    return
        finally:
            beat.cancel()
            taker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await taker
            if spans is not None:
                spans.close()

    async def send_snapshot(
        self, chunks: AsyncIterator[rpb.SnapshotChunk], context: grpc.aio.ServicerContext
    ) -> rpb.SnapshotResponse:
        first = await anext(chunks, None)
        try:
            if first is None or not first.HasField("header"):
                raise InvalidRequest("a snapshot must start with a chunk carrying its header")
            header = first.header
            replica = self.directory.replica(header.shard)

            async def all_chunks() -> AsyncIterator[rpb.SnapshotChunk]:
                yield first
                async for chunk in chunks:
                    yield chunk

            head = await replica.install_snapshot(
                header.term, member_of(header.leader), all_chunks()
            )
        except SnapshotError as error:
            await abort(context, InvalidRequest(f"snapshot refused: {error}"))
        except CairnError as error:
            await abort(context, error)
        return rpb.SnapshotResponse(head=entry_id_message(head))


def replication_handlers(service: ReplicationService) -> grpc.GenericRpcHandler:
    methods = {
        "Truncate": grpc.unary_unary_rpc_method_handler(
            service.truncate,
            request_deserializer=rpb.TruncateRequest.FromString,
            response_serializer=rpb.TruncateResponse.SerializeToString,
        ),
        "Replicate": grpc.stream_stream_rpc_method_handler(
            service.replicate,
            request_deserializer=rpb.ReplicateRequest.FromString,
            response_serializer=rpb.ReplicateResponse.SerializeToString,
        ),
        "SendSnapshot": grpc.stream_unary_rpc_method_handler(
            service.send_snapshot,
            request_deserializer=rpb.SnapshotChunk.FromString,
            response_serializer=rpb.SnapshotResponse.SerializeToString,
        ),
    }
    return grpc.method_handlers_generic_handler("cairn.replication.v1.Replication", methods)
