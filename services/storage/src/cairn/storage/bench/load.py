"""The gRPC load loops of cairn-bench: put (WriteStream or Write) and get (Read).

Requests are serialized once, up front, into a pool per shard (building a
100-put protobuf from Python objects costs far more than sending it), and are
sent as raw bytes through method handles without serializers. The pool covers
the key space once (or a uniform sample of it, when larger than the pool bound)
and is cycled through.

Timing (all on the monotonic clock):

    start ──warmup──> measure_start ──duration──> end ──drain (bounded)──> done

A request belongs to the figures when its start time is in [measure_start, end).
Closed loop (no rate): start = when it was sent. Open loop (`rate_ops_per_s`):
start = its SCHEDULED time on a fixed-rate schedule, so a request that had to
wait for a free slot, or for a late timer, carries that wait in its latency
(no coordinated omission); requests still unsent when the drain ends are
counted as `unsent`. Open loop also records, per request, how late it was sent
(`send_lag`: the client's own timer and slot waits; asyncio timers have ~1 ms
granularity) and its latency from the actual send (`from_send`), so queueing,
client lateness and service time can be told apart.

No request is started after `end`; in-flight ones (and, in open loop, ones
scheduled before `end`) finish during the drain. Throughput is counted ops over
(last counted completion or `end`) - measure_start.

One latency sample per answered request (a 100-put request is one sample);
requests whose RPC failed count their ops as failed and give no sample, and
`requests` counts answered requests only.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import math
import random
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import grpc
import grpc.aio

from cairn.common.hashing import key_hash
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.bench.histogram import Histogram

_SERVICE = "/io.oxia.proto.v1.OxiaClient/"
METHOD_ASSIGNMENTS = _SERVICE + "GetShardAssignments"
METHOD_WRITE = _SERVICE + "Write"
METHOD_WRITE_STREAM = _SERVICE + "WriteStream"
METHOD_READ = _SERVICE + "Read"
NAMESPACE = "default"
STATUS_OK = 0
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # Separate TCP connections per channel, so `--channels` means what it says.
    ("grpc.use_local_subchannel_pool", 1),
)
STREAM_REOPEN_BACKOFF_S = 0.1
PRELOAD_BATCH = 1000
PRELOAD_INFLIGHT_PER_SHARD = 4
CHILD_SETUP_TIMEOUT_S = 120.0

# A response whose repeated field 1 (puts / gets) holds an element whose first
# field is field 1 (status), i.e. a non-OK status: proto3 omits a zero status,
# and serializers emit fields in field-number order. No match proves every
# element is OK; a match (possibly a false one inside a value) falls back to
# checking each element.
_NON_OK_STATUS = re.compile(rb"\x0a[\x80-\xff]{0,4}[\x00-\x7f]\x08")

Kind = Literal["put", "get"]
Mode = Literal["stream", "unary"]


def key_name(index: int) -> str:
    return f"/bench/{index:010d}"


@dataclass(frozen=True, slots=True)
class ShardInfo:
    shard_id: int
    leader: str
    min_hash: int
    max_hash: int


class Router:
    """Key -> shard by the inclusive 32-bit hash ranges of the assignments."""

    def __init__(self, shards: Sequence[ShardInfo]) -> None:
        if not shards:
            raise ValueError("no shards to route to")
        self.shards = sorted(shards, key=lambda s: s.min_hash)
        self._mins = [s.min_hash for s in self.shards]

    def shard_of(self, key: str) -> ShardInfo:
        value = key_hash(key)
        index = bisect.bisect_right(self._mins, value) - 1
        if index < 0 or value > self.shards[index].max_hash:
            raise LookupError(f"no shard covers hash {value:#010x} of key {key!r}")
        return self.shards[index]


async def fetch_shards(address: str, timeout_s: float) -> list[ShardInfo]:
    """The first ShardAssignments message of namespace `default` (then cancels the stream)."""
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        method = channel.unary_stream(
            METHOD_ASSIGNMENTS,
            request_serializer=pb.ShardAssignmentsRequest.SerializeToString,
            response_deserializer=pb.ShardAssignments.FromString,
        )
        call = method(pb.ShardAssignmentsRequest(namespace=NAMESPACE), timeout=timeout_s)
        try:
            message = await call.read()
        except grpc.aio.AioRpcError as error:
            raise RuntimeError(f"{address}: GetShardAssignments: {_describe(error)}") from None
        finally:
            call.cancel()
    if message is grpc.aio.EOF:
        raise RuntimeError(f"{address}: shard assignment stream ended without a message")
    if NAMESPACE not in message.namespaces:
        raise RuntimeError(f"{address}: no assignments for namespace {NAMESPACE!r}")
    shards = []
    for assignment in message.namespaces[NAMESPACE].assignments:
        hash_range = assignment.int32_hash_range
        shards.append(
            ShardInfo(
                shard_id=int(assignment.shard),
                leader=str(assignment.leader),
                min_hash=int(hash_range.min_hash_inclusive),
                max_hash=int(hash_range.max_hash_inclusive),
            )
        )
    if not shards:
        raise RuntimeError(f"{address}: namespace {NAMESPACE!r} has no shards")
    return shards


# ---------------------------------------------------------------------------
# Specs and results


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """One load generator. Get keys are drawn from the preloaded [0, keys)."""

    kind: Kind
    mode: Mode  # get always uses Read calls (a server stream per request)
    batch: int  # ops per request
    value_size_bytes: int
    keys: int  # key space [0, keys)
    concurrency: int  # in-flight requests in total
    rate_ops_per_s: float | None  # None: closed loop, flat out
    streams_per_shard: int = 1
    seed: int = 1

    def label(self) -> str:
        how = "read" if self.kind == "get" else self.mode
        rate = "" if self.rate_ops_per_s is None else f" @{self.rate_ops_per_s:.0f}/s"
        return f"{self.kind} {how} b={self.batch}{rate}"


@dataclass(frozen=True, slots=True)
class PhaseSpec:
    """Loads run together in one timed window."""

    loads: tuple[LoadSpec, ...]
    duration_s: float
    warmup_s: float
    drain_s: float  # bound on finishing in-flight work after the window
    rpc_timeout_s: float
    pool_max_ops: int  # bound on pre-built ops per load (memory)
    channels: int = 1  # per leader address


@dataclass(slots=True)
class LoadResult:
    spec: LoadSpec
    latency: Histogram = field(default_factory=Histogram)  # per request, from its start
    send_lag: Histogram = field(default_factory=Histogram)  # open loop: sent - scheduled
    from_send: Histogram = field(default_factory=Histogram)  # open loop: answered - sent
    requests: int = 0
    ops_ok: int = 0
    ops_failed: int = 0
    rpc_errors: int = 0
    unsent_requests: int = 0
    elapsed_s: float = 0.0
    first_error: str | None = None
    pool_requests: int = 0

    @property
    def ops_per_s(self) -> float:
        return self.ops_ok / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def errors(self) -> int:
        return self.ops_failed + self.unsent_requests * self.spec.batch

    def merge(self, other: LoadResult) -> None:
        self.latency.merge(other.latency)
        self.send_lag.merge(other.send_lag)
        self.from_send.merge(other.from_send)
        self.requests += other.requests
        self.ops_ok += other.ops_ok
        self.ops_failed += other.ops_failed
        self.rpc_errors += other.rpc_errors
        self.unsent_requests += other.unsent_requests
        self.elapsed_s = max(self.elapsed_s, other.elapsed_s)
        self.first_error = self.first_error or other.first_error
        self.pool_requests += other.pool_requests

    def to_dict(self) -> dict[str, Any]:
        return {
            "latency": self.latency.to_dict(),
            "send_lag": self.send_lag.to_dict(),
            "from_send": self.from_send.to_dict(),
            "requests": self.requests,
            "ops_ok": self.ops_ok,
            "ops_failed": self.ops_failed,
            "rpc_errors": self.rpc_errors,
            "unsent_requests": self.unsent_requests,
            "elapsed_s": self.elapsed_s,
            "first_error": self.first_error,
            "pool_requests": self.pool_requests,
        }

    @classmethod
    def from_dict(cls, spec: LoadSpec, data: dict[str, Any]) -> LoadResult:
        return cls(
            spec=spec,
            latency=Histogram.from_dict(data["latency"]),
            send_lag=Histogram.from_dict(data["send_lag"]),
            from_send=Histogram.from_dict(data["from_send"]),
            requests=int(data["requests"]),
            ops_ok=int(data["ops_ok"]),
            ops_failed=int(data["ops_failed"]),
            rpc_errors=int(data["rpc_errors"]),
            unsent_requests=int(data["unsent_requests"]),
            elapsed_s=float(data["elapsed_s"]),
            first_error=data["first_error"],
            pool_requests=int(data["pool_requests"]),
        )


@dataclass(slots=True)
class PhaseResult:
    loads: list[LoadResult]
    window_s: float  # the measured window (duration)
    client_cpu_s: float  # load process(es) CPU during the window
    server_cpu_s: float | None  # the server's CPU during the window, if known
    build_s: float  # time spent pre-building request pools (not measured)

    @property
    def ops_per_s(self) -> float:
        return sum(r.ops_per_s for r in self.loads)

    def client_cpu_us_per_op(self) -> float:
        ops = self.ops_per_s * self.window_s
        return self.client_cpu_s / ops * 1e6 if ops > 0 else 0.0

    def server_cpu_us_per_op(self) -> float | None:
        ops = self.ops_per_s * self.window_s
        if self.server_cpu_s is None or ops <= 0:
            return None
        return self.server_cpu_s / ops * 1e6


# ---------------------------------------------------------------------------
# Request pools


def _choose_keys(keys: int, max_ops: int, rng: random.Random) -> list[int]:
    """Every key once in random order, or a uniform sample when the pool is smaller."""
    if keys <= max_ops:
        chosen = list(range(keys))
        rng.shuffle(chosen)
        return chosen
    return rng.sample(range(keys), max_ops)


def _group_by_shard(indexes: Sequence[int], router: Router) -> dict[int, list[str]]:
    groups: dict[int, list[str]] = {s.shard_id: [] for s in router.shards}
    for index in indexes:
        name = key_name(index)
        groups[router.shard_of(name).shard_id].append(name)
    return {shard_id: names for shard_id, names in groups.items() if names}


def _batches(names: list[str], batch: int) -> list[list[str]]:
    """Chunks of exactly `batch` keys, wrapping around (a shard with fewer keys repeats)."""
    count = max(1, math.ceil(len(names) / batch))
    return [[names[(i * batch + j) % len(names)] for j in range(batch)] for i in range(count)]


# Random value bytes minus 0x08 and 0x0a, so that values (which the get checks
# see) rarely trip the non-OK-status pattern; 254 of 256 byte values keep them
# as incompressible as random bytes.
_VALUE_BYTES = bytes.maketrans(b"\x08\x0a", b"\x09\x0b")


def _value_source(value_size_bytes: int, rng: random.Random) -> Callable[[int], bytes]:
    """Distinct-looking random values without generating one per key."""
    span = 4096
    data = rng.randbytes(value_size_bytes + span).translate(_VALUE_BYTES)
    return lambda i: data[i % span : i % span + value_size_bytes]


def build_pool(spec: LoadSpec, router: Router, max_ops: int) -> dict[int, list[bytes]]:
    """Serialized requests per shard id, each of exactly `spec.batch` ops."""
    rng = random.Random(spec.seed)
    indexes = _choose_keys(spec.keys, max(max_ops, spec.batch), rng)
    pool: dict[int, list[bytes]] = {}
    if spec.kind == "put":
        value_of = _value_source(spec.value_size_bytes, rng)
        op = 0
        for shard_id, names in _group_by_shard(indexes, router).items():
            requests = []
            for chunk in _batches(names, spec.batch):
                puts = []
                for name in chunk:
                    puts.append(pb.PutRequest(key=name, value=value_of(op)))
                    op += 1
                message = pb.WriteRequest(shard=shard_id, puts=puts)
                requests.append(message.SerializeToString())
            pool[shard_id] = requests
    else:
        for shard_id, names in _group_by_shard(indexes, router).items():
            pool[shard_id] = [
                pb.ReadRequest(
                    shard=shard_id,
                    gets=[pb.GetRequest(key=name, include_value=True) for name in chunk],
                ).SerializeToString()
                for chunk in _batches(names, spec.batch)
            ]
    return pool


def _interleave(pool: dict[int, list[bytes]]) -> list[tuple[int, bytes]]:
    """One list cycling through the shards, for loads that are not per-shard."""
    out: list[tuple[int, bytes]] = []
    columns = list(pool.items())
    longest = max(len(requests) for _, requests in columns)
    for i in range(longest):
        for shard_id, requests in columns:
            out.append((shard_id, requests[i % len(requests)]))
    return out


# ---------------------------------------------------------------------------
# Response checks


def count_put_results(raw: bytes, expected: int) -> tuple[int, int]:
    """(ops ok, ops failed) of a serialized WriteResponse to `expected` puts."""
    puts = pb.WriteResponse.FromString(raw).puts
    received = len(puts)
    failed = 0
    if _NON_OK_STATUS.search(raw) is not None:
        failed = sum(1 for p in puts if p.status != STATUS_OK)
    missing = max(0, expected - received)
    return received - failed, failed + missing


def count_get_results(raws: Sequence[bytes], expected: int) -> tuple[int, int]:
    """(ops ok, ops failed) of the ReadResponse chunks answering `expected` gets."""
    received = 0
    failed = 0
    for raw in raws:
        gets = pb.ReadResponse.FromString(raw).gets
        received += len(gets)
        if _NON_OK_STATUS.search(raw) is not None:
            failed += sum(1 for g in gets if g.status != STATUS_OK)
    missing = max(0, expected - received)
    return received - failed, failed + missing


def _describe(error: BaseException) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return f"{type(error).__name__}: {error}"


# ---------------------------------------------------------------------------
# Timing and accounting


@dataclass(frozen=True, slots=True)
class Window:
    start_s: float
    measure_start_s: float
    end_s: float
    drain_deadline_s: float


class Schedule:
    """Fixed-rate start times: the i-th request starts at first_s + i * interval_s."""

    __slots__ = ("_next_index", "first_s", "interval_s")

    def __init__(self, first_s: float, interval_s: float) -> None:
        self.first_s = first_s
        self.interval_s = interval_s
        self._next_index = 0

    def take(self) -> float:
        at_s = self.first_s + self._next_index * self.interval_s
        self._next_index += 1
        return at_s

    def count_before(self, end_s: float) -> int:
        """Requests scheduled at or after the next one and before `end_s`."""
        total = math.ceil((end_s - self.first_s) / self.interval_s)
        return max(0, total - self._next_index)


class Tally:
    """Accumulates one load's figures for requests started inside the window."""

    def __init__(self, result: LoadResult, window: Window) -> None:
        self.result = result
        self.window = window
        self.last_completion_s = window.end_s

    def done(
        self, start_s: float, sent_s: float | None, now_s: float, ok: int, failed: int
    ) -> None:
        """An answered request; `sent_s` is given in open loop (start_s is then scheduled)."""
        if start_s < self.window.measure_start_s:
            return
        result = self.result
        result.requests += 1
        result.ops_ok += ok
        result.ops_failed += failed
        result.latency.record_s(now_s - start_s)
        if sent_s is not None:
            result.send_lag.record_s(sent_s - start_s)
            result.from_send.record_s(now_s - sent_s)
        if now_s > self.last_completion_s:
            self.last_completion_s = now_s

    def failed(self, start_s: float, now_s: float, error: BaseException) -> None:
        """A request whose RPC failed: all its ops count as failed; no latency sample."""
        if start_s < self.window.measure_start_s:
            return
        result = self.result
        result.rpc_errors += 1
        result.ops_failed += result.spec.batch
        if result.first_error is None:
            result.first_error = _describe(error)
        if now_s > self.last_completion_s:
            self.last_completion_s = now_s

    def unsent(self, count: int) -> None:
        self.result.unsent_requests += count

    def finish(self) -> None:
        self.result.elapsed_s = self.last_completion_s - self.window.measure_start_s


