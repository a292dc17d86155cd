"""Result rows and how they are printed: one `key=value` line per row as it
finishes, a table at the end of `all`, the put and get rows as shares of their
grpc.aio ceiling and of etcd's figure for the same load, and one summary line each
for notification fan-out, ephemeral puts and replication (rf=3 against rf=1)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cairn.bench.storage.fsync_probe import FsyncResult
from cairn.bench.storage.notify import NotifyResult
from cairn.bench.storage.sessions import SessionFigures
from cairn.bench.storage.specs import LoadResult, LoadSpec, PhaseResult

CEILING_PREFIX = "ceiling grpc.aio "
ETCD_PREFIX = "etcd "
NOTIFY_PREFIX = "notify "
NOTIFICATIONS_UNIT = "notifications"
EPHEMERAL_PREFIX = "ephemeral "
PLAIN_PUT_ROW = "put stream b=100"  # what `all` compares the ephemeral row with
# Extras printed in a row's line as they are, and those printed as milliseconds.
_SHOWN_EXTRAS = frozenset(
    {
        "client_cores",
        "server_cores",
        "pod_cores",
        "thread_cores",
        "main_runq",
        "requests_per_entry",
        "target_ops_per_s",
        "unsent_requests",
        "delivered_pct",
        "bytes_per_s",
        "before_answer_pct",
        "caught_up",
        "dropped",
        "sessions",
        "keep_alive_errors",
        "close_errors",
        "left_open",
    }
)
_SHOWN_MS_PREFIXES = ("send_lag", "from_send", "lag_from_answer", "drain_ms", "close_")


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    ops_per_s: float
    requests_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    p999_ms: float | None
    max_ms: float | None
    errors: int
    client_cpu_us_per_op: float | None = None
    server_cpu_us_per_op: float | None = None
    extra: tuple[tuple[str, Any], ...] = ()
    ops_unit: str = "ops"  # fsync rows count records
    requests_unit: str = "req"  # fsync rows count syncs

    def to_dict(self) -> dict[str, Any]:
        data = {
            "name": self.name,
            "ops_per_s": round(self.ops_per_s, 1),
            "requests_per_s": round(self.requests_per_s, 1),
            "p50_ms": _round(self.p50_ms),
            "p99_ms": _round(self.p99_ms),
            "p999_ms": _round(self.p999_ms),
            "max_ms": _round(self.max_ms),
            "errors": self.errors,
            "client_cpu_us_per_op": _round(self.client_cpu_us_per_op),
            "server_cpu_us_per_op": _round(self.server_cpu_us_per_op),
        }
        data.update(dict(self.extra))
        return data


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.{digits}g}" if value else "0"


def load_row(name: str, result: LoadResult, phase: PhaseResult) -> Row:
    latency = result.latency
    has = latency.count > 0
    extra: list[tuple[str, Any]] = [
        ("requests", result.requests),
        ("ops", result.ops_ok),
        ("rpc_errors", result.rpc_errors),
        ("client_cores", round(phase.client_cpu_s / phase.window_s, 3)),
        ("pool_build_s", round(phase.build_s, 2)),
    ]
    if phase.server_cpu_s is not None:
        extra.append(("server_cores", round(phase.server_cpu_s / phase.window_s, 3)))
    if phase.pod_cpu_s is not None and len(phase.pod_cpu_s) > 1:
        extra.append(("pod_cores", pod_cores(phase.pod_cpu_s, phase.window_s)))
    if phase.pod_thread_cpu_s is not None:
        extra.append(("thread_cores", thread_cores(phase.pod_thread_cpu_s, phase.window_s)))
    if phase.pod_main_wait_s is not None:
        extra.append(("main_runq", pod_cores(phase.pod_main_wait_s, phase.window_s)))
    if result.spec.rate_ops_per_s is not None:
        lag, from_send = result.send_lag, result.from_send
        extra += [
            ("target_ops_per_s", round(result.spec.rate_ops_per_s, 1)),
            ("send_lag_p50_ms", round(lag.percentile_ms(50), 4)),
            ("send_lag_p99_ms", round(lag.percentile_ms(99), 4)),
            ("from_send_p50_ms", round(from_send.percentile_ms(50), 4)),
            ("from_send_p99_ms", round(from_send.percentile_ms(99), 4)),
            ("unsent_requests", result.unsent_requests),
        ]
    if result.first_error:
        extra.append(("first_error", result.first_error))
    return Row(
        name=name,
        ops_per_s=result.ops_per_s,
        requests_per_s=result.requests_per_s,
        p50_ms=latency.percentile_ms(50) if has else None,
        p99_ms=latency.percentile_ms(99) if has else None,
        p999_ms=latency.percentile_ms(99.9) if has else None,
        max_ms=latency.percentile_ms(100) if has else None,
        errors=result.errors,
        client_cpu_us_per_op=phase.client_cpu_us_per_op() if result.ops_ok else None,
        server_cpu_us_per_op=phase.server_cpu_us_per_op(),
        extra=tuple(extra),
    )


def pod_cores(pod_cpu_s: Sequence[float], window_s: float) -> str:
    """Cores each pod used in the window, leader first: `0.93+0.41+0.40`."""
    return "+".join(f"{cpu_s / window_s:.2f}" for cpu_s in pod_cpu_s)


def thread_cores(pod_thread_cpu_s: Sequence[Mapping[str, float]], window_s: float) -> str:
    """Cores each thread group used in the window, pods leader first:
    `main:0.49+0.37+0.37,rocksdb:0.12+0.11+0.12,...` (groups as the first pod has them)."""
    if not pod_thread_cpu_s:
        return ""
    return ",".join(
        f"{group}:" + pod_cores([pod.get(group, 0.0) for pod in pod_thread_cpu_s], window_s)
        for group in pod_thread_cpu_s[0]
    )


def _percent(part: float, whole: float) -> float | None:
    return None if whole <= 0 else round(100.0 * part / whole, 2)


def notify_row(result: NotifyResult, phase: PhaseResult) -> Row:
    """The subscribers' side of a notify phase: notifications/s delivered in the window
    (summed over subscribers), batches/s, and lag from the write's send to receipt."""
    stats = result.stats
    lag = stats.lag_from_send
    has = lag.count > 0
    ratio = stats.delivered_ratio
    plural = "s" if result.shards != 1 else ""
    extra: list[tuple[str, Any]] = [
        ("subscribers", stats.subscribers),
        ("shards", result.shards),
        ("delivered_pct", None if ratio is None else round(100.0 * ratio, 2)),
        ("expected_entries", stats.expected_entries),
        ("delivered_entries", stats.delivered_entries),
        ("counted_writes", stats.counted_writes),
        ("lag_from_answer_p50_ms", round(stats.lag_from_answer.percentile_ms(50), 4)),
        ("lag_from_answer_p99_ms", round(stats.lag_from_answer.percentile_ms(99), 4)),
        ("before_answer_pct", _percent(stats.before_answer, lag.count)),
        ("drain_ms", round(result.drain_s * 1000.0, 1)),
        ("caught_up", result.caught_up),
        ("dropped", stats.dropped_writes + stats.dropped_batches),
        ("subscribe_ms", round(result.subscribe_s * 1000.0, 1)),
        ("bytes_per_s", round(result.bytes_per_s(phase.window_s))),
        ("client_cores", round(phase.client_cpu_s / phase.window_s, 3)),
    ]
    if phase.server_cpu_s is not None:
        extra.append(("server_cores", round(phase.server_cpu_s / phase.window_s, 3)))
    if result.first_error:
        extra.append(("first_error", result.first_error))
    return Row(
        name=f"{NOTIFY_PREFIX}{stats.subscribers} subs x {result.shards} shard{plural}",
        ops_per_s=result.notifications_per_s(phase.window_s),
        requests_per_s=result.batches_per_s(phase.window_s),
        p50_ms=lag.percentile_ms(50) if has else None,
        p99_ms=lag.percentile_ms(99) if has else None,
        p999_ms=lag.percentile_ms(99.9) if has else None,
        max_ms=lag.percentile_ms(100) if has else None,
        errors=result.stream_errors,
        ops_unit=NOTIFICATIONS_UNIT,
        requests_unit="batches",
        extra=tuple(extra),
    )


