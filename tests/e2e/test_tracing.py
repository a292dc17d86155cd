"""Issue 40's proof for traces: one gateway PUT, across real processes (a gateway and a
storage server, exporting over OTLP to a collector stub), is one trace with spans in
the gateway, the client library and the storage pod, each the child of the one before;
and the gateway's access log line names that trace."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.helpers import GatewayProcess
from support.otlp import CollectorStub, ExportedSpan
from support.processes import StandaloneProcess

pytestmark = pytest.mark.e2e

SPAN_KIND_SERVER, SPAN_KIND_CLIENT = 2, 3


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[CollectorStub]:
    stub = CollectorStub()
    stub.start()
    # Children inherit the environment: the traces endpoint only (metrics stay off
    # OTLP: the stub serves no metrics service), and a short export delay.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", stub.endpoint)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    yield stub
    stub.stop()


def _one(spans: list[ExportedSpan], service: str, name: str) -> ExportedSpan:
    found = [span for span in spans if span.service == service and span.name == name]
    assert len(found) == 1, (service, name, spans)
    return found[0]


def test_a_gateway_put_is_one_trace_through_client_and_storage(
    collector: CollectorStub, tmp_path: Path
) -> None:
    storage = StandaloneProcess(tmp_path / "data", 1)
    storage.start()
    gateway = GatewayProcess([storage.address], extra_args=["--log-format", "json"])
    try:
        gateway.start()
        trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
        with gateway.client() as http:
            answer = http.put(
                "/v1/namespaces/default/keys/traced/key",
                content=b"value",
                headers={"traceparent": f"00-{trace_id}-{caller_span}-01"},
            )
        assert answer.status_code == 201, answer.text

        expected = {
            ("cairn-gateway", "PUT /v1/namespaces/{namespace}/keys/{key}"),
            ("cairn-gateway", "fastapi.endpoint"),
            ("cairn-gateway", "cairn.client.put"),
            ("cairn-gateway", "io.oxia.proto.v1.OxiaClient/Write"),
            ("cairn-storage", "io.oxia.proto.v1.OxiaClient/Write"),
            ("cairn-storage", "cairn.shard.append"),
            ("cairn-storage", "cairn.shard.commit"),
        }

        def complete(spans: list[ExportedSpan]) -> bool:
            names = {(s.service, s.name) for s in spans if s.trace_id == trace_id}
            return expected <= names

        spans = [
            span for span in collector.wait_for(complete, timeout_s=30) if span.trace_id == trace_id
        ]

        # A GET: the Read call that carries it is traced too (gets are batched per
        # call; the first traced caller is the call's parent).
        read_trace = secrets.token_hex(16)
        with gateway.client() as http:
            answer = http.get(
                "/v1/namespaces/default/keys/traced/key",
                headers={"traceparent": f"00-{read_trace}-{secrets.token_hex(8)}-01"},
            )
        assert answer.status_code == 200, answer.text
        read_names = {
            ("cairn-gateway", "cairn.client.get"),
            ("cairn-gateway", "io.oxia.proto.v1.OxiaClient/Read"),
            ("cairn-storage", "io.oxia.proto.v1.OxiaClient/Read"),
        }
        read_spans = [
            span
            for span in collector.wait_for(
                lambda found: (
                    read_names <= {(s.service, s.name) for s in found if s.trace_id == read_trace}
                ),
                timeout_s=30,
            )
            if span.trace_id == read_trace
        ]
    finally:
        gateway.stop()
        storage.kill()

    # The HTTP span is FastAPI's own (its telemetry follows the global tracer
    # provider), with the route template as its name.
    http_span = _one(spans, "cairn-gateway", "PUT /v1/namespaces/{namespace}/keys/{key}")
    assert http_span.kind == SPAN_KIND_SERVER
    assert http_span.parent_span_id == caller_span
    assert http_span.attributes["http.response.status_code"] == 201
    endpoint = _one(spans, "cairn-gateway", "fastapi.endpoint")
    assert endpoint.parent_span_id == http_span.span_id
    client_put = _one(spans, "cairn-gateway", "cairn.client.put")
    assert client_put.parent_span_id == endpoint.span_id
    rpc = _one(spans, "cairn-gateway", "io.oxia.proto.v1.OxiaClient/Write")
    assert rpc.kind == SPAN_KIND_CLIENT
    assert rpc.parent_span_id == client_put.span_id
    served = _one(spans, "cairn-storage", "io.oxia.proto.v1.OxiaClient/Write")
    assert served.kind == SPAN_KIND_SERVER
    assert served.parent_span_id == rpc.span_id
    append = _one(spans, "cairn-storage", "cairn.shard.append")
    commit = _one(spans, "cairn-storage", "cairn.shard.commit")
    assert append.parent_span_id == served.span_id == commit.parent_span_id
    assert commit.attributes["cairn.shard"] == 0

    get = _one(read_spans, "cairn-gateway", "cairn.client.get")
    read_call = _one(read_spans, "cairn-gateway", "io.oxia.proto.v1.OxiaClient/Read")
    read_served = _one(read_spans, "cairn-storage", "io.oxia.proto.v1.OxiaClient/Read")
    assert read_call.parent_span_id == get.span_id
    assert read_served.parent_span_id == read_call.span_id

    # The access log (shown at the gateway's default WARNING level) is JSON and
    # names the trace it was written in.
    access = [
        json.loads(line)
        for line in gateway.output
        if line.startswith("{") and '"uvicorn.access"' in line
    ]
    [put_line] = [line for line in access if line.get("http.request.method") == "PUT"]
    assert put_line["trace_id"] == trace_id
    assert put_line["http.response.status_code"] == 201
    assert put_line["component"] == "cairn-gateway"
