"""Cairn's operating errors, each with its wire reason and gRPC status code.

    CairnError                      any error a caller can act on
    ├── InvalidRequest              malformed or over a limit (INVALID_ARGUMENT)
    │   └── RequestTooLarge         key/value/operation-count/message limits
    ├── NamespaceNotFound           unknown namespace (NOT_FOUND)
    ├── ShardNotFound               this node hosts no such shard (NOT_FOUND)
    ├── NotLeader                   the shard's leader is elsewhere (UNAVAILABLE, leader hint)
    ├── InvalidTerm                 a request of a stale term (FAILED_PRECONDITION)
    ├── StaleControllerEpoch        a coordination call from a controller that was
    │                               succeeded by a newer one (FAILED_PRECONDITION)
    ├── OffsetPassed                a state digest asked for an offset the replica
    │                               applied past already (FAILED_PRECONDITION)
    ├── MembersBehind               removing a member now would leave committed entries
    │                               on too few of the rest (FAILED_PRECONDITION; retry)
    ├── SessionNotFound             unknown or expired session (NOT_FOUND)
    ├── NotificationsTrimmed        resume point older than the retention (OUT_OF_RANGE)
    ├── Overloaded                  a bounded queue is full; retry later (RESOURCE_EXHAUSTED)
    ├── QuotaExceeded               the caller holds as many sessions/streams as it may
    │                               (RESOURCE_EXHAUSTED; close some, not a retry)
    ├── Unauthenticated             no valid credentials (UNAUTHENTICATED)
    ├── PermissionDenied            the caller may not do this (PERMISSION_DENIED)
    └── Unavailable                 shutting down / not ready; retry elsewhere (UNAVAILABLE)
        └── WriteOutcomeUnknown     a logged write lost its leader before committing:
                                    a later leader decides whether it applies

Errors are mapped to the wire once, at the RPC edge, as a gRPC status with a
`google.rpc.ErrorInfo` detail (domain `oxia.io`, reason, metadata) so that Oxia
clients can recognise and redirect. Programmer errors are assertions, not these.
Each names its status by number (StatusCode), not with grpc's enum, so the pure
protocol cores that raise them do not import grpc.
"""

from __future__ import annotations

import enum

ERROR_DOMAIN = "oxia.io"
LEADER_HINT_KEY = "leader"


class StatusCode(enum.IntEnum):
    """gRPC's canonical status codes (google.rpc.Code); the RPC edge puts the
    number in the status it sends."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class CairnError(Exception):
    reason = "INTERNAL"
    code = StatusCode.INTERNAL

    def __init__(self, message: str, metadata: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.metadata = dict(metadata or {})


class InvalidRequest(CairnError):
    reason = "INVALID_ARGUMENT"
    code = StatusCode.INVALID_ARGUMENT


class RequestTooLarge(InvalidRequest):
    reason = "REQUEST_TOO_LARGE"


class NamespaceNotFound(CairnError):
    reason = "NAMESPACE_NOT_FOUND"
    code = StatusCode.NOT_FOUND


class ShardNotFound(CairnError):
    reason = "SHARD_NOT_FOUND"
    code = StatusCode.NOT_FOUND


class NotLeader(CairnError):
    reason = "NODE_IS_NOT_LEADER"
    code = StatusCode.UNAVAILABLE

    def __init__(self, shard: int, leader_hint: str | None = None) -> None:
        metadata = {"shard": str(shard)}
        if leader_hint:
            metadata[LEADER_HINT_KEY] = leader_hint
        super().__init__(f"this node is not the leader of shard {shard}", metadata)
        self.leader_hint = leader_hint


class InvalidTerm(CairnError):
    reason = "INVALID_TERM"
    code = StatusCode.FAILED_PRECONDITION


class OffsetPassed(CairnError):
    """A replica asked for its state at an offset it has already applied past."""

    reason = "OFFSET_PASSED"
    code = StatusCode.FAILED_PRECONDITION


class MembersBehind(CairnError):
    """A leader refuses to drop a member whose acknowledgement a committed entry
    still needs: without it, fewer than a majority of the members that remain
    would hold that entry. It changes nothing; the removal may be retried once
    they caught up."""

    reason = "MEMBERS_BEHIND"
    code = StatusCode.FAILED_PRECONDITION


class StaleControllerEpoch(CairnError):
    """The caller's controller epoch is older than one this pod has seen: a newer
    controller took over, and this one must stop acting (it changes nothing)."""

    reason = "STALE_CONTROLLER_EPOCH"
    code = StatusCode.FAILED_PRECONDITION


class SessionNotFound(CairnError):
    reason = "SESSION_NOT_FOUND"
    code = StatusCode.NOT_FOUND


class NotificationsTrimmed(CairnError):
    reason = "NOTIFICATIONS_TRIMMED"
    code = StatusCode.OUT_OF_RANGE


class Overloaded(CairnError):
    reason = "OVERLOADED"
    code = StatusCode.RESOURCE_EXHAUSTED


class QuotaExceeded(CairnError):
    """A per-principal or per-pod cap on sessions or streams: retrying at once
    cannot help, so it has its own reason (clients do not retry it)."""

    reason = "QUOTA_EXCEEDED"
    code = StatusCode.RESOURCE_EXHAUSTED


class Unauthenticated(CairnError):
    reason = "UNAUTHENTICATED"
    code = StatusCode.UNAUTHENTICATED


class PermissionDenied(CairnError):
    reason = "PERMISSION_DENIED"
    code = StatusCode.PERMISSION_DENIED


class Unavailable(CairnError):
    reason = "UNAVAILABLE"
    code = StatusCode.UNAVAILABLE


class WriteOutcomeUnknown(Unavailable):
    """The write was logged, then this replica stopped leading (or failed) before it
    committed. Distinct from a plain Unavailable, which means "not accepted": a
    client may resend an idempotent write either way, but must not blindly resend a
    conditional one after this."""

    reason = "WRITE_OUTCOME_UNKNOWN"
