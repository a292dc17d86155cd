"""The null server's answers and the ceiling summary, without processes."""

from __future__ import annotations

import asyncio
import itertools

import grpc
import grpc.aio
import pytest

from cairn.bench.storage.null_server import (
    NullService,
    ReadResponses,
    WriteResponses,
    assignments_message,
    generic_handler,
)
from cairn.bench.storage.pools import count_get_results, count_put_results
from cairn.bench.storage.report import (
    Row,
    ceiling_label,
    ceiling_shares,
    format_ceiling_shares,
    with_ceiling_shares,
)
from cairn.bench.storage.rpc import (
    METHOD_READ,
    METHOD_WRITE,
    METHOD_WRITE_STREAM,
    NAMESPACE,
    fetch_shards,
)
from cairn.bench.storage.specs import LoadSpec
from cairn.proto import oxia_client_pb2 as pb


def test_write_responses_answer_every_put_ok_in_the_real_shape() -> None:
    responses = WriteResponses(timestamp_ms=1_700_000_000_000)
    for count in (1, 7, 100):
        raw = responses.for_puts(count)
        assert count_put_results(raw, count) == (count, 0)
        puts = pb.WriteResponse.FromString(raw).puts
        assert len(puts) == count
        for put in puts:
            assert put.status == pb.OK
            version = put.version
            assert version.version_id > 0 and version.modifications_count > 0
            assert version.created_timestamp == version.modified_timestamp == 1_700_000_000_000
    assert responses.for_puts(0) == b""
    assert responses.for_puts(100) is responses.for_puts(100), "built once per put count"


def test_write_response_cache_is_bounded() -> None:
    responses = WriteResponses(timestamp_ms=1, max_cached=3)
    for count in range(10):
        assert len(pb.WriteResponse.FromString(responses.for_puts(count)).puts) == count
    assert responses.for_puts(1) is responses.for_puts(1)
    assert responses.for_puts(9) is not responses.for_puts(9), "beyond the bound: not kept"


def test_assignments_announce_one_shard_over_the_whole_hash_space() -> None:
    message = pb.ShardAssignments.FromString(assignments_message("127.0.0.1:5", 1))
    assert list(message.namespaces) == [NAMESPACE]
    entry = message.namespaces[NAMESPACE]
    assert entry.shard_key_router == pb.XXHASH3
    (assignment,) = entry.assignments
    assert (assignment.shard, assignment.leader) == (0, "127.0.0.1:5")
    hash_range = assignment.int32_hash_range
    assert (hash_range.min_hash_inclusive, hash_range.max_hash_inclusive) == (0, 0xFFFFFFFF)


def test_assignments_can_match_the_real_server_shard_count() -> None:
    message = pb.ShardAssignments.FromString(assignments_message("h:1", 3))
    assignments = message.namespaces[NAMESPACE].assignments
    assert [a.shard for a in assignments] == [0, 1, 2]
    assert assignments[0].int32_hash_range.min_hash_inclusive == 0
    assert assignments[-1].int32_hash_range.max_hash_inclusive == 0xFFFFFFFF
    for before, after in itertools.pairwise(assignments):
        assert after.int32_hash_range.min_hash_inclusive == (
            before.int32_hash_range.max_hash_inclusive + 1
        )


def row(name: str, ops_per_s: float, server_cpu_us_per_op: float | None = None) -> Row:
    return Row(
        name=name,
        ops_per_s=ops_per_s,
        requests_per_s=ops_per_s,
        p50_ms=None,
        p99_ms=None,
        p999_ms=None,
        max_ms=None,
        errors=0,
        server_cpu_us_per_op=server_cpu_us_per_op,
    )


def test_ceiling_label_mirrors_the_put_label() -> None:
    spec = LoadSpec("put", "stream", 100, 100, 10, 16, None)
    assert spec.label() == "put stream b=100"
    assert ceiling_label(spec) == "ceiling grpc.aio stream b=100"
    unary = LoadSpec("put", "unary", 1, 100, 10, 16, 500.0)
    assert ceiling_label(unary) == "ceiling grpc.aio unary b=1 @500/s"
    # Several streams per shard are named, so that their row and ceiling pair up
    # apart from the one-stream rows of the same batch.
    clients = LoadSpec("put", "stream", 1, 100, 10, 16, None, streams_per_shard=16)
    assert clients.label() == "put stream b=1 streams=16"
    assert ceiling_label(clients) == "ceiling grpc.aio stream b=1 streams=16"


