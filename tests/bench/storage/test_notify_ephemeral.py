"""`notify` and `ephemeral`: their pieces, then each run against a real server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import grpc
import pytest

from cairn.bench.storage.__main__ import main
from cairn.bench.storage.ledger import DeliveryStats
from cairn.bench.storage.notify import NotifyProbe, NotifyResult
from cairn.bench.storage.pools import build_pool, distinct_put_keys, entry_offset
from cairn.bench.storage.report import (
    Row,
    format_ephemeral_summary,
    format_notify_summary,
    format_row_line,
    notify_row,
    with_sessions,
)
from cairn.bench.storage.rpc import Router, ShardInfo
from cairn.bench.storage.sessions import SessionFigures
from cairn.bench.storage.specs import LoadSpec, PhaseResult, SessionRef
from cairn.bench.storage.timing import Window
from cairn.common.hashing import split_hash_space
from cairn.common.histogram import Histogram
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc
from support.processes import StandaloneProcess


def shards_of(count: int) -> list[ShardInfo]:
    return [
        ShardInfo(10 + i, "127.0.0.1:1", r.min_inclusive, r.max_inclusive)
        for i, r in enumerate(split_hash_space(count))
    ]


def write_response(offset: int, count: int, first_status: int = pb.OK) -> bytes:
    puts = [
        pb.PutResponse(
            status=first_status if i == 0 else pb.OK, version=pb.Version(version_id=offset)
        )
        for i in range(count)
    ]
    return bytes(pb.WriteResponse(puts=puts).SerializeToString())


# ---------------------------------------------------------------------------
# offsets and keys of requests and responses


@pytest.mark.parametrize("offset", [0, 1, 127, 128, 300_000_000, 2**62])
def test_entry_offset_reads_the_first_put(offset: int) -> None:
    assert entry_offset(write_response(offset, 100)) == offset


def test_entry_offset_is_none_without_an_ok_first_put() -> None:
    assert entry_offset(b"") is None
    assert entry_offset(write_response(5, 3, first_status=pb.SESSION_DOES_NOT_EXIST)) is None
    assert entry_offset(b"\x0a\xff") is None, "cut short"
    assert entry_offset(b"\x12\x00") is None, "not field 1"


def test_distinct_put_keys_counts_a_repeated_key_once() -> None:
    puts = [pb.PutRequest(key=k, value=b"v") for k in ("/a", "/b", "/a", "/c")]
    assert distinct_put_keys(pb.WriteRequest(shard=1, puts=puts).SerializeToString()) == 3


# ---------------------------------------------------------------------------
# ephemeral pools


def sessions_for(shards: list[ShardInfo], per_shard: int) -> tuple[SessionRef, ...]:
    return tuple(
        SessionRef(s.shard_id, 1000 * s.shard_id + i, f"bench/{s.shard_id}/{i}")
        for s in shards
        for i in range(per_shard)
    )


def owners(pool: dict[int, list[bytes]]) -> dict[str, tuple[int, str]]:
    found: dict[str, tuple[int, str]] = {}
    for shard_id, requests in pool.items():
        for raw in requests:
            message = pb.WriteRequest.FromString(raw)
            assert message.shard == shard_id
            for put in message.puts:
                assert put.HasField("session_id") and put.HasField("client_identity")
                assert put.session_id // 1000 == shard_id, "a session of the key's own shard"
                owner = (put.session_id, put.client_identity)
                assert found.setdefault(put.key, owner) == owner, "one owner per key"
    return found


def test_ephemeral_pool_ties_each_key_to_one_session_of_its_shard() -> None:
    shards = shards_of(3)
    spec = LoadSpec("put", "stream", 10, 20, 600, 4, None, sessions=sessions_for(shards, 4))
    assert spec.label() == "ephemeral put stream b=10"
    pool = build_pool(spec, Router(shards), max_ops=10_000)
    keys = owners(pool)
    assert len(keys) == 600
    assert len({owner for owner in keys.values()}) == 12, "every session gets keys"
    # another seed (as each --procs process has) shuffles keys, not their owners
    reshuffled = owners(build_pool(replace(spec, seed=99), Router(shards), 10_000))
    assert reshuffled == keys


def test_ephemeral_pool_needs_a_session_on_every_shard() -> None:
    shards = shards_of(2)
    spec = LoadSpec("put", "stream", 10, 20, 600, 4, None, sessions=sessions_for(shards[:1], 1))
    with pytest.raises(ValueError, match="no session"):
        build_pool(spec, Router(shards), max_ops=10_000)


def test_plain_pool_has_no_sessions() -> None:
    spec = LoadSpec("put", "stream", 10, 20, 100, 4, None)
    for requests in build_pool(spec, Router(shards_of(1)), 10_000).values():
        for raw in requests:
            assert not any(p.HasField("session_id") for p in pb.WriteRequest.FromString(raw).puts)


# ---------------------------------------------------------------------------
# the probe's writer side, without a server


def test_probe_gives_the_ledger_each_answered_write() -> None:
    shards = shards_of(2)
    probe = NotifyProbe(shards, subscribers=3, drain_s=1.0, stream_timeout_s=10.0)
    puts = [pb.PutRequest(key=f"/k/{i % 4}", value=b"v") for i in range(6)]
    request = pb.WriteRequest(shard=11, puts=puts).SerializeToString()
    probe.observe(request, write_response(40, 6), 0.5, None, 0.6)  # before begin: ignored
    probe.begin(Window(start_s=0.0, measure_start_s=1.0, end_s=2.0, drain_deadline_s=3.0))
    probe.observe(request, write_response(41, 6), 0.9, None, 1.0)  # warmup: not counted
    probe.observe(request, write_response(42, 6), 1.5, None, 1.6)
    probe.observe(request, write_response(43, 6, pb.UNEXPECTED_VERSION_ID), 1.5, None, 1.6)
    stats = probe.result().stats
    assert stats.counted_writes == 1
    assert stats.expected_entries == 3 * 4, "subscribers x distinct keys"


def test_probe_bounds_its_streams() -> None:
    with pytest.raises(ValueError, match="subscribers must be"):
        NotifyProbe(shards_of(1), subscribers=0, drain_s=1.0, stream_timeout_s=1.0)
    with pytest.raises(ValueError, match="must not exceed"):
        NotifyProbe(shards_of(32), subscribers=256, drain_s=1.0, stream_timeout_s=1.0)


# ---------------------------------------------------------------------------
# rows and summary lines


def phase_result(window_s: float = 2.0) -> PhaseResult:
    return PhaseResult([], window_s, client_cpu_s=0.5, server_cpu_s=1.0, build_s=0.1)


def test_notify_row_and_summary() -> None:
    lag = Histogram()
    for ms in (2, 3, 4, 50):
        lag.record_us(ms * 1000)
    stats = DeliveryStats(
        subscribers=4,
        expected_entries=400,
        delivered_entries=400,
        counted_writes=1,
        window_entries=4_600_000,
        window_batches=46_000,
        lag_from_send=lag,
    )
    result = NotifyResult(stats, 1, 4, 0, None, 9_200_000, 0.01, 0.002, True)
    delivery = notify_row(result, phase_result())
    assert delivery.name == "notify 4 subs x 1 shard"
    assert (delivery.ops_per_s, delivery.requests_per_s) == (2_300_000, 23_000)
    assert delivery.ops_unit == "notifications"
    assert dict(delivery.extra)["delivered_pct"] == 100.0
    line = format_row_line(delivery)
    assert line.startswith("notify 4 subs x 1 shard: notifications/s=2300000 batches/s=23000.0")
    assert "delivered_pct=100.0" in line and "caught_up=True" in line
    assert "bytes_per_s=4600000" in line
    writer = Row("notify put stream b=100", 57_600, 576, 1, 2, 3, 4, 0)
    assert format_notify_summary([writer, delivery]) == [
        "notify: 4 subscribers x 1 shard: 2.3M notifications/s delivered (100% of expected), "
        "lag p50 3.01 p99 49.9 ms at 57.6k writes/s"
    ]


def test_ephemeral_row_carries_session_figures_and_their_errors() -> None:
    row = Row("ephemeral put stream b=100", 20_000, 200, 10, 20, 30, 40, 0)
    figures = SessionFigures(sessions=4, keep_alives=8, close_s=0.25, close_max_ms=240, left_open=1)
    with_figures = with_sessions(row, figures)
    assert with_figures.errors == 1, "a session left open is an error"
    line = format_row_line(with_figures)
    assert "sessions=4" in line and "close_ms=250" in line and "left_open=1" in line
    plain = Row("put stream b=100", 50_000, 500, 5, 10, 15, 20, 0)
    assert format_ephemeral_summary([plain, with_figures]) == [
        "ephemeral put stream b=100: 20000 ops/s = 40% of plain put (50000 ops/s); "
        "p50 10 p99 20 ms; closing 4 sessions took 250 ms"
    ]
    alone = format_ephemeral_summary([with_figures])
    assert alone == [
        "ephemeral put stream b=100: 20000 ops/s; p50 10 p99 20 ms; closing 4 sessions took 250 ms"
    ]


def test_notify_refuses_procs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["--spawn", "notify", "--procs", "2"])
    assert raised.value.code == 2
    assert "one process" in capsys.readouterr().err


def test_subscribers_and_sessions_are_bounded() -> None:
    with pytest.raises(SystemExit):
        main(["--spawn", "notify", "--subscribers", "0"])
    with pytest.raises(SystemExit):
        main(["--spawn", "notify", "--subscribers", "100000"])
    with pytest.raises(SystemExit):
        main(["--spawn", "ephemeral", "--sessions", "100000"])


# ---------------------------------------------------------------------------
# end to end: a real server


def run_bench(*args: str, timeout_s: float = 30.0) -> tuple[int, str, str]:
    process = subprocess.run(
        [sys.executable, "-m", "cairn.bench.storage", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return process.returncode, process.stdout, process.stderr


def results_of(output: str) -> dict[str, dict[str, Any]]:
    (line,) = [line for line in output.splitlines() if line.startswith("{")]
    return {row["name"]: row for row in json.loads(line)["results"]}


SHORT = ("--duration-s", "1", "--warmup-s", "0.2", "--drain-s", "5", "--keys", "2000", "--json")


@pytest.mark.e2e
@pytest.mark.timeout(30)
def test_notify_delivers_every_change_to_every_subscriber() -> None:
    code, out, err = run_bench("--spawn", "--shards", "2", *SHORT, "notify", "--subscribers", "3")
    assert code == 0, out + err
    assert "subscribers_run_in=writer-loop" in out
    results = results_of(out)
    writer = results["notify put stream b=100"]
    assert writer["ops"] > 0 and writer["errors"] == 0 and writer["rpc_errors"] == 0
    delivery = results["notify 3 subs x 2 shards"]
    assert delivery["errors"] == 0
    assert delivery["ops_per_s"] > 0 and delivery["requests_per_s"] > 0
    assert delivery["expected_entries"] > 0
    assert delivery["delivered_entries"] >= 0.99 * delivery["expected_entries"]
    assert delivery["delivered_entries"] <= delivery["expected_entries"]
    assert delivery["caught_up"] is True and delivery["dropped"] == 0
    assert 0 < delivery["p50_ms"] <= delivery["p99_ms"] <= delivery["max_ms"]
    # each write notifies each subscriber once, with an entry per key: 3 x 100
    assert delivery["expected_entries"] == 3 * 100 * delivery["counted_writes"]
    summary = re.search(
        r"^notify: 3 subscribers x 2 shards: \S+ notifications/s delivered \((\d+)% of expected\), "
        r"lag p50 \S+ p99 \S+ ms at \S+ writes/s$",
        out,
        re.MULTILINE,
    )
    assert summary is not None, out
    assert int(summary.group(1)) >= 99


def _still_listed(address: str, shards: int) -> list[str]:
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.OxiaClientStub(channel)
        keys: list[str] = []
        for shard in range(shards):
            request = pb.ListRequest(
                shard=shard, start_inclusive="/bench/", end_exclusive="/bench//"
            )
            for chunk in stub.List(request, timeout=10):
                keys.extend(chunk.keys)
        return keys


def _keep_alive_codes(address: str, sessions: list[list[int]]) -> set[grpc.StatusCode]:
    codes = set()
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.OxiaClientStub(channel)
        for shard, session_id in sessions:
            try:
                stub.KeepAlive(pb.SessionHeartbeat(shard=shard, session_id=session_id), timeout=10)
            except grpc.RpcError as error:
                codes.add(error.code())  # type: ignore[attr-defined]
            else:
                codes.add(grpc.StatusCode.OK)
    return codes


@pytest.mark.e2e
@pytest.mark.timeout(30)
def test_ephemeral_puts_then_every_session_is_closed(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    server = standalone_factory(2)
    code, out, err = run_bench("--address", server.address, *SHORT, "ephemeral", "--sessions", "3")
    assert code == 0, out + err
    row = results_of(out)["ephemeral put stream b=100"]
    assert row["ops"] > 0 and row["ops_per_s"] > 0
    assert row["errors"] == 0 and row["rpc_errors"] == 0
    assert row["ops"] == 100 * row["requests"]
    assert row["sessions"] == 6 and len(row["session_ids"]) == 6
    assert row["close_errors"] == 0 and row["left_open"] == 0
    assert row["close_ms"] > 0
    assert re.search(
        r"^ephemeral put stream b=100: \d+ ops/s; p50 \S+ p99 \S+ ms; closing 6 sessions took",
        out,
        re.MULTILINE,
    ), out
    # Checked from outside too: the sessions are gone, and so are their records.
    assert _keep_alive_codes(server.address, row["session_ids"]) == {grpc.StatusCode.NOT_FOUND}
    assert _still_listed(server.address, 2) == []