def with_sessions(row: Row, figures: SessionFigures) -> Row:
    """An ephemeral put row with its sessions' figures; their failures are errors."""
    extra: list[tuple[str, Any]] = [
        ("sessions", figures.sessions),
        ("create_ms", round(figures.create_s * 1000.0, 1)),
        ("keep_alives", figures.keep_alives),
        ("keep_alive_errors", figures.keep_alive_errors),
        ("close_ms", round(figures.close_s * 1000.0, 1)),
        ("close_max_ms", round(figures.close_max_ms, 1)),
        ("close_errors", figures.close_errors),
        ("left_open", figures.left_open),
    ]
    if figures.first_error and not dict(row.extra).get("first_error"):
        extra.append(("first_error", f"sessions: {figures.first_error}"))
    return replace(row, errors=row.errors + figures.errors, extra=row.extra + tuple(extra))


def fsync_row(name: str, result: FsyncResult) -> Row:
    latency = result.latency
    has = latency.count > 0
    return Row(
        name=name,
        ops_per_s=result.records_per_s,
        requests_per_s=result.syncs_per_s,
        p50_ms=latency.percentile_ms(50) if has else None,
        p99_ms=latency.percentile_ms(99) if has else None,
        p999_ms=latency.percentile_ms(99.9) if has else None,
        max_ms=latency.percentile_ms(100) if has else None,
        errors=0,
        ops_unit="records",
        requests_unit="syncs",
        extra=(
            ("records_per_sync", result.spec.records_per_sync),
            ("record_size_bytes", result.spec.record_size_bytes),
            ("zero_filled", result.spec.zero_filled),
            ("syncs", result.syncs),
            ("directory", str(result.spec.directory)),
        ),
    )


