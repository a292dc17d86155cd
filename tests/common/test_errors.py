"""Cairn's errors name gRPC statuses by number; the numbers are gRPC's, and the RPC
edge sends each error with its status and reason."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from cairn.common import errors
from cairn.common.errors import CairnError, StatusCode
from cairn.storage.rpc.status import to_status


def test_status_codes_are_grpcs() -> None:
    assert [c.name for c in StatusCode] == [c.name for c in grpc.StatusCode]
    for code in StatusCode:
        assert grpc.StatusCode[code.name].value[0] == code.value


ERRORS = sorted(
    (e for e in vars(errors).values() if isinstance(e, type) and issubclass(e, CairnError)),
    key=lambda e: e.__name__,
)


@pytest.mark.parametrize("error_type", ERRORS, ids=lambda e: e.__name__)
def test_each_error_leaves_with_its_status_and_reason(error_type: type[CairnError]) -> None:
    error = CairnError.__new__(error_type)
    CairnError.__init__(error, "refused", {"shard": "3"})
    status = to_status(error)
    assert status.code is grpc.StatusCode[error_type.code.name]
    assert status.details == "refused"
    (detail,) = rpc_status.from_call(_Call(status)).details  # type: ignore[arg-type]
    info = error_details_pb2.ErrorInfo()
    assert detail.Unpack(info)
    assert (info.reason, info.domain, dict(info.metadata)) == (
        error_type.reason,
        errors.ERROR_DOMAIN,
        {"shard": "3"},
    )


class _Call:
    """The two things rpc_status.from_call reads from a finished call."""

    def __init__(self, status: grpc.Status) -> None:
        self._status = status

    def code(self) -> grpc.StatusCode:
        return self._status.code  # type: ignore[no-any-return]

    def details(self) -> str:
        return self._status.details  # type: ignore[no-any-return]

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        return tuple(self._status.trailing_metadata)
