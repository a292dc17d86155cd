"""The requests a leader folds into its next log entry, with a future each: the
rules of folding (when, which requests, what fits) are the core's
(core/folding.py)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from cairn.common.errors import WriteOutcomeUnknown
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core.folding import fits_fold

if TYPE_CHECKING:
    from opentelemetry.context import Context


class WriteFold:
    """Client write requests collected for one entry, with a future per request."""

    __slots__ = (
        "futures",
        "keys",
        "operations",
        "raw_requests",
        "requests",
        "size_bytes",
        "traces",
    )

    def __init__(self) -> None:
        self.raw_requests: list[bytes] = []
        self.requests: list[pb.WriteRequest] = []
        self.futures: list[asyncio.Future[bytes]] = []
        # With tracing on: the contexts of the sampled requests (at most one each).
        self.traces: list[Context] = []
        self.keys: set[str] = set()
        self.operations = 0
        self.size_bytes = 0

    def fits(
        self, keys: set[str], operations: int, size_bytes: int, max_operations: int, max_bytes: int
    ) -> bool:
        """Whether a request can join: disjoint keys and within both bounds (an empty
        fold takes any request)."""
        return not self.requests or fits_fold(
            self.keys,
            self.operations,
            self.size_bytes,
            keys,
            operations,
            size_bytes,
            max_operations,
            max_bytes,
        )

    def add(
        self,
        raw_request: bytes,
        request: pb.WriteRequest,
        keys: set[str],
        operations: int,
        future: asyncio.Future[bytes],
    ) -> None:
        self.raw_requests.append(raw_request)
        self.requests.append(request)
        self.futures.append(future)
        self.keys |= keys
        self.operations += operations
        self.size_bytes += len(raw_request)

    def settle(self, logged: asyncio.Future[Any]) -> None:
        """Done-callback of the entry's future: answer each request from the
        entry's result (one response per request, or one response when the fold
        was logged as a single plain write), or with its failure."""
        if logged.cancelled():
            self.fail(WriteOutcomeUnknown("the folded write's entry was abandoned"))
            return
        error = logged.exception()
        if error is not None:
            self.fail(error)
            return
        result = logged.result()
        responses = [result] if isinstance(result, bytes) else result
        for future, response in zip(self.futures, responses, strict=True):
            if not future.done():
                future.set_result(response)

    def fail(self, error: BaseException) -> None:
        for future in self.futures:
            if not future.done():
                future.set_exception(error)
