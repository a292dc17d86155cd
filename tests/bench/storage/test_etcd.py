"""The etcd comparison of `cairn-bench unary --etcd`: the hand-encoded etcd requests,
their pools against Cairn's, and one short run against a real etcd (Debian's
etcd-server, which `./dev test` installs)."""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import replace

import pytest

from cairn.bench.storage.__main__ import main
from cairn.bench.storage.etcd import (
    build_etcd_pool,
    etcd_shards,
    preload_etcd,
    put_request,
    range_found,
    range_request,
    spawned_etcd,
    top_level_fields,
    txn_of_puts,
)
from cairn.bench.storage.pools import build_pool, key_name
from cairn.bench.storage.procs import Target, execute_phase
from cairn.bench.storage.report import Row, etcd_pairs, format_etcd_shares, load_row
from cairn.bench.storage.rpc import Router
from cairn.bench.storage.specs import LoadSpec, PhaseSpec
from cairn.proto import oxia_client_pb2 as pb

ETCD = "etcd"  # on PATH: Debian's etcd-server installs /usr/bin/etcd


def test_requests_are_etcds_messages_in_protobuf_wire_format() -> None:
    # PutRequest{key: "/k", value: "vv"}: field 1 (tag 0x0a) and field 2 (tag 0x12),
    # each its length then its bytes.
    assert put_request(b"/k", b"vv") == b"\x0a\x02/k\x12\x02vv"
    assert range_request(b"/bench/0000000007") == b"\x0a\x11/bench/0000000007"
    # A length above 127 takes a two-byte varint: 300 = 0xac 0x02.
    assert put_request(b"k", b"x" * 300) == b"\x0a\x01k\x12\xac\x02" + b"x" * 300
    # TxnRequest{success: [RequestOp{request_put: PutRequest}] x 2}: field 2 of each.
    first, second = b"\x0a\x01a\x12\x01A", b"\x0a\x01b\x12\x01B"
    assert txn_of_puts([(b"a", b"A"), (b"b", b"B")]) == (
        b"\x12\x08\x12\x06" + first + b"\x12\x08\x12\x06" + second
    )


def test_top_level_fields_reads_every_wire_type_and_refuses_a_cut_message() -> None:
    raw = b"\x08\x96\x01" + b"\x12\x02hi" + b"\x19" + bytes(8) + b"\x25" + bytes(4)
    assert list(top_level_fields(raw)) == [(1, 150), (2, b"hi"), (3, bytes(8)), (4, bytes(4))]
    with pytest.raises(ValueError, match="past the end"):
        list(top_level_fields(b"\x12\x05hi"))
    with pytest.raises(ValueError, match="wire type 3"):
        list(top_level_fields(b"\x0b"))


def test_a_range_is_found_when_its_response_holds_a_key_value() -> None:
    header = b"\x0a\x04\x08\x01\x10\x02"  # ResponseHeader (cluster_id 1, member_id 2)
    key_value = b"\x12\x05\x0a\x01k\x2a\x00"  # kvs[0]: KeyValue{key: "k", value: ""}
    assert range_found(header + key_value + b"\x20\x01")  # ... count: 1
    assert not range_found(header)  # no kvs, count 0 left out
    assert not range_found(b"")


def test_etcd_pools_hold_cairns_keys_and_values_one_op_a_request() -> None:
    address = "127.0.0.1:1"
    router = Router(etcd_shards(address))
    put = LoadSpec("put", "unary", 1, 30, 50, 4, None, seed=5, api="etcd")
    (puts,) = build_etcd_pool(put, router, 1000).values()
    cairn = build_pool(replace(put, api="oxia"), router, 1000)
    cairn_puts = [pb.WriteRequest.FromString(raw).puts[0] for raw in cairn[0]]
    assert [dict(top_level_fields(raw)) for raw in puts] == [
        {1: p.key.encode(), 2: p.value} for p in cairn_puts
    ]
    assert sorted(p.key for p in cairn_puts) == [key_name(i) for i in range(50)]
    (gets,) = build_etcd_pool(replace(put, kind="get"), router, 20).values()
    assert len(gets) == 20
    keys = [dict(top_level_fields(raw)) for raw in gets]
    assert all(set(fields) == {1} for fields in keys)
    assert {fields[1] for fields in keys} <= {key_name(i).encode() for i in range(50)}
    with pytest.raises(ValueError, match="one put or get per unary call"):
        build_etcd_pool(replace(put, batch=2), router, 1000)