async def _sleep_until(at_s: float) -> None:
    delay_s = at_s - time.monotonic()
    if delay_s > 0:
        await asyncio.sleep(delay_s)


# ---------------------------------------------------------------------------
# Load loops


class _Channels:
    """`count` channels per leader address, handed out round-robin."""

    def __init__(self, count: int) -> None:
        self._count = count
        self._channels: dict[str, list[grpc.aio.Channel]] = {}
        self._next = 0

    def get(self, address: str) -> grpc.aio.Channel:
        channels = self._channels.get(address)
        if channels is None:
            channels = [
                grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
                for _ in range(self._count)
            ]
            self._channels[address] = channels
        self._next += 1
        return channels[self._next % len(channels)]

    async def ready(self, timeout_s: float) -> None:
        for address, channels in self._channels.items():
            for channel in channels:
                try:
                    await asyncio.wait_for(channel.channel_ready(), timeout_s)
                except TimeoutError:
                    raise RuntimeError(f"could not connect to {address} in {timeout_s} s") from None

    async def close(self) -> None:
        for channels in self._channels.values():
            for channel in channels:
                await channel.close()


@dataclass(slots=True)
class _StreamSlots:
    """In-flight bounds of one stream: its own window and the load's total."""

    stream: asyncio.Semaphore
    total: asyncio.Semaphore

    async def acquire(self) -> None:
        await self.stream.acquire()
        await self.total.acquire()

    def release(self) -> None:
        self.stream.release()
        self.total.release()


