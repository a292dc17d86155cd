"""gRPC servicers: decode, call, encode. No protocol decisions live here."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import grpc.aio

from cairn.common import tracing
from cairn.storage.config import Limits

# The most frequent keep-alive ping a client may send (the Cairn client pings every
# 10 s; Go and Java Oxia clients are in the same range).
CLIENT_PING_MIN_INTERVAL_MS = 5_000


def new_server(
    limits: Limits, interceptors: Sequence[grpc.aio.ServerInterceptor] = ()
) -> grpc.aio.Server:
    """A grpc.aio server with the storage pod's transport limits (the benchmark's null
    server uses it too, so that its ceiling is measured under the same settings)."""
    return grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", limits.max_message_bytes),
            ("grpc.max_send_message_length", limits.max_message_bytes),
            # Two servers on one port would split clients between them silently.
            ("grpc.so_reuseport", 0),
            # Clients ping to notice dead connections, also while their streams are
            # quiet (an idle notification feed). gRPC's defaults answer a ping more
            # often than every 5 minutes without data with GOAWAY "too_many_pings";
            # accept one every CLIENT_PING_MIN_INTERVAL_MS instead.
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_recv_ping_interval_without_data_ms", CLIENT_PING_MIN_INTERVAL_MS),
            ("grpc.http2.min_ping_interval_without_data_ms", CLIENT_PING_MIN_INTERVAL_MS),
        ],
        maximum_concurrent_rpcs=limits.max_concurrent_rpcs,
        # A span per RPC when tracing is on; none of its interceptors when it is off.
        interceptors=[*tracing.server_interceptors(), *interceptors] or None,
    )