def format_row_line(row: Row) -> str:
    """One `key=value` line per figure set; easy to read and to parse."""
    parts = [
        f"{row.ops_unit}/s={row.ops_per_s:.0f}",
        f"{row.requests_unit}/s={row.requests_per_s:.1f}",
        f"p50_ms={_fmt(row.p50_ms)}",
        f"p99_ms={_fmt(row.p99_ms)}",
        f"p999_ms={_fmt(row.p999_ms)}",
        f"max_ms={_fmt(row.max_ms)}",
        f"errors={row.errors}",
    ]
    if row.client_cpu_us_per_op is not None:
        parts.append(f"client_cpu_us/op={_fmt(row.client_cpu_us_per_op)}")
    if row.server_cpu_us_per_op is not None:
        parts.append(f"server_cpu_us/op={_fmt(row.server_cpu_us_per_op)}")
    for key, value in row.extra:
        if key in _SHOWN_EXTRAS:
            parts.append(f"{key}={value}")
        elif key.startswith(_SHOWN_MS_PREFIXES):
            parts.append(f"{key}={_fmt(value)}")
    line = f"{row.name}: " + " ".join(parts)
    error = dict(row.extra).get("first_error")
    if error:
        line += f"\n  first error: {error}"
    return line


_TABLE_COLUMNS = (
    ("workload", 34),
    ("ops/s", 10),
    ("req/s", 9),
    ("p50 ms", 8),
    ("p99 ms", 8),
    ("p999 ms", 8),
    ("max ms", 8),
    ("errors", 8),
    ("cli us/op", 10),
    ("srv us/op", 10),
)