def test_etcd_rows_are_labelled_by_kind_alone() -> None:
    put = LoadSpec("put", "unary", 1, 100, 10, 64, None, api="etcd")
    assert put.label() == "etcd put"
    assert replace(put, kind="get").label() == "etcd get"


def _row(name: str, ops_per_s: float, server_cpu_us_per_op: float | None) -> Row:
    return Row(name, ops_per_s, ops_per_s, 1.0, 2.0, 3.0, 4.0, 0, 50.0, server_cpu_us_per_op)


def test_each_cairn_row_is_given_as_a_share_of_the_etcd_row_after_it() -> None:
    rows = [
        _row("ceiling grpc.aio unary b=1 callers=64", 5000, 150),
        _row("put unary b=1 callers=64", 3000, 300),
        _row("etcd put callers=64", 6000, 60),
        _row("ceiling grpc.aio read b=1 callers=64", 2000, 200),
        _row("get read b=1 callers=64", 1500, None),
        _row("etcd get callers=64", 0, 100),
    ]
    pairs = etcd_pairs(rows)
    assert [(row.name, etcd.name) for row, etcd in pairs] == [
        ("put unary b=1 callers=64", "etcd put callers=64"),
        ("get read b=1 callers=64", "etcd get callers=64"),
    ]
    assert format_etcd_shares(pairs).splitlines() == [
        "put unary b=1 callers=64: 50% of etcd (3000 vs 6000 ops/s; server CPU 300 vs 60 us/op)",
        "get read b=1 callers=64: - of etcd (1500 vs 0 ops/s)",
    ]
    assert etcd_pairs(rows[:2]) == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--spawn", "put", "--etcd", ETCD], "--etcd is for the unary workload"),
        (["--spawn", "unary", "--tls", "--etcd", ETCD], "plaintext"),
    ],
)
def test_etcd_option_is_refused_where_it_does_not_apply(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as raised:
        main(argv)
    assert raised.value.code == 2
    assert message in capsys.readouterr().err


async def _etcd_rows(keys: int, callers: int) -> tuple[list[Row], int]:
    rows = []
    async with spawned_etcd(ETCD, start_timeout_s=30.0, stop_timeout_s=10.0) as etcd:
        await preload_etcd(etcd.address, keys, 100, timeout_s=30.0)
        target = Target(etcd.address, etcd_shards(etcd.address), etcd.pid, spawned=True)
        put = LoadSpec("put", "unary", 1, 100, keys, callers, None, api="etcd")
        for spec in (put, replace(put, kind="get")):
            phase = PhaseSpec(
                (spec,),
                duration_s=1.0,
                warmup_s=0.2,
                drain_s=5.0,
                rpc_timeout_s=5.0,
                pool_max_ops=10_000,
            )
            result = await execute_phase(phase, target, procs=callers)
            rows.append(load_row(f"{spec.label()} callers={callers}", result.loads[0], result))
    return rows, etcd.pid


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_unary_puts_and_gets_against_a_spawned_etcd_from_two_load_processes() -> None:
    assert shutil.which(ETCD), "etcd not found: install Debian's etcd-server (./dev test does)"
    rows, pid = asyncio.run(_etcd_rows(keys=500, callers=2))
    assert [row.name for row in rows] == ["etcd put callers=2", "etcd get callers=2"]
    for row in rows:
        extra = dict(row.extra)
        assert row.ops_per_s > 0 and extra["ops"] > 0, row
        assert row.errors == 0 and extra["rpc_errors"] == 0, row  # every get found its key
        assert extra["ops"] == extra["requests"]
        assert row.server_cpu_us_per_op is not None and row.server_cpu_us_per_op > 0, row
        assert row.p50_ms is not None and 0 < row.p50_ms <= (row.max_ms or 0)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped at the end
