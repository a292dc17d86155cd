"""etcd beside Cairn in `cairn-bench unary --etcd`: a single-member etcd spawned for
the run, preloaded with the same keys, and the same one-operation-per-call load
sent to it (issue 43 sets etcd's figure on the same machine as the target).

The requests are etcd's v3 KV calls, hand-encoded in protobuf's wire format so no
etcd protos are needed: `/etcdserverpb.KV/Put` with a PutRequest (field 1 key,
field 2 value) and `/etcdserverpb.KV/Range` with a RangeRequest (field 1 key: one
key, read linearizably, etcd's default and what etcdctl does). They are pooled
and driven exactly like Cairn's unary loads (`unary.unary_worker`, the load
processes, the timing and the rows); only the pool and the sender differ. The
preload writes the keys in Txn requests of etcd's default --max-txn-ops puts each.

etcd serves plaintext without auth on loopback ports it picks itself (port 0, read
back from its log like the bench's other servers), with its data in a temp dir
removed at the end. Its CPU is read from /proc like a Cairn server's.
"""

from __future__ import annotations

import asyncio
import random
import re
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio

from cairn.bench.storage.pools import choose_keys, key_name, value_source
from cairn.bench.storage.rpc import CHANNEL_OPTIONS, Channels, Router, ShardInfo, describe
from cairn.bench.storage.server import spawned_process
from cairn.bench.storage.specs import LoadSpec
from cairn.bench.storage.unary import Sender
from cairn.storage.core.wire import field, read_varint

METHOD_PUT = "/etcdserverpb.KV/Put"
METHOD_RANGE = "/etcdserverpb.KV/Range"
METHOD_TXN = "/etcdserverpb.KV/Txn"
# Tags (field number << 3 | wire type 2, length-delimited) of the fields used.
_KEY = b"\x0a"  # PutRequest.key, RangeRequest.key: field 1
_VALUE = b"\x12"  # PutRequest.value: field 2
_TXN_SUCCESS = b"\x12"  # TxnRequest.success: field 2, repeated RequestOp
_OP_PUT = b"\x12"  # RequestOp.request_put: field 2
RANGE_RESPONSE_KVS = 2  # RangeResponse.kvs: the key-values found

# The whole 32-bit hash range as one shard: etcd is one key space on one address,
# and the bench's pools and routing work per shard.
ETCD_SHARD_ID = 0
_FULL_HASH_RANGE = (0, 0xFFFFFFFF)

# Room for long runs: puts keep every revision (nothing compacts during the run);
# below the 8 GiB etcd's documentation gives as the most it is tuned for.
QUOTA_BACKEND_BYTES = 4 * 1024**3
MEMBER_NAME = "cairn-bench"
_LOOPBACK_ANY_PORT = "http://127.0.0.1:0"
LISTENING_LINE = re.compile(r'"serving client traffic insecurely[^"]*","address":"([^"]+)"')
_VERSION = re.compile(r'"etcd-version":"([^"]+)"')

PRELOAD_PUTS_PER_TXN = 128  # etcd's default --max-txn-ops
PRELOAD_TXNS_IN_FLIGHT = 8


def put_request(key: bytes, value: bytes) -> bytes:
    """A serialized etcdserverpb.PutRequest."""
    return field(_KEY, key) + field(_VALUE, value)


def range_request(key: bytes) -> bytes:
    """A serialized etcdserverpb.RangeRequest for one key."""
    return field(_KEY, key)


def txn_of_puts(puts: Sequence[tuple[bytes, bytes]]) -> bytes:
    """A serialized etcdserverpb.TxnRequest without compares: it puts every (key, value)."""
    return b"".join(field(_TXN_SUCCESS, field(_OP_PUT, put_request(k, v))) for k, v in puts)


