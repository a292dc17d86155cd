"""gRPC servicers: decode, call, encode. No protocol decisions live here."""

from __future__ import annotations

import grpc

from cairn.storage.config import Limits


def new_server(limits: Limits) -> grpc.aio.Server:
    """A grpc.aio server with the storage pod's transport limits (the benchmark's null
    server uses it too, so that its ceiling is measured under the same settings)."""
    return grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", limits.max_message_bytes),
            ("grpc.max_send_message_length", limits.max_message_bytes),
            # Two servers on one port would split clients between them silently.
            ("grpc.so_reuseport", 0),
        ],
        maximum_concurrent_rpcs=limits.max_concurrent_rpcs,
    )
