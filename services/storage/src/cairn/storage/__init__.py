"""Cairn storage pod."""

from cairn.common.grpc_runtime import use_poller_io

# Before any module of this package imports grpc: see cairn.common.grpc_runtime.
use_poller_io()