def top_level_fields(raw: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each top-level field of a serialized message: varints
    as ints, length-delimited and fixed-size fields as their bytes."""
    position = 0
    while position < len(raw):
        tag, position = read_varint(raw, position)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            value, position = read_varint(raw, position)
            yield number, value
            continue
        if wire_type == 2:
            size, position = read_varint(raw, position)
        elif wire_type in (1, 5):
            size = 8 if wire_type == 1 else 4
        else:
            raise ValueError(f"unsupported wire type {wire_type} of field {number}")
        if position + size > len(raw):
            raise ValueError(f"field {number} runs past the end of the message")
        yield number, raw[position : position + size]
        position += size


def range_found(raw: bytes) -> bool:
    """Whether a serialized RangeResponse holds a key-value (the key exists)."""
    return any(number == RANGE_RESPONSE_KVS for number, _ in top_level_fields(raw))


def build_etcd_pool(spec: LoadSpec, router: Router, max_ops: int) -> dict[int, list[bytes]]:
    """Serialized Put or Range requests over the same keys, and for puts the same
    values, as Cairn's unary pool of this spec (pools.build_pool)."""
    if spec.batch != 1 or spec.mode != "unary" or spec.sessions:
        raise ValueError("an etcd load is one put or get per unary call, without sessions")
    (shard,) = router.shards
    rng = random.Random(spec.seed)
    indexes = choose_keys(spec.keys, max_ops, rng)
    if spec.kind == "put":
        value_of = value_source(spec.value_size_bytes, rng)
        requests = [
            put_request(key_name(index).encode(), value_of(op)) for op, index in enumerate(indexes)
        ]
    else:
        requests = [range_request(key_name(index).encode()) for index in indexes]
    return {shard.shard_id: requests}


def etcd_sender(channels: Channels, router: Router, spec: LoadSpec, rpc_timeout_s: float) -> Sender:
    """Sends one pooled Put or Range: (1, 0) when it succeeded (a get: found the key),
    (0, 1) for a get that found nothing; a failed call raises."""
    (shard,) = router.shards
    channel = channels.get(shard.leader)
    if spec.kind == "put":
        put = channel.unary_unary(METHOD_PUT)

        async def send_put(_shard_id: int, request: bytes) -> tuple[int, int, bytes]:
            await put(request, timeout=rpc_timeout_s)
            return 1, 0, b""

        return send_put
    get = channel.unary_unary(METHOD_RANGE)

    async def send_range(_shard_id: int, request: bytes) -> tuple[int, int, bytes]:
        raw: bytes = await get(request, timeout=rpc_timeout_s)
        return (1, 0, b"") if range_found(raw) else (0, 1, b"")

    return send_range


def etcd_shards(address: str) -> list[ShardInfo]:
    """etcd's key space as the one shard the load code routes to."""
    low, high = _FULL_HASH_RANGE
    return [ShardInfo(shard_id=ETCD_SHARD_ID, leader=address, min_hash=low, max_hash=high)]


@dataclass(frozen=True, slots=True)
class SpawnedEtcd:
    address: str
    pid: int
    version: str


def etcd_command(binary: str, data_dir: Path) -> list[str]:
    urls = _LOOPBACK_ANY_PORT
    return [
        binary,
        "--name",
        MEMBER_NAME,
        "--data-dir",
        str(data_dir),
        "--listen-client-urls",
        urls,
        "--advertise-client-urls",
        urls,
        "--listen-peer-urls",
        urls,
        "--initial-advertise-peer-urls",
        urls,
        "--initial-cluster",
        f"{MEMBER_NAME}={urls}",
        "--initial-cluster-state",
        "new",
        "--quota-backend-bytes",
        str(QUOTA_BACKEND_BYTES),
        # JSON lines on stderr (the log file): the listening line is read from them.
        "--logger",
        "zap",
        "--log-outputs",
        "stderr",
    ]


@asynccontextmanager
async def spawned_etcd(
    binary: str, start_timeout_s: float, stop_timeout_s: float
) -> AsyncIterator[SpawnedEtcd]:
    """A single-member etcd serving on a loopback port; stopped (SIGTERM, then
    SIGKILL) and its data removed on exit."""
    found = shutil.which(binary)
    if found is None:
        raise FileNotFoundError(f"etcd binary {binary!r} not found (Debian: etcd-server)")
    work_dir = Path(tempfile.mkdtemp(prefix="cairn-bench-etcd-"))
    try:
        async with spawned_process(
            "etcd",
            etcd_command(found, work_dir / "data"),
            LISTENING_LINE,
            start_timeout_s,
            stop_timeout_s,
            work_dir,
        ) as process:
            version = _VERSION.search(process.log_path.read_text(errors="replace"))
            yield SpawnedEtcd(process.address, process.pid, version.group(1) if version else "?")
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


async def preload_etcd(
    address: str, keys: int, value_size_bytes: int, timeout_s: float, seed: int = 1
) -> float:
    """Write keys [0, keys) with the values Cairn's preload writes (preload.preload),
    in Txn requests, a few at a time; returns the seconds taken."""
    value_of = value_source(value_size_bytes, random.Random(seed))
    starts = iter(range(0, keys, PRELOAD_PUTS_PER_TXN))
    started_s = time.monotonic()
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        txn = channel.unary_unary(METHOD_TXN)

        async def send_txns() -> None:
            for start in starts:  # shared: each chunk goes to one sender
                end = min(keys, start + PRELOAD_PUTS_PER_TXN)
                puts = [(key_name(i).encode(), value_of(i)) for i in range(start, end)]
                await txn(txn_of_puts(puts), timeout=timeout_s)

        try:
            async with asyncio.timeout(timeout_s), asyncio.TaskGroup() as group:
                for _ in range(PRELOAD_TXNS_IN_FLIGHT):
                    group.create_task(send_txns())
        except* grpc.aio.AioRpcError as errors:
            error = describe(errors.exceptions[0])
            raise RuntimeError(f"etcd preload of {keys} keys failed: {error}") from None
        except* TimeoutError:
            raise RuntimeError(f"etcd preload of {keys} keys took over {timeout_s:.0f} s") from None
    return time.monotonic() - started_s
