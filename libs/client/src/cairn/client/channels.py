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


class ChannelPool:
    """`tls`: TLS to every server (None: plaintext). A channel is made again when
    the files change, so connections made after a rotation use the new ones."""

    def __init__(self, max_message_bytes: int, tls: TlsFiles | None = None) -> None:
        options = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.keepalive_time_ms", _KEEPALIVE_MS),
            ("grpc.keepalive_permit_without_calls", 1),
            # Reconnect quickly after a pod restarts (the default backoff reaches 2 min).
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 2_000),
        ]
        self._channels = ChannelCache(TlsSource(tls) if tls is not None else None, options)
        self._stubs: dict[str, Stubs] = {}
        self.closed = False

    def stubs(self, address: str) -> Stubs:
        if self.closed:
            raise RuntimeError("the channel pool is closed")
        channel = self._channels.get(address)
        stubs = self._stubs.get(address)
        if stubs is None or stubs.channel is not channel:
            stubs = self._stubs[address] = Stubs(channel)
        return stubs

    async def close(self) -> None:
        self.closed = True
        self._stubs = {}
        await self._channels.close()


def _method(channel: grpc.aio.Channel, kind: str, name: str, response: Any) -> Any:
    factory: Callable[..., Any] = getattr(channel, kind)
    return factory(
        f"/{SERVICE}/{name}",
        request_serializer=_serialize,
        response_deserializer=response.FromString,
    )


def _serialize(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return data


class Stubs:
    """The client API's methods on one channel."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.channel = channel
        self.get_shard_assignments = _method(
            channel, "unary_stream", "GetShardAssignments", pb.ShardAssignments
        )
        self.write_stream = _method(channel, "stream_stream", "WriteStream", pb.WriteResponse)
        # Traced writes only (writes.py): a unary call's metadata carries the trace context.
        self.write = _method(channel, "unary_unary", "Write", pb.WriteResponse)
        self.read = _method(channel, "unary_stream", "Read", pb.ReadResponse)
        self.list = _method(channel, "unary_stream", "List", pb.ListResponse)
        self.range_scan = _method(channel, "unary_stream", "RangeScan", pb.RangeScanResponse)
        self.get_notifications = _method(
            channel, "unary_stream", "GetNotifications", pb.NotificationBatch
        )
        self.get_sequence_updates = _method(
            channel, "unary_stream", "GetSequenceUpdates", pb.GetSequenceUpdatesResponse
        )
        self.create_session = _method(
            channel, "unary_unary", "CreateSession", pb.CreateSessionResponse
        )
        self.keep_alive = _method(channel, "unary_unary", "KeepAlive", pb.KeepAliveResponse)
        self.close_session = _method(
            channel, "unary_unary", "CloseSession", pb.CloseSessionResponse
        )