class _WriteStreamSession:
    """One open WriteStream: a writer (the caller) and a reader task, FIFO-matched."""

    def __init__(self, call: Any, batch: int, slots: _StreamSlots, tally: Tally) -> None:
        self.call = call
        self.batch = batch
        self.slots = slots
        self.tally = tally
        # (start, sent-or-None) per unanswered request, in request order
        self.pending: collections.deque[tuple[float, float | None]] = collections.deque()
        self.error: BaseException | None = None
        self.reader = asyncio.create_task(self._read_responses())

    def fail_pending(self, error: BaseException) -> None:
        """The stream broke: every unanswered request failed."""
        if self.error is None:
            self.error = error
        now_s = time.monotonic()
        while self.pending:
            self.tally.failed(self.pending.popleft()[0], now_s, error)
            self.slots.release()

    async def _read_responses(self) -> None:
        try:
            while True:
                raw = await self.call.read()
                if raw is grpc.aio.EOF:
                    if self.pending:
                        self.fail_pending(RuntimeError("stream ended with requests unanswered"))
                    return
                now_s = time.monotonic()
                ok, failed = count_put_results(raw, self.batch)
                start_s, sent_s = self.pending.popleft()
                self.tally.done(start_s, sent_s, now_s, ok, failed)
                self.slots.release()
        except Exception as error:
            self.fail_pending(error)

    async def send(self, start_s: float, sent_s: float | None, request: bytes) -> None:
        self.pending.append((start_s, sent_s))
        await self.call.write(request)

    async def close(self, drain_deadline_s: float) -> None:
        """Half-close, wait for the answers until the deadline, then cancel what is left."""
        try:
            if self.error is None:
                await self.call.done_writing()
            remaining_s = max(0.0, drain_deadline_s - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.reader), remaining_s)
        except Exception as error:
            self.fail_pending(error)
        finally:
            if not self.reader.done():
                self.call.cancel()
                self.fail_pending(TimeoutError("no response before the drain deadline"))
                self.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.reader
            self.call.cancel()


