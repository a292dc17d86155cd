"""Traces for every Cairn process: OpenTelemetry SDK spans, exported over OTLP.

Off unless the environment asks for it (`configured`): an OTLP endpoint
(`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) or
`OTEL_TRACES_EXPORTER=otlp|console`; `OTEL_TRACES_EXPORTER=none` or
`OTEL_SDK_DISABLED=true` turn it off again. The SDK reads the other standard
variables itself: `OTEL_TRACES_SAMPLER`/`_ARG` (default `parentbased_always_on`),
`OTEL_BSP_*` (batch export), `OTEL_EXPORTER_OTLP_*` (headers, timeout, insecure).

Hot paths test the module flag `ENABLED` (read it as `tracing.ENABLED`, never
imported by name: `configure` sets it) and do nothing else when it is False: no
span objects, no context lookups, no interceptors on servers. With tracing on,
spans go per RPC or per batch, never per operation inside a batch.

Context crosses processes as W3C trace context: `traceparent`/`tracestate` in gRPC
metadata and HTTP headers (the propagator is the global one, `OTEL_PROPAGATORS`,
whose default is W3C trace context and baggage).
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import grpc
import grpc.aio
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)
from opentelemetry.trace import Link, Span, SpanKind, Tracer

log = logging.getLogger(__name__)

# Set once by `configure`; hot paths test it before anything else.
ENABLED = False

TRACES_EXPORTER_ENV = "OTEL_TRACES_EXPORTER"
SDK_DISABLED_ENV = "OTEL_SDK_DISABLED"
TRACES_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
SCOPE = "cairn"

# RPCs that get no server span: streams that stay open for a client's lifetime
# (a span of hours says nothing, and their messages carry no context of their own)
# and the probes a health checker sends every second.
UNTRACED_METHODS = frozenset(
    {
        "GetShardAssignments",
        "GetNotifications",
        "GetSequenceUpdates",
        "WriteStream",
        "Replicate",
        "Check",
        "Watch",
        "GetStatus",
    }
)

_provider: TracerProvider | None = None
_tracer: Tracer = trace.NoOpTracer()


def configured(environ: Mapping[str, str] | None = None) -> str | None:
    """The exporter the environment asks for (`otlp` or `console`), or None."""
    env = os.environ if environ is None else environ
    if env.get(SDK_DISABLED_ENV, "").strip().lower() == "true":
        return None
    chosen = env.get(TRACES_EXPORTER_ENV, "").strip().lower()
    if chosen:
        # A list is allowed; the first we know wins.
        for name in (part.strip() for part in chosen.split(",")):
            if name in ("otlp", "console"):
                return name
        return None
    return "otlp" if any(env.get(name) for name in TRACES_ENDPOINT_VARIABLES) else None


def configure(
    service_name: str,
    instance_id: str = "",
    *,
    exporter: SpanExporter | None = None,
    environ: Mapping[str, str] | None = None,
) -> bool:
    """Start tracing if the environment asks for it (or `exporter` is given: tests).
    Returns whether tracing is on. Call once per process, before servers and
    channels are created (they add their interceptors only when it is on)."""
    global ENABLED, _provider, _tracer
    if exporter is None:
        chosen = configured(environ)
        if chosen is None:
            return False
        if chosen == "console":
            exporter = ConsoleSpanExporter()
        else:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
    attributes: dict[str, str] = {"service.name": service_name}
    if instance_id:
        attributes["service.instance.id"] = instance_id
    # The sampler comes from OTEL_TRACES_SAMPLER (the SDK reads it when given None).
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _provider = provider
    _tracer = provider.get_tracer(SCOPE)
    ENABLED = True
    log.info("tracing on: spans exported by %s", type(exporter).__name__)
    return True


def shutdown() -> None:
    """Export what is buffered and stop (a process's last step)."""
    global ENABLED
    if _provider is not None:
        _provider.shutdown()
    ENABLED = False


def tracer() -> Tracer:
    return _tracer


# ---- context in gRPC metadata and HTTP headers -----------------------------------------


def _getter_metadata(carrier: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in carrier or ():
        key, value = item[0], item[1]
        if key in ("traceparent", "tracestate", "baggage"):
            found[key] = value.decode("latin-1") if isinstance(value, bytes) else str(value)
    return found


def extract_metadata(metadata: Iterable[Any] | None) -> Context:
    """The remote parent carried in gRPC metadata (an empty context without one)."""
    return propagate.extract(_getter_metadata(metadata))


def extract_headers(headers: Iterable[tuple[bytes, bytes]]) -> Context:
    """The remote parent in ASGI headers (lower-case byte pairs)."""
    carrier = {
        key.decode("latin-1"): value.decode("latin-1")
        for key, value in headers
        if key in (b"traceparent", b"tracestate", b"baggage")
    }
    return propagate.extract(carrier)


def metadata_for(span: Span) -> list[tuple[str, str]]:
    """gRPC metadata carrying `span` as the parent of the server's spans."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return list(carrier.items())


def fields_of(context: Context) -> dict[str, str]:
    """The W3C trace context fields carrying `context`'s span (to put in a message)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=context)
    return carrier


def context_of(fields: Mapping[str, str]) -> Context:
    """The remote parent carried by trace context fields from a message."""
    return propagate.extract(dict(fields))


def current_context() -> Context | None:
    """The caller's context when a sampled span is active (work done later, on
    another task, for this caller is then parented to it); None otherwise."""
    span = trace.get_current_span()
    if not span.get_span_context().trace_flags.sampled:
        return None
    return otel_context.get_current()


def links_to(contexts: Sequence[Context]) -> list[Link]:
    """Links to the spans active in `contexts` (a batch's other contributors)."""
    links = []
    for found in contexts:
        span_context = trace.get_current_span(found).get_span_context()
        if span_context.is_valid:
            links.append(Link(span_context))
    return links


# ---- gRPC servers ----------------------------------------------------------------------


def server_interceptors() -> list[grpc.aio.ServerInterceptor]:
    """The interceptors a grpc.aio server takes: none unless tracing is on (an
    interceptor costs every RPC a Python call, traced or not)."""
    return [ServerTracing()] if ENABLED else []


def _rpc_attributes(method: str) -> dict[str, str]:
    service, _, name = method.lstrip("/").rpartition("/")
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name}


class ServerTracing(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """A SERVER span around each unary-request RPC, child of the caller's span when
    its metadata carries one."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or method.rpartition("/")[2] in UNTRACED_METHODS:
            return handler
        metadata = handler_call_details.invocation_metadata
        name = method.lstrip("/")
        attributes = _rpc_attributes(method)
        if handler.unary_unary is not None:
            unary = handler.unary_unary

            async def traced_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                with _tracer.start_as_current_span(
                    name,
                    context=extract_metadata(metadata),
                    kind=SpanKind.SERVER,
                    attributes=attributes,
                ):
                    return await unary(request, context)

            return grpc.unary_unary_rpc_method_handler(
                traced_unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None and inspect.isasyncgenfunction(handler.unary_stream):
            # (A streaming handler that writes through `context.write` is left as is.)
            streamed = handler.unary_stream

            async def traced_stream(
                request: Any, context: grpc.aio.ServicerContext
            ) -> AsyncIterator[Any]:
                with _tracer.start_as_current_span(
                    name,
                    context=extract_metadata(metadata),
                    kind=SpanKind.SERVER,
                    attributes=attributes,
                ):
                    async for response in streamed(request, context):
                        yield response

            return grpc.unary_stream_rpc_method_handler(
                traced_stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler
