"""The client library with tracing on (in this process; the server untraced): a
sampled caller's write goes alone, as a unary Write carrying its context, and
writes still apply in the order they were issued, traced or not.

Tracing is switched on by pointing the module's tracer at a provider of the test's
own (`tracing.configure` would set the process-wide provider)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from opentelemetry.trace import SpanKind, Tracer

from cairn.client.client import AsyncClient
from cairn.client.options import ClientOptions
from cairn.common import tracing


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """The client's tracer samples only what a sampled caller asks for (as
    OTEL_TRACES_SAMPLER=parentbased_always_off would): its own root spans are not."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_tracer", provider.get_tracer("test"))
    monkeypatch.setattr(tracing, "ENABLED", True)
    yield exporter
    provider.shutdown()


@pytest.fixture
def caller_tracer(spans: InMemorySpanExporter) -> Iterator[Tracer]:
    """The application's tracer: it samples its spans."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    yield provider.get_tracer("caller")
    provider.shutdown()


def test_traced_and_untraced_writes_keep_their_order(
    server: str, prefix: str, spans: InMemorySpanExporter, caller_tracer: Tracer
) -> None:
    key = prefix + "ordered"

    async def traced_put(client: AsyncClient, value: bytes) -> None:
        with caller_tracer.start_as_current_span("caller"):
            await client.put(key, value)

    async def scenario() -> list[bytes | None]:
        client = await AsyncClient.connect(server, options=ClientOptions(request_timeout_s=10.0))
        finals: list[bytes | None] = []
        async with client:
            # Issued in this order without waiting in between: an untraced write
            # in flight on the stream, then a traced one, then untraced ones.
            for traced_at in (1, 0, 2):
                writes = []
                for index in range(3):
                    value = f"v{index}".encode()
                    put = (
                        traced_put(client, value) if index == traced_at else client.put(key, value)
                    )
                    writes.append(asyncio.ensure_future(put))
                await asyncio.gather(*writes)
                finals.append((await client.get(key)).value)
        return finals

    assert asyncio.run(scenario()) == [b"v2", b"v2", b"v2"]
    finished = spans.get_finished_spans()
    puts = [span for span in finished if span.name == "cairn.client.put"]
    calls = [span for span in finished if span.name == "io.oxia.proto.v1.OxiaClient/Write"]
    assert len(puts) == 3 and len(calls) == 3  # only the traced callers' writes
    by_id = {span.context.span_id: span for span in finished}
    for call in calls:
        assert call.kind is SpanKind.CLIENT
        assert call.parent is not None
        parent = by_id[call.parent.span_id]
        assert parent.name == "cairn.client.put"
        assert parent.parent is not None and by_id[parent.parent.span_id].name == "caller"
    gets = [span for span in finished if span.name == "cairn.client.get"]
    assert not gets  # the gets ran outside any span: no context, nothing traced