async def _write_stream(
    channel: grpc.aio.Channel,
    shard_id: int,
    requests: Sequence[bytes],
    offset: int,
    spec: LoadSpec,
    window: Window,
    schedule: Schedule | None,
    slots: _StreamSlots,
    tally: Tally,
) -> None:
    """Pipelined WriteStream to one shard; reopened after a failure until the window ends."""
    method = channel.stream_stream(METHOD_WRITE_STREAM)
    metadata = (("shard-id", str(shard_id)), ("namespace", NAMESPACE))
    index = offset
    count = len(requests)
    while time.monotonic() < window.end_s:
        timeout_s = window.drain_deadline_s - time.monotonic() + 5.0
        session = _WriteStreamSession(
            method(metadata=metadata, timeout=timeout_s), spec.batch, slots, tally
        )
        try:
            while session.error is None:
                if schedule is not None:
                    start_s = schedule.take()
                    if start_s >= window.end_s:
                        break
                    if time.monotonic() >= window.drain_deadline_s:
                        tally.unsent(1 + schedule.count_before(window.end_s))
                        break
                    await _sleep_until(start_s)
                    await slots.acquire()
                    sent_s: float | None = time.monotonic()
                else:
                    await slots.acquire()
                    start_s = time.monotonic()
                    sent_s = None
                    if start_s >= window.end_s:
                        slots.release()
                        break
                if session.error is not None:
                    slots.release()
                    tally.failed(start_s, time.monotonic(), session.error)
                    break
                await session.send(start_s, sent_s, requests[index % count])
                index += 1
        except Exception as error:
            session.fail_pending(error)
        finally:
            await session.close(window.drain_deadline_s)
        if session.error is None:
            break
        await asyncio.sleep(STREAM_REOPEN_BACKOFF_S)


