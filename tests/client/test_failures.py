"""How the client reads server errors: what is retried, what is ambiguous, what
the caller sees."""

from __future__ import annotations

import grpc
import pytest

from cairn.client import errors
from cairn.client.failures import Retry, ServerStatus, classify, not_applied_by_version

Code = grpc.StatusCode


def status(code: grpc.StatusCode, reason: str = "", hint: str | None = None) -> ServerStatus:
    return ServerStatus(code, reason, "message", hint)


@pytest.mark.parametrize(
    ("code", "reason", "expected"),
    [
        (Code.NOT_FOUND, "NAMESPACE_NOT_FOUND", errors.NamespaceNotFound),
        (Code.NOT_FOUND, "SESSION_NOT_FOUND", errors.SessionExpired),
        (Code.OUT_OF_RANGE, "NOTIFICATIONS_TRIMMED", errors.NotificationsTrimmed),
        (Code.INVALID_ARGUMENT, "INVALID_ARGUMENT", errors.InvalidArgument),
        (Code.INVALID_ARGUMENT, "REQUEST_TOO_LARGE", errors.InvalidArgument),
        # Refusals by the rules: their own errors, never retried.
        (Code.PERMISSION_DENIED, "PERMISSION_DENIED", errors.PermissionDenied),
        (Code.PERMISSION_DENIED, "", errors.PermissionDenied),
        (Code.UNAUTHENTICATED, "UNAUTHENTICATED", errors.Unauthenticated),
        (Code.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", errors.QuotaExceeded),
        # An unknown code without a reason is still not retried.
        (Code.FAILED_PRECONDITION, "", errors.InvalidArgument),
    ],
)
def test_errors_in_the_request_reach_the_caller(
    code: grpc.StatusCode, reason: str, expected: type[errors.ClientError]
) -> None:
    for sent in (False, True):
        assert isinstance(classify(status(code, reason), sent=sent), expected)


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (Code.UNAVAILABLE, "NODE_IS_NOT_LEADER"),
        (Code.NOT_FOUND, "SHARD_NOT_FOUND"),
        (Code.RESOURCE_EXHAUSTED, "OVERLOADED"),
        (Code.FAILED_PRECONDITION, "INVALID_TERM"),
        (Code.UNAVAILABLE, "UNAVAILABLE"),
    ],
)
def test_refusals_before_logging_are_retried_as_not_applied(
    code: grpc.StatusCode, reason: str
) -> None:
    outcome = classify(status(code, reason), sent=True)
    assert isinstance(outcome, Retry) and not outcome.ambiguous


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (Code.UNAVAILABLE, "WRITE_OUTCOME_UNKNOWN"),
        (Code.UNAVAILABLE, ""),  # the connection broke
        (Code.CANCELLED, ""),
        (Code.DEADLINE_EXCEEDED, ""),
        (Code.INTERNAL, ""),
    ],
)
def test_a_sent_write_whose_answer_was_lost_is_ambiguous(
    code: grpc.StatusCode, reason: str
) -> None:
    sent = classify(status(code, reason), sent=True)
    assert isinstance(sent, Retry) and sent.ambiguous
    unsent = classify(status(code, reason), sent=False)
    assert isinstance(unsent, Retry) and not unsent.ambiguous


def test_the_leader_hint_travels_with_the_retry() -> None:
    outcome = classify(status(Code.UNAVAILABLE, "NODE_IS_NOT_LEADER", "pod-2:6648"), sent=True)
    assert isinstance(outcome, Retry)
    assert outcome.status.leader_hint == "pod-2:6648"


def test_only_an_unmoved_version_proves_a_lost_conditional_write_did_not_apply() -> None:
    assert not_applied_by_version(7, 7)
    assert not not_applied_by_version(7, 9)  # it, or another write, applied
    assert not not_applied_by_version(7, None)  # applied, then deleted, maybe
    assert not not_applied_by_version(-1, None)  # created, then deleted, maybe