def test_each_put_row_is_given_as_a_share_of_its_own_ceiling() -> None:
    rows = [
        row("fsync 1 x 100B/sync", 2000),
        row("ceiling grpc.aio stream b=100", 200_000, 2.5),
        row("put stream b=100", 128_000, 12.0),
        row("ceiling grpc.aio stream b=1", 2500, 250),
        row("put stream b=1", 2000, 400),
        row("mix put stream b=100 @64000/s", 64000),
    ]
    shares = ceiling_shares(rows)
    assert [(s.row.name, s.ceiling.name) for s in shares] == [
        ("put stream b=100", "ceiling grpc.aio stream b=100"),
        ("put stream b=1", "ceiling grpc.aio stream b=1"),
    ]
    assert [s.percent for s in shares] == [pytest.approx(64.0), pytest.approx(80.0)]
    assert format_ceiling_shares(shares).splitlines() == [
        "put stream b=100: 64% of the grpc.aio ceiling "
        "(128000 vs 200000 ops/s; server CPU 12 vs 2.5 us/op)",
        "put stream b=1: 80% of the grpc.aio ceiling "
        "(2000 vs 2500 ops/s; server CPU 400 vs 250 us/op)",
    ]
    extended = {r.name: dict(r.extra) for r in with_ceiling_shares(rows)}
    assert extended["put stream b=100"] == {
        "ceiling_pct": 64.0,
        "ceiling_ops_per_s": 200_000,
        "ceiling_server_cpu_us_per_op": 2.5,
    }
    assert extended["put stream b=1"]["ceiling_pct"] == 80.0
    assert extended["mix put stream b=100 @64000/s"] == {}


def test_unary_put_and_get_rows_stand_beside_their_own_ceilings() -> None:
    put = LoadSpec("put", "unary", 1, 100, 10, 64, None)
    get = LoadSpec("get", "unary", 1, 100, 10, 64, None)
    suffix = " callers=64"
    assert ceiling_label(put, suffix) == "ceiling grpc.aio unary b=1 callers=64"
    assert ceiling_label(get, suffix) == "ceiling grpc.aio read b=1 callers=64"
    rows = [
        row(ceiling_label(put, " callers=1"), 700, 500),
        row("put unary b=1 callers=1", 160, 2000),
        row(ceiling_label(put, suffix), 1400, 400),
        row(put.label() + suffix, 700, 800),
        row(ceiling_label(get, suffix), 1000, 600),
        row(get.label() + suffix, 500, 900),
    ]
    assert [(s.row.name, s.ceiling.name) for s in ceiling_shares(rows)] == [
        ("put unary b=1 callers=1", "ceiling grpc.aio unary b=1 callers=1"),
        ("put unary b=1 callers=64", "ceiling grpc.aio unary b=1 callers=64"),
        ("get read b=1 callers=64", "ceiling grpc.aio read b=1 callers=64"),
    ]


def test_a_zero_ceiling_gives_no_percentage() -> None:
    rows = [row("ceiling grpc.aio stream b=1", 0), row("put stream b=1", 10)]
    (share,) = ceiling_shares(rows)
    assert share.percent is None
    assert format_ceiling_shares([share]) == (
        "put stream b=1: - of the grpc.aio ceiling (10 vs 0 ops/s)"
    )
    assert dict(with_ceiling_shares(rows)[1].extra)["ceiling_pct"] is None


async def _against_an_in_process_null_server() -> None:
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    address = f"127.0.0.1:{port}"
    service = NullService(
        WriteResponses(timestamp_ms=5),
        ReadResponses(timestamp_ms=5, value_size_bytes=7),
        assignments_message(address, 1),
        4,
    )
    server.add_generic_rpc_handlers([generic_handler(service)])
    await server.start()
    try:
        (shard,) = await fetch_shards(address, timeout_s=5.0)
        assert (shard.shard_id, shard.leader, shard.min_hash, shard.max_hash) == (
            0,
            address,
            0,
            0xFFFFFFFF,
        )
        request = pb.WriteRequest(shard=0, puts=[pb.PutRequest(key="/a", value=b"v")] * 3)
        async with grpc.aio.insecure_channel(address) as channel:
            raw = await channel.unary_unary(METHOD_WRITE)(request.SerializeToString(), timeout=5)
            assert count_put_results(raw, 3) == (3, 0)
            call = channel.stream_stream(METHOD_WRITE_STREAM)(timeout=5)
            for count in range(1, 11):  # more than the in-flight bound of 4
                await call.write(
                    pb.WriteRequest(puts=[request.puts[0]] * count).SerializeToString()
                )
            for count in range(1, 11):
                assert count_put_results(await call.read(), count) == (count, 0)
            await call.write(b"\xff\xff")  # not a WriteRequest
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await call.read()
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await channel.unary_unary(METHOD_WRITE)(b"\xff\xff", timeout=5)
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            read = pb.ReadRequest(shard=0, gets=[pb.GetRequest(key="/a")] * 2)
            chunks = [
                raw
                async for raw in channel.unary_stream(METHOD_READ)(
                    read.SerializeToString(), timeout=5
                )
            ]
            assert count_get_results(chunks, 2) == (2, 0)
            (chunk,) = chunks
            assert [get.value for get in pb.ReadResponse.FromString(chunk).gets] == [b"v" * 7] * 2
    finally:
        service.stop()
        await server.stop(1.0)


def test_null_server_answers_writes_streams_and_assignments() -> None:
    asyncio.run(_against_an_in_process_null_server())
