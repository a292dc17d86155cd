"""How the client reads a failed call: what happened, and whether to retry.

A server's error is a gRPC status with, from Cairn and Oxia servers, a
`google.rpc.ErrorInfo` detail whose `reason` names it and whose metadata may hold
the leader's address. Three answers matter to a caller:

- `Fatal`: the request itself is wrong (invalid, unknown namespace or session):
  it is raised to the caller as its ClientError.
- `Retry`: nothing was applied (no leader here, shard moving, overload,
  connection refused): send it again after a backoff, to `leader_hint` if any.
- `Retry` with `ambiguous=True`: a write was sent and its answer lost (the leader
  changed before committing it, or the connection broke): it may have applied.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2

from cairn.client import errors

_DETAILS_KEY = "grpc-status-details-bin"
_LEADER_HINT_KEY = "leader"

# Reasons that mean "not accepted, nothing applied" even after the request was
# sent (the server refused it before logging it).
_NOT_APPLIED_REASONS = frozenset(
    {"NODE_IS_NOT_LEADER", "SHARD_NOT_FOUND", "OVERLOADED", "INVALID_TERM", "UNAVAILABLE"}
)
_RETRYABLE_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
    }
)


@dataclass(frozen=True, slots=True)
class ServerStatus:
    code: grpc.StatusCode
    reason: str  # ErrorInfo.reason, '' when the status carries none
    message: str
    leader_hint: str | None


@dataclass(frozen=True, slots=True)
class Retry:
    """A failure worth another attempt."""

    status: ServerStatus
    ambiguous: bool = False


def server_status(error: grpc.aio.AioRpcError) -> ServerStatus:
    reason = ""
    hint: str | None = None
    for key, value in error.trailing_metadata() or ():
        if key != _DETAILS_KEY or not isinstance(value, bytes):
            continue
        try:
            status = status_pb2.Status.FromString(value)
        except DecodeError:
            break
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason = info.reason
                hint = info.metadata.get(_LEADER_HINT_KEY) or None
        break
    return ServerStatus(error.code(), reason, error.details() or "", hint)


def classify(status: ServerStatus, sent: bool) -> Retry | errors.ClientError:
    """What to do about a failed call. `sent`: the request may have reached the
    server (a write then may have applied unless the server says otherwise)."""
    code, reason = status.code, status.reason
    if reason == "NAMESPACE_NOT_FOUND":
        return errors.NamespaceNotFound(status.message)
    if reason == "SESSION_NOT_FOUND":
        return errors.SessionExpired(status.message)
    if reason == "NOTIFICATIONS_TRIMMED" or code == grpc.StatusCode.OUT_OF_RANGE:
        return errors.NotificationsTrimmed(status.message)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return errors.InvalidArgument(status.message)
    # Refusals that no retry changes (and that changed nothing on the server).
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return errors.Unauthenticated(status.message)
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return errors.PermissionDenied(status.message)
    if reason == "QUOTA_EXCEEDED":
        return errors.QuotaExceeded(status.message)
    if reason in _NOT_APPLIED_REASONS:
        return Retry(status)
    if code == grpc.StatusCode.NOT_FOUND:
        # An older server without reasons: an unknown shard is a map out of date.
        return Retry(status, ambiguous=sent)
    if code in _RETRYABLE_CODES:
        return Retry(status, ambiguous=sent)
    return errors.InvalidArgument(f"{code.name}: {status.message}")


def not_applied_by_version(expected_version: int, current_version: int | None) -> bool:
    """Whether a conditional write whose outcome was lost is proven not applied by
    the record's version read afterwards: only if the record still has the version
    the write expected (version ids only grow, so an applied write would have moved
    it). Absence proves nothing for a create-only write: created, then deleted."""
    return expected_version >= 0 and current_version == expected_version


def settle(future: asyncio.Future[Any], outcome: Any) -> None:
    """Deliver an operation's outcome (a ClientError is raised to its caller; a
    response or a Retry is returned), unless its caller stopped waiting."""
    if not future.done():
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


def connection_status(message: str) -> ServerStatus:
    """A failure before any server answered (no address, channel closed)."""
    return ServerStatus(grpc.StatusCode.UNAVAILABLE, "", message, None)
