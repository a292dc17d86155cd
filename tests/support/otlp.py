"""An OTLP trace collector stub: a gRPC server implementing TraceService/Export that
keeps every span it is sent, for tests that check what real processes export."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


@dataclass(frozen=True)
class ExportedSpan:
    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


class CollectorStub(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.spans: list[ExportedSpan] = []
        self._changed = threading.Condition()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"http://127.0.0.1:{port}"

    def start(self) -> None:
        self._server.start()

    def stop(self) -> None:
        self._server.stop(grace=None)

    def Export(  # the generated servicer names it so
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        ExportedSpan(
                            service=str(resource.get("service.name", "")),
                            name=span.name,
                            kind=span.kind,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                        )
                    )
        with self._changed:
            self.spans.extend(found)
            self._changed.notify_all()
        return trace_service_pb2.ExportTraceServiceResponse()

    def wait_for(
        self, predicate: Callable[[list[ExportedSpan]], bool], timeout_s: float
    ) -> list[ExportedSpan]:
        """The spans received so far, once `predicate` accepts them."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not predicate(self.spans):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"spans so far: {self.spans}")
                self._changed.wait(remaining)
            return list(self.spans)