def format_table(rows: Sequence[Row]) -> str:
    (first, first_width), *others = _TABLE_COLUMNS
    first_width = max([first_width, *(len(row.name) + 1 for row in rows)])
    columns = ((first, first_width), *others)
    head = "".join(
        name.ljust(width) if i == 0 else name.rjust(width)
        for i, (name, width) in enumerate(columns)
    )
    lines = [head, "-" * len(head)]
    for row in rows:
        cells = [
            row.name,
            f"{row.ops_per_s:.0f}",
            f"{row.requests_per_s:.0f}",
            _fmt(row.p50_ms),
            _fmt(row.p99_ms),
            _fmt(row.p999_ms),
            _fmt(row.max_ms),
            str(row.errors),
            _fmt(row.client_cpu_us_per_op),
            _fmt(row.server_cpu_us_per_op),
        ]
        lines.append(
            "".join(
                cell.ljust(width) if i == 0 else cell.rjust(width)
                for i, (cell, (_, width)) in enumerate(zip(cells, columns, strict=True))
            )
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# The grpc.aio ceiling: what the null server carries under the same load


# The loads a ceiling row can stand beside: a row named `<kind> <rest>` matches the
# ceiling named `ceiling grpc.aio <rest>`.
_CEILED_KINDS = ("put ", "get ")


def ceiling_label(spec: LoadSpec, suffix: str = "") -> str:
    """`ceiling grpc.aio stream b=100`: the put row's label (`read b=1` for a get
    row's), against the null server; `suffix` as the row's label has it."""
    return CEILING_PREFIX + spec.label().removeprefix(f"{spec.kind} ") + suffix


@dataclass(frozen=True, slots=True)
class CeilingShare:
    """A put or get row and the ceiling row measured with the same mode, batch and rate."""

    row: Row
    ceiling: Row

    @property
    def percent(self) -> float | None:
        if self.ceiling.ops_per_s <= 0:
            return None
        return 100.0 * self.row.ops_per_s / self.ceiling.ops_per_s


def ceiling_shares(rows: Sequence[Row]) -> list[CeilingShare]:
    """Every put or get row that has a ceiling row of the same mode and batch, in row
    order."""
    ceilings = {
        row.name.removeprefix(CEILING_PREFIX): row
        for row in rows
        if row.name.startswith(CEILING_PREFIX)
    }
    shares = []
    for row in rows:
        kind = next((k for k in _CEILED_KINDS if row.name.startswith(k)), None)
        ceiling = None if kind is None else ceilings.get(row.name.removeprefix(kind))
        if ceiling is not None:
            shares.append(CeilingShare(row, ceiling))
    return shares


def with_ceiling_shares(rows: Sequence[Row]) -> list[Row]:
    """The rows, those with a ceiling given its figures too (for --json)."""
    extra = {}
    for share in ceiling_shares(rows):
        percent = share.percent
        extra[share.row.name] = (
            ("ceiling_pct", None if percent is None else round(percent, 1)),
            ("ceiling_ops_per_s", round(share.ceiling.ops_per_s, 1)),
            ("ceiling_server_cpu_us_per_op", _round(share.ceiling.server_cpu_us_per_op)),
        )
    return [
        replace(row, extra=row.extra + extra[row.name]) if row.name in extra else row
        for row in rows
    ]


def format_ceiling_shares(shares: Sequence[CeilingShare]) -> str:
    """`put stream b=100: 64% of the grpc.aio ceiling (...)`, one line per row with one."""
    return "\n".join(
        _share_line(share.row, share.ceiling, "the grpc.aio ceiling") for share in shares
    )


def _share_line(row: Row, base: Row, base_name: str) -> str:
    """`<row>: 64% of <base_name> (N vs M ops/s; server CPU a vs b us/op)`."""
    share_text = "-" if base.ops_per_s <= 0 else f"{100.0 * row.ops_per_s / base.ops_per_s:.0f}%"
    detail = f"{row.ops_per_s:.0f} vs {base.ops_per_s:.0f} ops/s"
    if row.server_cpu_us_per_op is not None and base.server_cpu_us_per_op is not None:
        detail += (
            f"; server CPU {_fmt(row.server_cpu_us_per_op)}"
            f" vs {_fmt(base.server_cpu_us_per_op)} us/op"
        )
    return f"{row.name}: {share_text} of {base_name} ({detail})"


# ---------------------------------------------------------------------------
# etcd: the same load against a single-member etcd (`unary --etcd`, etcd.py)


def etcd_pairs(rows: Sequence[Row]) -> list[tuple[Row, Row]]:
    """(Cairn's row, etcd's row) for each etcd row: it comes right after the Cairn
    row of the same load (see `_unary_rows` in __main__)."""
    return [
        (row, following)
        for row, following in itertools.pairwise(rows)
        if following.name.startswith(ETCD_PREFIX) and not row.name.startswith(ETCD_PREFIX)
    ]


def format_etcd_shares(pairs: Sequence[tuple[Row, Row]]) -> str:
    """`put unary b=1 callers=64: 80% of etcd (N vs M ops/s; server CPU ...)`."""
    return "\n".join(_share_line(row, etcd, "etcd") for row, etcd in pairs)


# ---------------------------------------------------------------------------
# Summary lines: notification fan-out, ephemeral puts


def _si(value: float) -> str:
    """3 significant digits with a k or M suffix: 2.31M, 58.0k, 950."""
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.0f}"