async def _unary_worker(
    send: Callable[[int, bytes], Awaitable[tuple[int, int]]],
    requests: Sequence[tuple[int, bytes]],
    cursor: list[int],
    window: Window,
    schedule: Schedule | None,
    tally: Tally,
) -> None:
    """One request at a time: Write (put, unary mode) or Read (get)."""
    count = len(requests)
    while True:
        if schedule is not None:
            start_s = schedule.take()
            if start_s >= window.end_s:
                return
            if time.monotonic() >= window.drain_deadline_s:
                tally.unsent(1 + schedule.count_before(window.end_s))
                return
            await _sleep_until(start_s)
            sent_s: float | None = time.monotonic()
        else:
            start_s = time.monotonic()
            sent_s = None
            if start_s >= window.end_s:
                return
        shard_id, request = requests[cursor[0] % count]
        cursor[0] += 1
        try:
            ok, failed = await send(shard_id, request)
        except Exception as error:
            tally.failed(start_s, time.monotonic(), error)
            if isinstance(error, grpc.aio.AioRpcError) and error.code() in (
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.DEADLINE_EXCEEDED,
            ):
                await asyncio.sleep(STREAM_REOPEN_BACKOFF_S)  # do not spin on a dead server
        else:
            tally.done(start_s, sent_s, time.monotonic(), ok, failed)


