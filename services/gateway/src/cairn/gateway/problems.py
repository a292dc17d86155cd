"""The gateway's errors as problem documents (cairn.common.problems, shared
with the controller's admin API): every error it answers is a `Problem`, an
`application/problem+json` document with a stable `code`. The mappings from the
client library's errors and from the controller's answers are pure functions
here, so that each is decided once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cairn.client.errors import (
    ClientClosed,
    ClientError,
    InvalidArgument,
    KeyNotFound,
    NamespaceNotFound,
    NotificationsTrimmed,
    OutcomeUnknown,
    PermissionDenied,
    QuotaExceeded,
    RequestTimeout,
    SessionExpired,
    Unauthenticated,
    UnexpectedVersion,
)
from cairn.common.problems import (
    PROBLEM_MEDIA_TYPE,
    Code,
    Problem,
    problem_for_http_status,
    status_of,
    summary_of,
    title_of,
    validation_detail,
)
from cairn.common.problems_http import ProblemDocument
from cairn.gateway.cursors import CursorError
from cairn.gateway.headers import HeaderError
from cairn.gateway.tokens import TokenError

__all__ = [
    "PROBLEM_MEDIA_TYPE",
    "REQUEST_ERRORS",
    "Code",
    "Problem",
    "ProblemDocument",
    "problem_for_client_error",
    "problem_for_controller",
    "problem_for_error",
    "problem_for_http_status",
    "status_of",
    "summary_of",
    "title_of",
]


@dataclass(frozen=True, slots=True)
class _Mapping:
    code: Code
    retry: bool = False


# Most specific first: a subclass would otherwise be caught by its base.
_CLIENT_ERRORS: tuple[tuple[type[ClientError], _Mapping], ...] = (
    (KeyNotFound, _Mapping(Code.KEY_NOT_FOUND)),
    (UnexpectedVersion, _Mapping(Code.VERSION_MISMATCH)),
    (SessionExpired, _Mapping(Code.SESSION_EXPIRED)),
    (InvalidArgument, _Mapping(Code.INVALID_ARGUMENT)),
    (NamespaceNotFound, _Mapping(Code.NAMESPACE_NOT_FOUND)),
    (NotificationsTrimmed, _Mapping(Code.NOTIFICATIONS_TRIMMED)),
    (Unauthenticated, _Mapping(Code.UNAUTHORIZED)),
    (PermissionDenied, _Mapping(Code.FORBIDDEN)),
    (QuotaExceeded, _Mapping(Code.QUOTA_EXCEEDED)),
    # The write may have applied: retrying blindly could apply it twice, so no
    # Retry-After; the caller reads back first.
    (OutcomeUnknown, _Mapping(Code.OUTCOME_UNKNOWN)),
    (RequestTimeout, _Mapping(Code.UNAVAILABLE, retry=True)),
    # Only while the gateway shuts down.
    (ClientClosed, _Mapping(Code.UNAVAILABLE, retry=True)),
)


def problem_for_client_error(error: ClientError, retry_after_s: int) -> Problem:
    """The problem answering a client library error."""
    for kind, mapping in _CLIENT_ERRORS:
        if isinstance(error, kind):
            headers = {"Retry-After": str(retry_after_s)} if mapping.retry else {}
            return Problem(mapping.code, str(error) or summary_of(mapping.code), headers)
    # A ClientError subclass added to the library later: still an answer, never a 500.
    return Problem(Code.UNAVAILABLE, str(error) or type(error).__name__)


# Errors in what the caller sent (invalid-argument).
_BAD_ARGUMENTS: tuple[type[Exception], ...] = (CursorError, HeaderError, TokenError)
# The kinds of error a request may raise besides a Problem, each answered by
# problem_for_error (so the app's handlers and fastpath answer alike).
REQUEST_ERRORS: tuple[type[Exception], ...] = (ClientError, *_BAD_ARGUMENTS)


def problem_for_error(error: Exception, retry_after_s: int) -> Problem | None:
    """The problem answering an error of a request (None: a bug)."""
    if isinstance(error, Problem):
        return error
    if isinstance(error, ClientError):
        return problem_for_client_error(error, retry_after_s)
    if isinstance(error, _BAD_ARGUMENTS):
        return Problem(Code.INVALID_ARGUMENT, str(error))
    return None


def problem_for_controller(status: int, body: Any) -> Problem:
    """The problem passing on a controller's error answer (`body`: its decoded
    JSON, a problem document, or None): the controller's own code where it
    names one the gateway answers with too, else one chosen by the status."""
    title = body.get("title") if isinstance(body, dict) else None
    detail = body.get("detail") if isinstance(body, dict) else None
    if not isinstance(detail, str):
        # An older controller's validation errors: {"detail": [{"msg": ..., "loc": ...}]}
        detail = validation_detail(detail) if isinstance(detail, list) else None
    if not detail:
        detail = title if isinstance(title, str) and title else f"controller answered {status}"
    passed_on = _CONTROLLER_CODES.get(body.get("code") if isinstance(body, dict) else None)
    if passed_on is not None and status_of(passed_on) == status:
        code = passed_on
    elif status == 404:
        code = Code.NOT_FOUND
    elif status == 401:
        code = Code.UNAUTHORIZED
    elif status == 403:
        code = Code.FORBIDDEN
    elif status == 409:
        code = Code.CONFLICT
    elif status == 422:
        code = Code.INVALID_CHANGE
    elif status == 503:
        code = Code.CONTROLLER_UNAVAILABLE
    elif 400 <= status < 500:
        code = Code.INVALID_ARGUMENT
    else:
        code = Code.CONTROLLER_ERROR
    return Problem(code, f"controller: {detail}")


# The controller's codes passed on as they are (the rest are chosen by status:
# its 503 "unavailable" is the gateway's "controller-unavailable").
_CONTROLLER_CODES: Mapping[Any, Code] = {
    code.value: code
    for code in (
        Code.NAMESPACE_NOT_FOUND,
        Code.SHARD_NOT_FOUND,
        Code.NODE_NOT_FOUND,
        Code.INVALID_ARGUMENT,
        Code.UNSUPPORTED_MEDIA_TYPE,
        Code.INVALID_CHANGE,
    )
}
