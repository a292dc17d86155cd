from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cairn.bench.storage.__main__ import main
from cairn.bench.storage.pools import build_pool, count_get_results, count_put_results
from cairn.bench.storage.rpc import Router, ShardInfo
from cairn.bench.storage.specs import Kind, LoadResult, LoadSpec
from cairn.bench.storage.timing import Schedule
from cairn.common.hashing import key_hash, split_hash_space
from cairn.proto import oxia_client_pb2 as pb

FIGURE = re.compile(r"([a-z0-9_/]+)=([0-9.]+|-)")


def figures(line: str) -> dict[str, float]:
    return {key: float(value) for key, value in FIGURE.findall(line) if value != "-"}


def json_document(output: str) -> dict[str, Any]:
    lines = [line for line in output.splitlines() if line.startswith("{")]
    assert len(lines) == 1, output
    document: dict[str, Any] = json.loads(lines[0])
    return document


def shards_of(count: int) -> list[ShardInfo]:
    return [
        ShardInfo(
            shard_id=10 + i,
            leader="127.0.0.1:1",
            min_hash=r.min_inclusive,
            max_hash=r.max_inclusive,
        )
        for i, r in enumerate(split_hash_space(count))
    ]


# ---------------------------------------------------------------------------
# fsync: runs everywhere, no server


def test_fsync_prints_positive_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["--data-dir", str(tmp_path), "fsync", "--duration-s", "0.5", "--warmup-s", "0", "--json"]
    )
    assert code == 0
    output = capsys.readouterr().out
    lines = [line for line in output.splitlines() if line.startswith("fsync ")]
    # Appends, then writes over zero-filled room, each one record and 100 per sync.
    assert len(lines) == 4, output
    assert [line.endswith(" over zeros") or " over zeros:" in line for line in lines] == [
        False,
        False,
        True,
        True,
    ]
    rows = [figures(line) for line in lines]
    for row in rows:
        assert row["records/s"] > 0
        assert row["syncs/s"] > 0
        assert 0 < row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]
        assert row["errors"] == 0
    for single, grouped in (rows[0:2], rows[2:4]):
        assert single["records/s"] == pytest.approx(single["syncs/s"], rel=0.01)
        assert grouped["records/s"] == pytest.approx(100 * grouped["syncs/s"], rel=0.01)
    document = json_document(output)
    assert [r["records_per_sync"] for r in document["results"]] == [1, 100, 1, 100]
    assert [r["zero_filled"] for r in document["results"]] == [False, False, True, True]
    assert list(tmp_path.iterdir()) == [], "the probe file must be removed"


def test_load_workloads_need_a_server(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["put"])
    assert raised.value.code == 2
    assert "--address" in capsys.readouterr().err


def test_bounds_are_enforced() -> None:
    with pytest.raises(SystemExit):
        main(["--spawn", "put", "--concurrency", "0"])
    with pytest.raises(SystemExit):
        main(["--spawn", "put", "--duration-s", "1e9"])
    with pytest.raises(SystemExit):
        main(["--spawn", "put", "--concurrency", "2", "--procs", "3"])


# ---------------------------------------------------------------------------
# the pieces figures depend on


def test_router_matches_the_hash_ranges() -> None:
    shards = shards_of(3)
    router = Router(list(reversed(shards)))
    for i in range(500):
        key = f"/k/{i}"
        shard = router.shard_of(key)
        assert shard.min_hash <= key_hash(key) <= shard.max_hash


def test_router_rejects_a_gap() -> None:
    router = Router([ShardInfo(1, "a:1", 0, 10)])
    with pytest.raises(LookupError):
        router.shard_of("/k/0")  # hashes far above 10 with overwhelming likelihood


@pytest.mark.parametrize("kind", ["put", "get"])
def test_pool_requests_hold_exactly_batch_ops_of_their_shard(kind: Kind) -> None:
    shards = shards_of(3)
    router = Router(shards)
    spec = LoadSpec(
        kind=kind,
        mode="stream",
        batch=7,
        value_size_bytes=33,
        keys=500,
        concurrency=4,
        rate_ops_per_s=None,
    )
    pool = build_pool(spec, router, max_ops=10_000)
    assert set(pool) == {s.shard_id for s in shards}
    seen: set[str] = set()
    for shard_id, requests in pool.items():
        for raw in requests:
            if kind == "put":
                message: Any = pb.WriteRequest.FromString(raw)
                ops = [(p.key, len(p.value)) for p in message.puts]
                assert all(size == 33 for _, size in ops)
                keys = [k for k, _ in ops]
            else:
                message = pb.ReadRequest.FromString(raw)
                assert all(g.include_value for g in message.gets)
                keys = [g.key for g in message.gets]
            assert message.shard == shard_id
            assert len(keys) == 7
            assert all(router.shard_of(k).shard_id == shard_id for k in keys)
            seen.update(keys)
    assert len(seen) == 500, "the pool covers the whole key space"