def _unary_sender(
    channels: _Channels,
    router: Router,
    spec: LoadSpec,
    rpc_timeout_s: float,
) -> Callable[[int, bytes], Awaitable[tuple[int, int]]]:
    by_shard = {s.shard_id: s for s in router.shards}
    batch = spec.batch
    if spec.kind == "put":
        writes = {
            shard_id: channels.get(shard.leader).unary_unary(METHOD_WRITE)
            for shard_id, shard in by_shard.items()
        }

        async def send_write(shard_id: int, request: bytes) -> tuple[int, int]:
            raw = await writes[shard_id](request, timeout=rpc_timeout_s)
            return count_put_results(raw, batch)

        return send_write
    reads = {
        shard_id: channels.get(shard.leader).unary_stream(METHOD_READ)
        for shard_id, shard in by_shard.items()
    }

    async def send_read(shard_id: int, request: bytes) -> tuple[int, int]:
        call = reads[shard_id](request, timeout=rpc_timeout_s)
        chunks: list[bytes] = []
        while True:
            raw = await call.read()
            if raw is grpc.aio.EOF:
                break
            chunks.append(raw)
        return count_get_results(chunks, batch)

    return send_read


@dataclass(slots=True)
class _PreparedLoad:
    spec: LoadSpec
    pool: dict[int, list[bytes]]
    result: LoadResult


def prepare_load(spec: LoadSpec, router: Router, pool_max_ops: int) -> _PreparedLoad:
    if spec.batch < 1 or spec.concurrency < 1 or spec.keys < 1:
        raise ValueError("batch, concurrency and keys must be at least 1")
    pool = build_pool(spec, router, pool_max_ops)
    result = LoadResult(spec=spec, pool_requests=sum(len(r) for r in pool.values()))
    return _PreparedLoad(spec, pool, result)


