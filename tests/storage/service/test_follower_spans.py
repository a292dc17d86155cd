"""With tracing on, a replicated write's trace shows the follower's part: the
leader passes the trace context of the writes in each Replicate message, and the
follower records `cairn.replica.append` (logging them) and `cairn.replica.ack`
(until it reports them durable), children of the leader's span of the write and
linked to the other writes of the message. Two storage nodes in process (real
gRPC on loopback), spans into an in-memory exporter."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from cairn.common import tracing
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc
from cairn.proto import replication_pb2 as rpb
from cairn.proto import replication_pb2_grpc as rpb_grpc
from cairn.storage.config import NodeConfig
from cairn.storage.node import NodeServer
from cairn.storage.replication.follower_spans import FollowerSpans

SHARD = 0
TERM = 1
FOLLOWER_SPANS = ("cairn.replica.append", "cairn.replica.ack")


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Tracing on for this process's tracer only (`tracing.configure` would set the
    process-wide provider)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_tracer", provider.get_tracer("test"))
    monkeypatch.setattr(tracing, "ENABLED", True)
    yield exporter
    provider.shutdown()


def _node(member: rpb.Node) -> rpb.Node:
    return rpb.Node(public_address=member.public_address, internal_address=member.internal_address)


async def _write_traced(tmp_path: Path, writes: int) -> list[str]:
    """`writes` concurrent writes through a leader with one follower, each under a
    caller's span of its own trace; the trace ids (hex)."""
    nodes = [NodeServer(NodeConfig(data_dir=tmp_path / name)) for name in ("leader", "follower")]
    members = [await node.start() for node in nodes]
    try:
        spec = rpb.ShardSpec(namespace="default")
        for member in members:
            async with grpc.aio.insecure_channel(member.internal_address) as channel:
                await rpb_grpc.CoordinationStub(channel).NewTerm(
                    rpb.NewTermRequest(shard=SHARD, term=TERM, spec=spec), timeout=10
                )
        async with grpc.aio.insecure_channel(members[0].internal_address) as channel:
            await rpb_grpc.CoordinationStub(channel).BecomeLeader(
                rpb.BecomeLeaderRequest(
                    shard=SHARD,
                    term=TERM,
                    leader=_node(members[0]),
                    followers=[_node(members[1])],
                ),
                timeout=10,
            )
        await nodes[0].directory.replica(SHARD).wait_serving(10)
        trace_ids = [secrets.token_hex(16) for _ in range(writes)]
        async with grpc.aio.insecure_channel(members[0].public_address) as channel:
            stub = pb_grpc.OxiaClientStub(channel)
            await asyncio.gather(
                *(
                    stub.Write(
                        pb.WriteRequest(
                            shard=SHARD, puts=[pb.PutRequest(key=f"/k/{n}", value=b"v")]
                        ),
                        metadata=[("traceparent", f"00-{trace_id}-{secrets.token_hex(8)}-01")],
                        timeout=30,
                    )
                    for n, trace_id in enumerate(trace_ids)
                )
            )
        return trace_ids
    finally:
        for node in nodes:
            await node.stop(grace_s=0.5)


def _named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in spans.get_finished_spans() if span.name == name]


def test_a_replicated_write_shows_the_followers_append_and_ack(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    (trace_id,) = asyncio.run(_write_traced(tmp_path, writes=1))
    # The write's answer waited for the follower's acknowledgement (two replicas).
    (leader_append,) = [
        span
        for span in _named(spans, "cairn.shard.append")
        if span.context.trace_id == int(trace_id, 16)
    ]
    found = {}
    for name in FOLLOWER_SPANS:
        of_trace = [s for s in _named(spans, name) if s.context.trace_id == int(trace_id, 16)]
        assert len(of_trace) == 1, (name, spans.get_finished_spans())
        found[name] = of_trace[0]
    append, ack = found["cairn.replica.append"], found["cairn.replica.ack"]
    for span in (append, ack):
        assert span.parent is not None and span.parent.span_id == leader_append.context.span_id
        assert span.parent.is_remote  # it came over the Replicate stream
        assert span.attributes is not None and span.attributes["cairn.shard"] == SHARD
    assert ack.attributes is not None
    assert ack.attributes["cairn.durable_offset"] >= ack.attributes["cairn.last_offset"]
    assert append.end_time is not None and ack.start_time is not None
    assert append.end_time <= ack.start_time
    assert ack.status.status_code is StatusCode.UNSET


def test_every_write_of_a_message_reaches_the_followers_spans(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    """Writes that travel together (several entries, or folded into one) give one
    span pair per message: the first write's is its parent, the others are links."""
    trace_ids = asyncio.run(_write_traced(tmp_path, writes=12))
    appends = _named(spans, "cairn.replica.append")
    reached = {span.context.trace_id for span in appends} | {
        link.context.trace_id for span in appends for link in span.links
    }
    assert {int(trace_id, 16) for trace_id in trace_ids} <= reached
    assert len(_named(spans, "cairn.replica.ack")) == len(appends)


def test_spans_never_acknowledged_end_as_errors_when_the_stream_ends(
    spans: InMemorySpanExporter,
) -> None:
    request = rpb.ReplicateRequest(
        shard=SHARD,
        term=TERM,
        entries=[rpb.LogEntry(term=TERM, offset=offset) for offset in (5, 6)],
        traces=[rpb.TraceContext(fields={"traceparent": f"00-{'a' * 32}-{'b' * 16}-01"})],
    )
    follower = FollowerSpans(SHARD)
    with follower.appending(request):
        pass
    follower.acknowledged(5)  # not yet the whole message
    assert not _named(spans, "cairn.replica.ack")
    follower.close()
    (ack,) = _named(spans, "cairn.replica.ack")
    assert ack.status.status_code is StatusCode.ERROR
    # A message without traces (tracing off at the leader) records nothing.
    with follower.appending(rpb.ReplicateRequest(shard=SHARD, entries=request.entries)):
        pass
    follower.close()
    assert len(spans.get_finished_spans()) == 2
