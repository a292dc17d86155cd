"""What a call on the client can raise.

    ClientError                 anything below; `str()` says what happened
    ├── KeyNotFound             the record does not exist (get, conditional delete)
    ├── UnexpectedVersion       a conditional write's expected version did not match
    ├── SessionExpired          the session of an ephemeral write is closed or expired
    ├── InvalidArgument         the server (or the client, before sending) refused the
    │                           request as malformed or over a limit
    ├── NamespaceNotFound       the namespace does not exist
    ├── NotificationsTrimmed    a resume point older than the server's retention
    ├── OutcomeUnknown          a non-idempotent write (conditional or sequence put) was
    │                           sent, its leader changed before answering, and reading
    │                           back cannot prove it did not apply; it may have
    ├── Unauthenticated         the server took no credentials from this client
    ├── PermissionDenied        the server's rules do not let this client do that
    ├── QuotaExceeded           this client holds as many sessions/streams as it may
    ├── RequestTimeout          the call's deadline passed while retrying; a write
    │                           already sent may still apply
    └── ClientClosed            the client was closed

Retryable failures (no leader yet, a leader moving, a pod restarting, an
overloaded queue) never reach the caller before the deadline: the client retries
them. Idempotent writes (unconditional puts, deletes, range deletes) are retried
even when their outcome was unknown, since applying one twice leaves the same
data.
"""

from __future__ import annotations


class ClientError(Exception):
    """Base of every error the client raises."""


class KeyNotFound(ClientError):
    pass


class UnexpectedVersion(ClientError):
    pass


class SessionExpired(ClientError):
    pass


class InvalidArgument(ClientError):
    pass


class NamespaceNotFound(ClientError):
    pass


class NotificationsTrimmed(ClientError):
    pass


class OutcomeUnknown(ClientError):
    pass


class Unauthenticated(ClientError):
    pass


class PermissionDenied(ClientError):
    pass


class QuotaExceeded(ClientError):
    pass


class RequestTimeout(ClientError):
    pass


class ClientClosed(ClientError):
    pass