def _start_load(
    load: _PreparedLoad,
    channels: _Channels,
    router: Router,
    phase: PhaseSpec,
    window: Window,
) -> tuple[list[Awaitable[None]], Tally]:
    spec = load.spec
    tally = Tally(load.result, window)
    rng = random.Random(spec.seed ^ 0x5EED)
    tasks: list[Awaitable[None]] = []
    if spec.kind == "put" and spec.mode == "stream":
        streams = [
            (shard_id, requests)
            for shard_id, requests in load.pool.items()
            for _ in range(spec.streams_per_shard)
        ]
        per_stream = max(1, math.ceil(spec.concurrency / len(streams)))
        total_slots = asyncio.Semaphore(spec.concurrency)
        by_shard = {s.shard_id: s for s in router.shards}
        for number, (shard_id, requests) in enumerate(streams):
            schedule = None
            if spec.rate_ops_per_s is not None:
                interval_s = spec.batch * len(streams) / spec.rate_ops_per_s
                first_s = window.start_s + interval_s * number / len(streams)
                schedule = Schedule(first_s, interval_s)
            tasks.append(
                _write_stream(
                    channels.get(by_shard[shard_id].leader),
                    shard_id,
                    requests,
                    rng.randrange(len(requests)),
                    spec,
                    window,
                    schedule,
                    _StreamSlots(asyncio.Semaphore(per_stream), total_slots),
                    tally,
                )
            )
        return tasks, tally
    send = _unary_sender(channels, router, spec, phase.rpc_timeout_s)
    mixed = _interleave(load.pool)
    cursor = [rng.randrange(len(mixed))]
    shared_schedule = None
    if spec.rate_ops_per_s is not None:
        shared_schedule = Schedule(window.start_s, spec.batch / spec.rate_ops_per_s)
    for _ in range(spec.concurrency):
        tasks.append(_unary_worker(send, mixed, cursor, window, shared_schedule, tally))
    return tasks, tally


WindowHook = Callable[[Literal["measure_start", "end"]], None]


async def run_phase(
    phase: PhaseSpec,
    shards: Sequence[ShardInfo],
    wait_to_start: Callable[[], Awaitable[None]] | None = None,
    on_window: WindowHook | None = None,
    connect_timeout_s: float = 10.0,
) -> tuple[list[LoadResult], float, float]:
    """Run the loads of a phase in this process: (results, client CPU s in window, build s).

    `wait_to_start` runs after the pools are built and channels are connected (a
    barrier across load processes); `on_window` is called at measure start and end.
    """
    router = Router(shards)
    build_start_s = time.monotonic()
    prepared = [prepare_load(spec, router, phase.pool_max_ops) for spec in phase.loads]
    build_s = time.monotonic() - build_start_s
    channels = _Channels(phase.channels)
    try:
        for shard in router.shards:
            channels.get(shard.leader)
        await channels.ready(connect_timeout_s)
        if wait_to_start is not None:
            await wait_to_start()
        start_s = time.monotonic()
        window = Window(
            start_s=start_s,
            measure_start_s=start_s + phase.warmup_s,
            end_s=start_s + phase.warmup_s + phase.duration_s,
            drain_deadline_s=start_s + phase.warmup_s + phase.duration_s + phase.drain_s,
        )
        cpu_marks: dict[str, float] = {}

        async def mark_window() -> None:
            await _sleep_until(window.measure_start_s)
            cpu_marks["start"] = time.process_time()
            if on_window is not None:
                on_window("measure_start")
            await _sleep_until(window.end_s)
            cpu_marks["end"] = time.process_time()
            if on_window is not None:
                on_window("end")

        tallies = []
        coroutines: list[Awaitable[None]] = [mark_window()]
        for load in prepared:
            tasks, tally = _start_load(load, channels, router, phase, window)
            coroutines.extend(tasks)
            tallies.append(tally)
        await asyncio.gather(*coroutines)
        for tally in tallies:
            tally.finish()
        client_cpu_s = cpu_marks["end"] - cpu_marks["start"]
    finally:
        await channels.close()
    return [load.result for load in prepared], client_cpu_s, build_s


