"""`cairn perf`: its pure parts (schedule, key choice, interval and summary
tallies), the driver against in-memory targets, the HTTP target against a mock
transport, and short real runs against a standalone server whose summaries must
add up. Nothing here asserts on speed."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from cairn.bench.perf.driver import CpuUse, interval_ends, mode_of, run
from cairn.bench.perf.http import HttpEndpoint
from cairn.bench.perf.options import PerfOptions
from cairn.bench.perf.stats import (
    IntervalLine,
    Recorder,
    Tally,
    Window,
    format_interval,
    format_summary,
    summarize,
)
from cairn.bench.perf.targets import HttpStatusError, HttpTarget, client_options, error_type
from cairn.bench.perf.workload import (
    MAX_CACHED_KEYS,
    KeySpace,
    Kind,
    RateSchedule,
    Workload,
    caller_random,
    formatted_keys,
)
from cairn.client import cli
from support.processes import StandaloneProcess

# ---- workload ---------------------------------------------------------------------------


def test_rate_schedule_hands_out_evenly_spaced_slots() -> None:
    schedule = RateSchedule(first_s=10.0, rate_ops_s=4.0)
    assert [schedule.take() for _ in range(5)] == [10.0, 10.25, 10.5, 10.75, 11.0]
    assert schedule.taken == 5
    assert schedule.peek() == 11.25
    # Slots before 12.0 not taken yet: 11.25, 11.5, 11.75.
    assert schedule.count_before(12.0) == 3
    assert schedule.count_before(11.0) == 0
    with pytest.raises(ValueError, match="positive rate"):
        RateSchedule(0.0, 0.0)


def test_key_space_pads_numbers_so_string_order_is_numeric() -> None:
    keys = KeySpace("/perf/", 1000)
    assert keys.width == 3
    assert keys.key(7) == "/perf/007"
    listed = list(keys.keys())
    assert len(listed) == 1000 == len(set(listed))
    assert listed == sorted(listed)
    assert KeySpace("k", 1).key(0) == "k0"
    with pytest.raises(IndexError):
        keys.key(1000)


@pytest.mark.parametrize("read_ratio", [0.0, 0.25, 1.0])
def test_workload_mixes_reads_and_writes_over_the_key_space(read_ratio: float) -> None:
    keys = KeySpace("/w/", 50)
    workload = Workload(keys, read_ratio, random.Random(1))
    draws = [workload.next() for _ in range(20_000)]
    gets = sum(1 for kind, _ in draws if kind is Kind.GET)
    assert abs(gets / len(draws) - read_ratio) < 0.02
    chosen = {key for _, key in draws}
    assert chosen == set(keys.keys())  # uniform over 50 keys: 20k draws hit them all


def test_preformatted_keys_give_the_same_draws() -> None:
    keys = KeySpace("/w/", 1234)
    formatted = formatted_keys(keys)
    assert formatted is not None and formatted[17] == keys.key(17)
    plain = Workload(keys, 0.5, random.Random(9))
    cached = Workload(keys, 0.5, random.Random(9), formatted)
    assert [plain.next() for _ in range(500)] == [cached.next() for _ in range(500)]
    assert formatted_keys(KeySpace("/big/", MAX_CACHED_KEYS + 1)) is None
    with pytest.raises(ValueError, match="do not match"):
        Workload(keys, 0.5, random.Random(9), formatted[:-1])


def test_each_caller_draws_a_reproducible_sequence() -> None:
    keys = KeySpace("/w/", 10_000)

    def sequence(seed: int, caller: int) -> list[tuple[Kind, str]]:
        workload = Workload(keys, 0.5, caller_random(seed, caller))
        return [workload.next() for _ in range(100)]

    assert sequence(3, 0) == sequence(3, 0)
    assert sequence(3, 0) != sequence(3, 1)
    assert sequence(3, 0) != sequence(4, 0)


# ---- interval and summary tallies ------------------------------------------------------


def test_intervals_break_at_the_window_edges() -> None:
    window = Window.starting_at(100.0, warmup_s=2.5, duration_s=3.0, drain_timeout_s=5.0)
    ends = interval_ends(window, 1.0)
    first = [next(ends) - 100.0 for _ in range(8)]
    assert first == pytest.approx([1.0, 2.0, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5])
    # No warmup: the first interval is a measured one.
    window = Window.starting_at(0.0, warmup_s=0.0, duration_s=2.0, drain_timeout_s=1.0)
    ends = interval_ends(window, 0.75)
    assert [next(ends) for _ in range(4)] == pytest.approx([0.75, 1.5, 2.0, 2.75])
    assert window.phase(0.0) == "measure"
    assert window.phase(2.0) == "drain"


def test_recorder_splits_operations_by_start_and_intervals_by_completion() -> None:
    window = Window.starting_at(0.0, warmup_s=1.0, duration_s=2.0, drain_timeout_s=1.0)
    recorder = Recorder(window)
    recorder.answered(False, started_s=0.5, now_s=0.6)  # warmup
    recorder.answered(True, started_s=0.9, now_s=1.2, found=False)  # warmup, ends measuring
    recorder.answered(False, started_s=1.5, now_s=1.501)
    recorder.failed("RequestTimeout", started_s=1.6, now_s=2.6)
    first = recorder.take_interval()
    recorder.answered(True, started_s=2.99, now_s=3.5)  # measured, finishes in the drain
    second = recorder.take_interval()

    assert (first.ops, first.error_count, second.ops) == (3, 1, 1)
    assert (recorder.warmup.puts, recorder.warmup.gets, recorder.warmup.gets_not_found) == (1, 1, 1)
    measured = recorder.measured
    assert (measured.puts, measured.gets, measured.errors) == (1, 1, {"RequestTimeout": 1})
    assert recorder.last_measured_s == 3.5
    # Every finished operation is in one interval and one of warmup / measured.
    intervals = first.ops + second.ops
    assert intervals == recorder.warmup.ops + recorder.measured.ops


def test_latency_figures_are_ordered() -> None:
    tally = Tally()
    for i in range(1, 10_001):
        tally.answered(False, i / 1e6)  # 1 us .. 10 ms
    figures = tally.latency_ms()
    ordered = [figures[name] for name in ("p50", "p95", "p99", "p999", "max")]
    assert ordered == sorted(ordered)
    assert figures["max"] == pytest.approx(10.0)
    assert figures["p50"] == pytest.approx(5.0, rel=0.01)
    line = IntervalLine.of(tally, at_s=2.0, elapsed_s=0.5, phase="measure")
    assert line.ops_per_s == 20_000
    assert "20000" in format_interval(line)


def test_server_cpu_is_reported_per_operation_or_as_unreadable() -> None:
    used = CpuUse(3.0, (10.0, None, 4.0)).since(CpuUse(1.0, (9.5, 2.0, None)))
    assert used == CpuUse(2.0, (0.5, None, None))
    summary = summarize(
        Tally(), target="x:1", mode="m", elapsed_s=1.0, warmup=Tally(), unfinished=0,
        settings={}, client_cpu_s=0.2, server_cpu_s={12: 0.5, 13: None},
    )  # fmt: skip
    summary = dataclasses.replace(summary, ops=1000)
    assert summary.to_dict()["servers"] == [
        {"pid": 12, "cpu_s": 0.5, "cpu_us_per_op": 500.0},
        {"pid": 13, "cpu_s": None, "cpu_us_per_op": None},
    ]
    text = format_summary(summary)
    assert "server 12: 0.50 CPU s in the window = 500.0 us per op" in text
    assert "server 13: CPU not readable" in text


def test_options_are_checked() -> None:
    PerfOptions(target="127.0.0.1:1")
    for bad, problem in (
        ({"rate_ops_s": -1.0}, "--rate"),
        ({"read_ratio": 1.5}, "--read-ratio"),
        ({"keys": 0}, "--keys"),
        ({"concurrency": 0}, "--concurrency"),
        ({"value_size_bytes": -1}, "--value-size"),
        ({"duration_s": 0.0}, "--duration-s"),
        ({"interval_s": 0.0}, "--interval-s"),
        ({"warmup_s": -1.0}, "--warmup-s"),
        ({"max_batch_ops": 0}, "--max-batch-ops"),
        ({"server_pids": (0,)}, "--server-pid"),
        ({"interval_s": 0.0001, "duration_s": 1000.0}, "intervals"),
    ):
        with pytest.raises(ValueError, match=problem):
            PerfOptions(target="127.0.0.1:1", **bad)
    assert PerfOptions(target="http://gw:8080").is_http
    assert not PerfOptions(target="127.0.0.1:1").is_http


def test_batching_off_means_one_operation_per_request() -> None:
    on = client_options(PerfOptions(target="x:1", linger_ms=2.0, max_batch_ops=50))
    assert on.batching and on.batch_linger_ms == 2.0 and on.max_batch_ops == 50
    off = client_options(PerfOptions(target="x:1", batching=False))
    assert not off.batching
    assert "batching off" in mode_of(PerfOptions(target="x:1", batching=False))


# ---- the driver, against in-memory targets ---------------------------------------------


class MemoryTarget:
    """Answers at once (or after `delay_s`); fails every `fail_every`-th put."""

    def __init__(self, delay_s: float = 0.0, fail_every: int = 0) -> None:
        self.data: dict[str, bytes] = {}
        self.delay_s = delay_s
        self.fail_every = fail_every
        self.puts_attempted = 0
        self.puts_acknowledged = 0
        self.gets = 0
        self.closed = False

    async def put(self, key: str, value: bytes) -> None:
        self.puts_attempted += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        else:
            await asyncio.sleep(0)
        if self.fail_every and self.puts_attempted % self.fail_every == 0:
            raise ConnectionError("refused")
        self.data[key] = value
        self.puts_acknowledged += 1

    async def get(self, key: str) -> bool:
        self.gets += 1
        await asyncio.sleep(self.delay_s)
        return key in self.data

    async def close(self) -> None:
        self.closed = True


def _run(options: PerfOptions, target: MemoryTarget) -> tuple[Any, list[IntervalLine]]:
    lines: list[IntervalLine] = []
    summary = asyncio.run(run(options, lines.append, lambda _: None, target=target))
    return summary, lines


def test_flat_out_run_counts_every_operation_once() -> None:
    target = MemoryTarget(fail_every=7)
    options = PerfOptions(
        target="memory",
        concurrency=8,
        read_ratio=0.3,
        keys=100,
        duration_s=0.4,
        warmup_s=0.2,
        interval_s=0.1,
        drain_timeout_s=1.0,
    )
    summary, lines = _run(options, target)
    assert target.closed
    assert summary.ops > 0 and summary.warmup_ops > 0
    assert summary.unfinished == 0
    # Failures are counted by type, and the run went on.
    assert set(summary.errors) == {"ConnectionError"}
    total_errors = summary.error_count + summary.warmup_errors
    assert total_errors == target.puts_attempted - target.puts_acknowledged
    # Every answered operation is in one interval line, and in warmup or measured.
    assert sum(line.ops for line in lines) == summary.ops + summary.warmup_ops
    assert sum(line.errors for line in lines) == total_errors
    assert summary.ops + summary.warmup_ops == target.puts_acknowledged + target.gets
    assert summary.gets_not_found <= summary.gets
    assert {line.phase for line in lines} >= {"warmup", "measure"}
    figures = summary.latency_ms
    assert figures["p50"] <= figures["p95"] <= figures["p99"] <= figures["p999"] <= figures["max"]
    document = summary.to_dict()
    assert json.loads(json.dumps(document))["ops"] == summary.ops
    assert "summary:" in format_summary(summary)


def test_no_warmup_means_no_warmup_operations_under_uvloop() -> None:
    # uvloop's millisecond timers wake a sleeper up to a millisecond early: the
    # callers' first operations must still fall in the measured window.
    import uvloop

    options = PerfOptions(
        target="memory", concurrency=16, keys=100, duration_s=0.05, warmup_s=0.0,
        interval_s=0.05, drain_timeout_s=1.0,
    )  # fmt: skip
    for _ in range(5):
        target = MemoryTarget()
        summary = uvloop.run(run(options, lambda _: None, lambda _: None, target=target))
        assert summary.warmup_ops == 0
        assert summary.ops == target.puts_acknowledged + target.gets > 0


def test_open_loop_runs_the_scheduled_operations_and_nothing_else() -> None:
    target = MemoryTarget()
    options = PerfOptions(
        target="memory",
        rate_ops_s=500.0,
        concurrency=4,
        duration_s=0.4,
        warmup_s=0.0,
        interval_s=0.1,
    )
    summary, _ = _run(options, target)
    # Slots at 0, 2, 4, ... ms before the end: exactly rate x duration of them.
    assert abs(summary.ops - 500.0 * 0.4) <= 1  # (float rounding at the edge)
    assert summary.unfinished == 0
    assert summary.error_count == 0


def test_open_loop_latency_includes_the_wait_for_a_free_caller() -> None:
    # One caller, 20 ms per operation, 200 scheduled per second: the schedule runs
    # ahead, and each operation's latency counts from its slot (no coordinated
    # omission), so latency grows far beyond the 20 ms service time.
    target = MemoryTarget(delay_s=0.02)
    options = PerfOptions(
        target="memory",
        rate_ops_s=200.0,
        concurrency=1,
        duration_s=0.5,
        warmup_s=0.0,
        interval_s=0.25,
        drain_timeout_s=0.2,
    )
    summary, _ = _run(options, target)
    assert summary.latency_ms["max"] > 100.0
    # The drain was too short for the backlog: what never ran is counted.
    assert summary.unfinished > 0
    assert abs(summary.ops + summary.unfinished - 200.0 * 0.5) <= 1


def test_preload_writes_every_key_so_gets_find_them() -> None:
    target = MemoryTarget()
    options = PerfOptions(
        target="memory",
        read_ratio=1.0,
        keys=40,
        concurrency=3,
        duration_s=0.2,
        warmup_s=0.0,
        interval_s=0.1,
        preload=True,
    )
    summary, _ = _run(options, target)
    assert len(target.data) == 40
    assert summary.gets > 0
    assert summary.gets_not_found == 0


# ---- the HTTP target ------------------------------------------------------------------


async def _http_server(
    answer: Callable[[str, str, bytes], tuple[int, bytes, bool]],
) -> tuple[asyncio.Server, str]:
    """A minimal HTTP/1.1 server on a free port: `answer(method, path, body)` gives
    the status, the body and whether to send it chunked."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                await answer_one(head, reader, writer)
        except asyncio.IncompleteReadError:
            pass  # the client closed the connection
        finally:
            writer.close()

    async def answer_one(
        head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ")
        fields = dict(line.lower().split(": ", 1) for line in lines[1:] if line)
        body = await reader.readexactly(int(fields.get("content-length", "0")))
        status, content, chunked = answer(method, path, body)
        if chunked:
            half = len(content) // 2
            chunks = b"".join(
                b"%x\r\n%s\r\n" % (len(part), part) for part in (content[:half], content[half:])
            )
            writer.write(
                b"HTTP/1.1 %d X\r\ntransfer-encoding: chunked\r\n\r\n%s0\r\n\r\n" % (status, chunks)
            )
        else:
            writer.write(
                b"HTTP/1.1 %d X\r\ncontent-length: %d\r\n\r\n%s" % (status, len(content), content)
            )
        await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


def test_http_target_sends_raw_values_to_escaped_key_paths() -> None:
    seen: list[tuple[str, str, bytes]] = []
    stored: dict[str, bytes] = {}

    def handler(method: str, path: str, body: bytes) -> tuple[int, bytes, bool]:
        seen.append((method, path, body))
        if path.endswith("%2Fbroken"):
            return 503, b"", False
        if method == "PUT":
            stored[path] = body
            return 200, b"{}", True
        if path in stored:
            return 200, stored[path], False
        return 404, b'{"code": "key-not-found"}', False

    async def scenario() -> None:
        server, url = await _http_server(handler)
        target = HttpTarget.open(PerfOptions(target=url, namespace="my ns", concurrency=2))
        await target.put("/a/b c", b"\x00value")
        assert await target.get("/a/b c")
        assert not await target.get("/absent")
        with pytest.raises(HttpStatusError) as raised:
            await target.put("/broken", b"v")
        assert error_type(raised.value) == "HTTP 503"
        await target.close()
        server.close()
        await server.wait_closed()

    asyncio.run(scenario())
    assert seen[0] == ("PUT", "/v1/namespaces/my%20ns/keys/%2Fa%2Fb%20c", b"\x00value")
    assert seen[1][:2] == ("GET", "/v1/namespaces/my%20ns/keys/%2Fa%2Fb%20c")


def test_http_connection_reads_every_kind_of_body() -> None:
    """Bodies by length, chunked (split across reads at every byte) and until
    close, several answers on one connection."""

    async def scenario() -> None:
        answers = [
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
            b"HTTP/1.1 204 No Content\r\n\r\n",
            b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3;x=y\r\nabc\r\n2\r\nde\r\n0\r\ntrailer: t\r\n\r\n",
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.0 200 OK\r\n\r\nuntil close",
        ]

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for answer in answers:
                await reader.readuntil(b"\r\n\r\n")
                for byte in answer:  # one byte per write: every split is seen
                    writer.write(bytes([byte]))
                    await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        endpoint = HttpEndpoint(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        connection = await endpoint.connect()
        got = [
            await connection.exchange(endpoint.request(b"GET", b"/x"), 30.0, keep_body=True)
            for _ in answers
        ]
        assert got == [
            (200, b"hello"),
            (204, b""),
            (201, b"abcde"),
            (404, b""),
            (200, b"until close"),
        ]
        assert not connection.is_open
        server.close()
        await server.wait_closed()

    asyncio.run(scenario())


# ---- short real runs -------------------------------------------------------------------


def _cairn_json(*argv: str) -> tuple[int, Any, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), env={}, stdout=stdout, stderr=stderr)
    return code, json.loads(stdout.getvalue()) if stdout.getvalue() else None, stderr.getvalue()


def _write_operations(address: str) -> int:
    code, view, stderr = _cairn_json(
        "--address", address, "status", "--json", "--admin-url", "http://127.0.0.1:9"
    )
    assert code == 0, stderr
    return sum(shard["status"]["write_operations"] for shard in view["shards"])


@pytest.mark.parametrize("batching", ["on", "off"])
def test_real_run_summary_adds_up(
    standalone_factory: Callable[..., StandaloneProcess], batching: str
) -> None:
    server = standalone_factory(2)
    code, summary, stderr = _cairn_json(
        "--address", server.address, "perf", "--json",
        "--batching", batching, "--concurrency", "16", "--keys", "500",
        "--duration-s", "1", "--warmup-s", "0.3", "--interval-s", "0.25",
    )  # fmt: skip
    assert code == 0, stderr
    assert summary["error_count"] == 0 and summary["unfinished"] == 0
    assert summary["ops"] > 0 and summary["puts"] == summary["ops"]
    # Every acknowledged put is a write operation the server counted, once.
    acknowledged = summary["ops"] + summary["warmup_ops"]
    assert _write_operations(server.address) == acknowledged
    assert sum(line["ops"] for line in summary["intervals"]) == acknowledged
    figures = summary["latency_ms"]
    assert figures["p50"] <= figures["p95"] <= figures["p99"] <= figures["p999"] <= figures["max"]
    # Interval lines went to stderr, the summary alone to stdout.
    assert "p999" in stderr and "measure" in stderr


def test_real_mixed_run_with_preload(standalone_factory: Callable[..., StandaloneProcess]) -> None:
    server = standalone_factory(1)
    code, summary, stderr = _cairn_json(
        "--address", server.address, "perf", "--json", "--preload",
        "--read-ratio", "0.5", "--keys", "200", "--value-size", "10",
        "--concurrency", "8", "--rate", "400",
        "--duration-s", "0.5", "--warmup-s", "0", "--interval-s", "0.25",
    )  # fmt: skip
    assert code == 0, stderr
    assert summary["gets"] > 0 and summary["puts"] > 0
    assert summary["gets_not_found"] == 0
    assert summary["error_count"] == 0
    assert abs(summary["ops"] + summary["unfinished"] - 400 * 0.5) <= 1
    assert _write_operations(server.address) == 200 + summary["puts"]


def test_real_run_through_the_gateway_adds_up(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    from gateway.helpers import GatewayProcess

    server = standalone_factory(2)
    gateway = GatewayProcess([server.address], extra_args=["--workers", "2"])
    # Two workers start (each imports the gateway): a longer bound than one's.
    gateway.start(timeout_s=120.0)
    assert gateway.process is not None and server.process is not None
    gateway_pid, server_pid = gateway.process.pid, server.process.pid
    try:
        code, summary, stderr = _cairn_json(
            "perf", "--json", "--target", gateway.url, "--preload",
            "--read-ratio", "0.3", "--keys", "100", "--concurrency", "8",
            "--duration-s", "1", "--warmup-s", "0", "--interval-s", "0.5",
            "--server-pid", str(gateway_pid), "--server-pid", str(server_pid),
        )  # fmt: skip
    finally:
        gateway.kill()
    assert code == 0, stderr
    assert summary["mode"].startswith("http gateway, 8 connections")
    assert summary["error_count"] == 0 and summary["unfinished"] == 0
    assert summary["gets"] > 0 and summary["gets_not_found"] == 0
    assert _write_operations(server.address) == 100 + summary["puts"]
    figures = summary["latency_ms"]
    assert figures["p50"] <= figures["p99"] <= figures["max"]
    # The servers' CPU over the window: the gateway's counts its workers (its own
    # process only supervises them, a few milliseconds a second).
    servers = {entry["pid"]: entry for entry in summary["servers"]}
    assert set(servers) == {gateway_pid, server_pid}
    assert servers[gateway_pid]["cpu_s"] >= 0.03, servers
    assert servers[server_pid]["cpu_s"] > 0, servers
    for entry in servers.values():
        assert entry["cpu_us_per_op"] == pytest.approx(
            entry["cpu_s"] / summary["ops"] * 1e6, rel=0.01, abs=0.01
        )