def test_pool_is_bounded() -> None:
    router = Router(shards_of(2))
    spec = LoadSpec("put", "stream", 10, 10, 1_000_000, 4, None)
    pool = build_pool(spec, router, max_ops=2_000)
    assert sum(len(r) for r in pool.values()) <= 2_000 // 10 + 2


def put_response(statuses: list[Any]) -> bytes:
    puts = [
        pb.PutResponse(status=s, version=pb.Version(version_id=1000 + i, modified_timestamp=0x0A08))
        for i, s in enumerate(statuses)
    ]
    return bytes(pb.WriteResponse(puts=puts).SerializeToString())


def test_put_results_count_every_status() -> None:
    assert count_put_results(put_response([0] * 100), 100) == (100, 0)
    assert count_put_results(put_response([0, 2, 0, 1]), 4) == (2, 2)
    assert count_put_results(put_response([0, 0]), 5) == (2, 3), "missing answers are failures"
    assert count_put_results(b"", 3) == (0, 3)


def test_get_results_survive_values_that_look_like_statuses() -> None:
    tricky = b"\x0a\x05\x08\x01" * 8
    ok = pb.ReadResponse(gets=[pb.GetResponse(value=tricky, key="/a")] * 3)
    bad = pb.ReadResponse(
        gets=[pb.GetResponse(status=pb.KEY_NOT_FOUND), pb.GetResponse(value=tricky)]
    )
    chunks = [ok.SerializeToString(), bad.SerializeToString()]
    assert count_get_results(chunks, 5) == (4, 1)
    assert count_get_results(chunks, 7) == (4, 3)


def test_schedule_counts_what_is_left() -> None:
    schedule = Schedule(first_s=100.0, interval_s=0.5)
    assert schedule.take() == 100.0
    assert schedule.take() == 100.5
    assert schedule.count_before(102.0) == 2  # 101.0 and 101.5


def test_results_merge_and_roundtrip() -> None:
    spec = LoadSpec("put", "stream", 100, 100, 10, 4, None)
    a = LoadResult(spec=spec, requests=3, ops_ok=300, elapsed_s=2.0)
    a.latency.record_us(500)
    b = LoadResult.from_dict(spec, json.loads(json.dumps(a.to_dict())))
    b.first_error = "UNAVAILABLE: x"
    a.merge(b)
    assert (a.requests, a.ops_ok, a.latency.count, a.first_error) == (6, 600, 2, "UNAVAILABLE: x")
    assert a.ops_per_s == 300.0


# ---------------------------------------------------------------------------
# end to end: a spawned server


