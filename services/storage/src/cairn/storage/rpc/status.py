"""Mapping Cairn errors to gRPC statuses with a google.rpc.ErrorInfo detail."""

from __future__ import annotations

from typing import NoReturn

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from cairn.common.errors import ERROR_DOMAIN, CairnError

# Requests refused, by error reason, since the process started (metrics.py publishes
# them). The reasons are the error tree's: a small fixed set.
REJECTED_BY_REASON: dict[str, int] = {}


def to_status(error: CairnError) -> grpc.Status:
    info = error_details_pb2.ErrorInfo(
        reason=error.reason, domain=ERROR_DOMAIN, metadata=error.metadata
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=int(error.code), message=error.message, details=[detail])
    return rpc_status.to_status(status)


async def abort(context: grpc.aio.ServicerContext, error: CairnError) -> NoReturn:
    REJECTED_BY_REASON[error.reason] = REJECTED_BY_REASON.get(error.reason, 0) + 1
    status = to_status(error)
    await context.abort(status.code, status.details, status.trailing_metadata)
    raise AssertionError("context.abort returned")  # pragma: no cover