def run_phase_in_child(
    phase: PhaseSpec, shards: Sequence[ShardInfo], barrier: Any, results: Any
) -> None:
    """Entry point of a `--procs` load process: run the phase, put a dict on `results`.

    `barrier` (a multiprocessing.Barrier shared with the parent) is passed once the
    pools are built and connected, so every process starts its window together.
    """

    async def wait_for_barrier() -> None:
        await asyncio.to_thread(barrier.wait, CHILD_SETUP_TIMEOUT_S)

    try:
        loads, client_cpu_s, build_s = asyncio.run(
            run_phase(phase, shards, wait_to_start=wait_for_barrier)
        )
    except BaseException as error:
        barrier.abort()
        results.put({"error": _describe(error)})
        return
    results.put(
        {
            "loads": [load.to_dict() for load in loads],
            "client_cpu_s": client_cpu_s,
            "build_s": build_s,
        }
    )


class _PreloadStream:
    """One WriteStream of the preload, with a bounded window of unanswered requests."""

    def __init__(self, channel: grpc.aio.Channel, shard_id: int, timeout_s: float) -> None:
        method = channel.stream_stream(METHOD_WRITE_STREAM)
        metadata = (("shard-id", str(shard_id)), ("namespace", NAMESPACE))
        self.shard_id = shard_id
        self._call = method(metadata=metadata, timeout=timeout_s)
        self._slots = asyncio.Semaphore(PRELOAD_INFLIGHT_PER_SHARD)
        self._sizes: collections.deque[int] = collections.deque()
        self.failed_ops = 0
        self._reader = asyncio.create_task(self._read_all())

    async def _read_all(self) -> None:
        while True:
            raw = await self._call.read()
            if raw is grpc.aio.EOF:
                if self._sizes:
                    raise RuntimeError(f"shard {self.shard_id}: stream ended early")
                return
            _ok, failed = count_put_results(raw, self._sizes.popleft())
            self.failed_ops += failed
            self._slots.release()

    async def send(self, request: bytes, ops: int) -> None:
        await self._slots.acquire()
        if self._reader.done():
            await self._reader  # raises the stream's error
            raise RuntimeError(f"shard {self.shard_id}: stream closed during preload")
        self._sizes.append(ops)
        await self._call.write(request)

    async def finish(self) -> None:
        await self._call.done_writing()
        await self._reader

    def abort(self) -> None:
        self._call.cancel()
        self._reader.cancel()


async def preload(
    shards: Sequence[ShardInfo],
    keys: int,
    value_size_bytes: int,
    timeout_s: float,
    seed: int = 1,
) -> float:
    """Write keys [0, keys) once, in 1000-put WriteStream requests; returns seconds taken.

    Keys are routed and requests built as they go, so memory stays bounded by one
    pending batch plus the in-flight window per shard. Raises if any put failed.
    """
    router = Router(shards)
    value_of = _value_source(value_size_bytes, random.Random(seed))
    started_s = time.monotonic()
    channels = _Channels(1)
    streams: dict[int, _PreloadStream] = {}
    try:
        async with asyncio.timeout(timeout_s):
            for shard in router.shards:
                streams[shard.shard_id] = _PreloadStream(
                    channels.get(shard.leader), shard.shard_id, timeout_s
                )
            buffers: dict[int, list[Any]] = {shard_id: [] for shard_id in streams}
            for index in range(keys):
                name = key_name(index)
                shard_id = router.shard_of(name).shard_id
                buffer = buffers[shard_id]
                buffer.append(pb.PutRequest(key=name, value=value_of(index)))
                if len(buffer) >= PRELOAD_BATCH:
                    request = pb.WriteRequest(shard=shard_id, puts=buffer).SerializeToString()
                    await streams[shard_id].send(request, len(buffer))
                    buffers[shard_id] = []
            for shard_id, buffer in buffers.items():
                if buffer:
                    request = pb.WriteRequest(shard=shard_id, puts=buffer).SerializeToString()
                    await streams[shard_id].send(request, len(buffer))
            await asyncio.gather(*(stream.finish() for stream in streams.values()))
    except BaseException as error:
        for stream in streams.values():
            stream.abort()
        raise RuntimeError(f"preload of {keys} keys failed: {_describe(error)}") from error
    finally:
        await channels.close()
    failed_ops = sum(stream.failed_ops for stream in streams.values())
    if failed_ops:
        raise RuntimeError(f"preload of {keys} keys: {failed_ops} puts failed")
    return time.monotonic() - started_s
