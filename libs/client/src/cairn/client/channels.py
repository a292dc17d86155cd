"""One gRPC channel per server address, shared by everything a client does there,
and the client API's methods on it (bytes in, messages out)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio

from cairn.common.tls import ChannelCache, TlsFiles, TlsSource
from cairn.proto import oxia_client_pb2 as pb

SERVICE = "io.oxia.proto.v1.OxiaClient"
SHARD_ID_HEADER = "shard-id"
NAMESPACE_HEADER = "namespace"
# A broken connection is noticed within this long even when no call is active.
_KEEPALIVE_MS = 10_000


Metadata = tuple[tuple[str, str], ...]


class ChannelPool:
    """Channels by address. `tls`: TLS to every server (None: plaintext); a
    channel is made again when the files change, so connections made after a
    rotation use the new ones. `metadata` goes with every call made through this
    pool's stubs (credentials: `authorization`, and a gateway's
    `x-cairn-on-behalf-of`); `with_metadata` gives a pool that shares the
    connections but sends other metadata (a gateway's client per caller)."""

    def __init__(
        self, max_message_bytes: int, tls: TlsFiles | None = None, metadata: Metadata = ()
    ) -> None:
        options = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.keepalive_time_ms", _KEEPALIVE_MS),
            ("grpc.keepalive_permit_without_calls", 1),
            # Reconnect quickly after a pod restarts (the default backoff reaches 2 min).
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 2_000),
        ]
        self.metadata = metadata
        # Shared with the pools `with_metadata` made; the first pool owns (closes) them.
        self._channels = ChannelCache(TlsSource(tls) if tls is not None else None, options)
        self._stubs: dict[str, Stubs] = {}
        self._owner = True
        self.closed = False

    def with_metadata(self, extra: Metadata) -> ChannelPool:
        view = ChannelPool.__new__(ChannelPool)
        view.metadata = self.metadata + extra
        view._channels = self._channels
        view._stubs = {}
        view._owner = False
        view.closed = False
        return view

    def stubs(self, address: str) -> Stubs:
        if self.closed:
            raise RuntimeError("the channel pool is closed")
        channel = self._channels.get(address)
        stubs = self._stubs.get(address)
        if stubs is None or stubs.channel is not channel:
            stubs = self._stubs[address] = Stubs(channel, self.metadata)
        return stubs

    async def close(self) -> None:
        self.closed = True
        self._stubs = {}
        if self._owner:
            await self._channels.close()


def _method(
    channel: grpc.aio.Channel, kind: str, name: str, response: Any, metadata: Metadata = ()
) -> Any:
    factory: Callable[..., Any] = getattr(channel, kind)
    method = factory(
        f"/{SERVICE}/{name}",
        request_serializer=_serialize,
        response_deserializer=response.FromString,
    )
    if not metadata:
        return method

    # A bidirectional stream is opened without a request (the writer writes later).
    def with_metadata(*args: Any, metadata: Metadata | None = None, **kwargs: Any) -> Any:
        return method(*args, metadata=extra + tuple(metadata or ()), **kwargs)

    extra = metadata
    return with_metadata


def _serialize(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return data


class Stubs:
    """The client API's methods on one channel."""

    def __init__(self, channel: grpc.aio.Channel, metadata: Metadata = ()) -> None:
        self.channel = channel
        m = metadata
        self.get_shard_assignments = _method(
            channel, "unary_stream", "GetShardAssignments", pb.ShardAssignments, m
        )
        self.write_stream = _method(channel, "stream_stream", "WriteStream", pb.WriteResponse, m)
        # Traced writes only (writes.py): a unary call's metadata carries the trace context.
        self.write = _method(channel, "unary_unary", "Write", pb.WriteResponse, m)
        self.read = _method(channel, "unary_stream", "Read", pb.ReadResponse, m)
        self.list = _method(channel, "unary_stream", "List", pb.ListResponse, m)
        self.range_scan = _method(channel, "unary_stream", "RangeScan", pb.RangeScanResponse, m)
        self.get_notifications = _method(
            channel, "unary_stream", "GetNotifications", pb.NotificationBatch, m
        )
        self.get_sequence_updates = _method(
            channel, "unary_stream", "GetSequenceUpdates", pb.GetSequenceUpdatesResponse, m
        )
        self.create_session = _method(
            channel, "unary_unary", "CreateSession", pb.CreateSessionResponse, m
        )
        self.keep_alive = _method(channel, "unary_unary", "KeepAlive", pb.KeepAliveResponse, m)
        self.close_session = _method(
            channel, "unary_unary", "CloseSession", pb.CloseSessionResponse, m
        )
