"""The follower's side of a traced write, with tracing on.

For each Replicate message that carries the trace context of sampled writes (the
leader adds it, sender.py), two spans: `cairn.replica.append`, logging the
message's entries, and `cairn.replica.ack`, from then until an answer to the
leader reports them durable (the fsync, then the acknowledgement that counts
toward the quorum). Both are children of the first write's span and linked to the
others': one pair per message, never per entry or per write.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.trace import Span, Status, StatusCode

from cairn.common import tracing
from cairn.proto import replication_pb2 as rpb


class FollowerSpans:
    """The spans of one Replicate stream. Its acknowledgement spans wait for the
    durable offset; the leader's window bounds how many are open."""

    def __init__(self, shard_id: int) -> None:
        self.shard_id = shard_id
        # (last offset of the message's entries, its open acknowledgement span)
        self._acking: deque[tuple[int, Span]] = deque()

    @contextmanager
    def appending(self, request: rpb.ReplicateRequest) -> Iterator[None]:
        """Around logging the request's entries: its spans, if it carries traces."""
        if not request.traces or not request.entries:
            yield
            return
        contexts = [tracing.context_of(trace.fields) for trace in request.traces]
        first, last = request.entries[0].offset, request.entries[-1].offset
        attributes: dict[str, int] = {
            "cairn.shard": self.shard_id,
            "cairn.term": request.term,
            "cairn.first_offset": first,
            "cairn.last_offset": last,
        }
        links = tracing.links_to(contexts[1:])
        tracer = tracing.tracer()
        with tracer.start_as_current_span(
            "cairn.replica.append", context=contexts[0], links=links, attributes=attributes
        ):
            yield
        ack = tracer.start_span(
            "cairn.replica.ack", context=contexts[0], links=links, attributes=attributes
        )
        self._acking.append((last, ack))

    def acknowledged(self, durable_offset: int) -> None:
        """An answer reporting `durable_offset` goes to the leader."""
        while self._acking and self._acking[0][0] <= durable_offset:
            _, span = self._acking.popleft()
            span.set_attribute("cairn.durable_offset", durable_offset)
            span.end()

    def close(self) -> None:
        """The stream ended: what was never acknowledged ends as an error."""
        while self._acking:
            _, span = self._acking.popleft()
            span.set_status(Status(StatusCode.ERROR, "the stream ended before they were durable"))
            span.end()
