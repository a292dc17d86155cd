"""Tracing's switch (the standard environment variables) and the storage server's
interceptor: a SERVER span per RPC, child of the caller's context from metadata.

The tests never call `tracing.configure` (it sets the process-wide tracer provider,
which FastAPI apps of other tests in this process would then follow): they point
the module's tracer at a provider of their own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import grpc
import grpc.aio
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from cairn.common import tracing


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4317"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
        ({"OTEL_TRACES_EXPORTER": "zipkin,otlp"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, None),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, None),
        # Metrics-only OTLP does not turn traces on.
        ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://collector:4317"}, None),
    ],
)
def test_the_environment_turns_tracing_on(environ: dict[str, str], expected: str | None) -> None:
    assert tracing.configured(environ) == expected


def test_off_means_no_interceptor_and_no_span() -> None:
    assert not tracing.ENABLED
    assert tracing.server_interceptors() == []
    assert tracing.current_context() is None


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_tracer", provider.get_tracer("test"))
    monkeypatch.setattr(tracing, "ENABLED", True)
    yield exporter
    provider.shutdown()


SERVICE = "test.Echo"


def _handlers() -> grpc.GenericRpcHandler:
    async def unary(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    async def streamed(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        yield request
        yield request

    async def status(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return b""

    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Unary": grpc.unary_unary_rpc_method_handler(unary),
            "Streamed": grpc.unary_stream_rpc_method_handler(streamed),
            "GetStatus": grpc.unary_unary_rpc_method_handler(status),
        },
    )


def test_the_server_span_continues_the_callers_trace(spans: InMemorySpanExporter) -> None:
    asyncio.run(_calls())
    found = {span.name: span for span in spans.get_finished_spans()}
    assert set(found) == {"caller", f"{SERVICE}/Unary", f"{SERVICE}/Streamed"}
    caller = found["caller"].context
    unary = found[f"{SERVICE}/Unary"]
    assert unary.kind is SpanKind.SERVER
    assert unary.parent is not None
    assert unary.parent.span_id == caller.span_id
    assert unary.context.trace_id == caller.trace_id
    assert unary.attributes is not None and unary.attributes["rpc.method"] == "Unary"
    streamed = found[f"{SERVICE}/Streamed"]
    assert streamed.parent is None  # no context in its metadata: a trace of its own


async def _calls() -> None:
    server = grpc.aio.server(interceptors=tracing.server_interceptors())
    server.add_generic_rpc_handlers([_handlers()])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        caller = tracing.tracer().start_span("caller", kind=SpanKind.CLIENT)
        metadata = tracing.metadata_for(caller)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            assert await channel.unary_unary(f"/{SERVICE}/Unary")(b"x", metadata=metadata) == b"x"
            answers = [a async for a in channel.unary_stream(f"/{SERVICE}/Streamed")(b"y")]
            assert answers == [b"y", b"y"]
            await channel.unary_unary(f"/{SERVICE}/GetStatus")(b"")  # a probe: no span
        caller.end()
    finally:
        await server.stop(None)