def format_notify_summary(rows: Sequence[Row]) -> list[str]:
    """`notify: 4 subscribers x 1 shard: 190k notifications/s delivered (100% of
    expected), lag p50 .. p99 .. ms at 47.5k writes/s`, per notify delivery row."""
    lines = []
    writers = [r for r in rows if r.name.startswith(NOTIFY_PREFIX) and r.ops_unit == "ops"]
    deliveries = [r for r in rows if r.name.startswith(NOTIFY_PREFIX) and r.ops_unit != "ops"]
    for delivery, writer in zip(deliveries, writers, strict=False):
        extra = dict(delivery.extra)
        shards = extra.get("shards", 0)
        pct = extra.get("delivered_pct")
        share = "-" if pct is None else f"{pct:.0f}%"
        lines.append(
            f"notify: {extra.get('subscribers')} subscribers x {shards} "
            f"shard{'s' if shards != 1 else ''}: {_si(delivery.ops_per_s)} notifications/s "
            f"delivered ({share} of expected), lag p50 {_fmt(delivery.p50_ms)} "
            f"p99 {_fmt(delivery.p99_ms)} ms at {_si(writer.ops_per_s)} writes/s"
        )
    return lines


def format_ephemeral_summary(rows: Sequence[Row]) -> list[str]:
    """`ephemeral put stream b=100: N ops/s = X% of plain put (...)`, per ephemeral row;
    without the plain put row (the `ephemeral` workload alone), the ops/s only."""
    plain = next((r for r in rows if r.name == PLAIN_PUT_ROW), None)
    lines = []
    for row in rows:
        if not row.name.startswith(EPHEMERAL_PREFIX):
            continue
        extra = dict(row.extra)
        line = f"{row.name}: {row.ops_per_s:.0f} ops/s"
        if plain is not None and plain.ops_per_s > 0:
            percent = 100.0 * row.ops_per_s / plain.ops_per_s
            line += f" = {percent:.0f}% of plain put ({plain.ops_per_s:.0f} ops/s)"
        line += (
            f"; p50 {_fmt(row.p50_ms)} p99 {_fmt(row.p99_ms)} ms; closing "
            f"{extra.get('sessions')} sessions took {_fmt(extra.get('close_ms'))} ms"
        )
        lines.append(line)
    return lines


# ---------------------------------------------------------------------------
# Replication: the same put load against clusters of different replication factors

HALF_PREFIX = "half "
_REPLICATION_ROW = re.compile(r"^rf=(\d+) (half )?")
_CONCURRENCY = re.compile(r" c=(\d+)$")


def replication_label(replication_factor: int, label: str) -> str:
    """`rf=3 put stream b=100 c=32`, `rf=3 half put stream b=100 @20000/s c=32`."""
    return f"rf={replication_factor} {label}"


def concurrency_label(label: str, concurrency: int) -> str:
    """A load's label with its requests in flight: `put stream b=100 c=32`."""
    return f"{label} c={concurrency}"


def _concurrency_of(row: Row) -> int | None:
    match = _CONCURRENCY.search(row.name)
    return None if match is None else int(match.group(1))