def run_bench(*args: str, timeout_s: float = 60.0) -> tuple[int, str, str]:
    process = subprocess.run(
        [sys.executable, "-m", "cairn.bench.storage", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return process.returncode, process.stdout, process.stderr


COMMON = ("--spawn", "--shards", "2", "--duration-s", "1", "--warmup-s", "0", "--json")


@pytest.mark.e2e
@pytest.mark.timeout(60)
def test_spawned_put_end_to_end() -> None:
    code, out, err = run_bench(*COMMON, "--keys", "2000", "put")
    assert code == 0, out + err
    (row,) = json_document(out)["results"]
    assert row["ops"] > 0 and row["ops_per_s"] > 0
    assert row["errors"] == 0 and row["rpc_errors"] == 0
    assert row["ops"] == 100 * row["requests"]
    assert row["server_cpu_us_per_op"] is not None


@pytest.mark.e2e
@pytest.mark.timeout(60)
def test_spawned_get_end_to_end() -> None:
    code, out, err = run_bench(*COMMON, "--keys", "2000", "--batch", "10", "get")
    assert code == 0, out + err
    assert "# preloaded 2000 keys" in out
    (row,) = json_document(out)["results"]
    assert row["ops"] > 0 and row["errors"] == 0
    assert row["ops"] == 10 * row["requests"]


@pytest.mark.e2e
@pytest.mark.timeout(60)
def test_ceiling_runs_the_put_load_against_a_null_server() -> None:
    code, out, err = run_bench(
        "ceiling", "--duration-s", "1", "--warmup-s", "0", "--keys", "2000", "--json"
    )
    assert code == 0, out + err
    assert "# cairn-bench ceiling:" in out
    (row,) = json_document(out)["results"]
    assert row["name"] == "ceiling grpc.aio stream b=100"
    assert row["ops"] > 0 and row["ops_per_s"] > 0
    assert row["errors"] == 0 and row["rpc_errors"] == 0
    assert row["ops"] == 100 * row["requests"]
    assert row["server_cpu_us_per_op"] is not None, "the null server's CPU is read too"


@pytest.mark.e2e
@pytest.mark.timeout(60)
def test_ceiling_unary_batch_one() -> None:
    code, out, err = run_bench(
        "ceiling", "--mode", "unary", "--batch", "1", "--duration-s", "0.5", "--warmup-s", "0"
    )
    assert code == 0, out + err
    (line,) = [line for line in out.splitlines() if line.startswith("ceiling ")]
    assert line.startswith("ceiling grpc.aio unary b=1:")
    row = figures(line)
    assert row["ops/s"] > 0 and row["errors"] == 0
    assert row["ops/s"] == pytest.approx(row["req/s"], rel=0.01)


def test_ceiling_refuses_an_address(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["--address", "127.0.0.1:1", "ceiling"])
    assert raised.value.code == 2
    assert "null server" in capsys.readouterr().err


@pytest.mark.e2e
@pytest.mark.timeout(90)
def test_all_adds_no_many_clients_row_when_the_load_already_has_a_stream_per_request() -> None:
    code, out, err = run_bench(
        "--spawn", "all", "--duration-s", "0.2", "--warmup-s", "0", "--keys", "2000",
        "--concurrency", "4", "--streams-per-shard", "4", "--json",
    )  # fmt: skip
    assert code == 0, out + err
    names = [row["name"] for row in json_document(out)["results"]]
    assert len(set(names)) == len(names), names
    single_puts = [name for name in names if name.startswith(("put stream b=1 ", "ceiling"))]
    assert [name for name in single_puts if " b=1 " in name] == [
        "ceiling grpc.aio stream b=1 streams=4",
        "put stream b=1 streams=4",
    ]


@pytest.mark.e2e
@pytest.mark.timeout(90)
def test_all_puts_a_ceiling_row_before_each_put_row_and_gives_the_share() -> None:
    code, out, err = run_bench(
        "--spawn", "all", "--duration-s", "0.3", "--warmup-s", "0", "--keys", "2000", "--json"
    )
    assert code == 0, out + err
    names = [row["name"] for row in json_document(out)["results"]]
    assert len(set(names)) == len(names), names
    batched = names.index("put stream b=100")
    single = names.index("put stream b=1")
    clients = names.index("put stream b=1 streams=16")
    assert names[batched - 1] == "ceiling grpc.aio stream b=100"
    assert names[single - 1] == "ceiling grpc.aio stream b=1"
    assert names[clients - 1] == "ceiling grpc.aio stream b=1 streams=16"
    results = {row["name"]: row for row in json_document(out)["results"]}
    for put, ceiling in (
        ("put stream b=100", "ceiling grpc.aio stream b=100"),
        ("put stream b=1", "ceiling grpc.aio stream b=1"),
        ("put stream b=1 streams=16", "ceiling grpc.aio stream b=1 streams=16"),
    ):
        assert results[ceiling]["errors"] == 0 and results[ceiling]["ops"] > 0
        expected = 100 * results[put]["ops_per_s"] / results[ceiling]["ops_per_s"]
        assert results[put]["ceiling_pct"] == pytest.approx(expected, abs=0.1)
        table = [line for line in out.splitlines() if re.match(rf"{ceiling} +\d+ ", line)]
        assert len(table) == 1, "the ceiling row is in the table"
        share = re.search(rf"^{put}: (\d+)% of the grpc\.aio ceiling \(", out, re.MULTILINE)
        assert share is not None, out
        assert int(share.group(1)) == round(expected)
    # notify and ephemeral come last, each with its summary line
    assert names[-3:] == [
        "notify put stream b=100",
        "notify 4 subs x 1 shard",
        "ephemeral put stream b=100",
    ]
    assert all(results[name]["errors"] == 0 for name in names[-3:])
    assert re.search(
        r"^notify: 4 subscribers x 1 shard: \S+ notifications/s delivered \(\d+% of expected\)",
        out,
        re.MULTILINE,
    ), out
    assert re.search(
        r"^ephemeral put stream b=100: \d+ ops/s = \d+% of plain put \(\d+ ops/s\)",
        out,
        re.MULTILINE,
    ), out