def _replication_rows(
    rows: Sequence[Row],
) -> tuple[dict[int, list[Row]], dict[int, Row]]:
    """Each replication factor's flat-out rows, and its half-peak row."""
    peaks: dict[int, list[Row]] = {}
    halves: dict[int, Row] = {}
    for row in rows:
        match = _REPLICATION_ROW.match(row.name)
        if match is None:
            continue
        factor = int(match.group(1))
        if match.group(2):
            halves.setdefault(factor, row)
        else:
            peaks.setdefault(factor, []).append(row)
    return peaks, halves


def _share(row: Row, base_row: Row) -> str:
    percent = _percent(row.ops_per_s, base_row.ops_per_s)
    return "-" if percent is None else f"{percent:.0f}%"


def _equal_concurrency_shares(rows: Sequence[Row], base_rows: Sequence[Row]) -> str:
    """`c=16 45%, c=32 51%`: the share at each concurrency both factors ran."""
    base_by_concurrency = {_concurrency_of(row): row for row in base_rows}
    shares = [
        f"c={concurrency} {_share(row, base_by_concurrency[concurrency])}"
        for row in rows
        if (concurrency := _concurrency_of(row)) is not None and concurrency in base_by_concurrency
    ]
    return ", ".join(shares)


def _latencies(row: Row | None) -> str:
    if row is None:
        return "-"
    figures = "/".join(_fmt(v) for v in (row.p50_ms, row.p99_ms, row.p999_ms))
    target = dict(row.extra).get("target_ops_per_s")
    return figures if target is None else f"{figures} @{_si(float(target))}/s"


def format_replication_summary(rows: Sequence[Row]) -> list[str]:
    """`replication: rf=3 put stream b=100 c=32 41.2k ops/s = 47% of rf=1's 87.6k
    (put stream b=100 c=16); at equal concurrency: c=16 44%, c=32 47%; half peak
    p50/p99/p999 ms: rf=1 .. @43.8k/s, rf=3 ..; server CPU us/op at peak (all pods):
    ..; rf=3 write requests per log entry at peak/half: ..`, one line per
    replication factor above the lowest. A factor's peak is its best flat-out row."""
    peaks, halves = _replication_rows(rows)
    if len(peaks) < 2:
        return []
    best = {
        factor: max(candidates, key=lambda row: row.ops_per_s)
        for factor, candidates in peaks.items()
    }
    factors = sorted(peaks)
    base = factors[0]
    base_row = best[base]
    lines = []
    for factor in factors[1:]:
        row = best[factor]
        equal = _equal_concurrency_shares(peaks[factor], peaks[base])
        cpu = ", ".join(f"rf={f} {_fmt(best[f].server_cpu_us_per_op)}" for f in (base, factor))
        folding = _requests_per_entry(row, halves.get(factor))
        lines.append(
            f"replication: rf={factor} {_REPLICATION_ROW.sub('', row.name)} "
            f"{_si(row.ops_per_s)} ops/s = {_share(row, base_row)} of rf={base}'s "
            f"{_si(base_row.ops_per_s)} ({_REPLICATION_ROW.sub('', base_row.name)}); "
            + (f"at equal concurrency: {equal}; " if equal else "")
            + f"half peak p50/p99/p999 ms: rf={base} {_latencies(halves.get(base))}, "
            f"rf={factor} {_latencies(halves.get(factor))}; "
            f"server CPU us/op at peak (all pods): {cpu}"
            + (
                f"; rf={factor} write requests per log entry at peak/half: {folding}"
                if folding
                else ""
            )
        )
    return lines


def _requests_per_entry(peak: Row, half: Row | None) -> str:
    """`2.8/1.14`: how many client write requests the leader folded into each log
    entry at the peak and at half of it (`-` for a half without it; empty if the
    peak has none)."""
    at_peak = dict(peak.extra).get("requests_per_entry")
    if at_peak is None:
        return ""
    at_half = None if half is None else dict(half.extra).get("requests_per_entry")
    return f"{_fmt(at_peak)}/{_fmt(at_half)}"
