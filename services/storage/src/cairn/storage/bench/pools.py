"""Pre-serialized request pools, and the checks on the responses to them.

Requests are serialized once, up front, into a pool per shard (building a
100-put protobuf from Python objects costs far more than sending it). The pool
covers the key space once (or a uniform sample of it, when larger than the
pool bound) and is cycled through.

Responses are checked without decoding every element when that can be avoided:
see `_NON_OK_STATUS`.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence

from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.bench.rpc import STATUS_OK, Router
from cairn.storage.bench.specs import LoadSpec

# A response whose repeated field 1 (puts / gets) holds an element whose first
# field is field 1 (status), i.e. a non-OK status: proto3 omits a zero status,
# and serializers emit fields in field-number order. No match proves every
# element is OK; a match (possibly a false one inside a value) falls back to
# checking each element.
_NON_OK_STATUS = re.compile(rb"\x0a[\x80-\xff]{0,4}[\x00-\x7f]\x08")

# Random value bytes minus 0x08 and 0x0a, so that values (which the get checks
# see) rarely trip the non-OK-status pattern; 254 of 256 byte values keep them
# as incompressible as random bytes.
_VALUE_BYTES = bytes.maketrans(b"\x08\x0a", b"\x09\x0b")
_VALUE_SPAN_BYTES = 4096


def key_name(index: int) -> str:
    return f"/bench/{index:010d}"


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


def value_source(value_size_bytes: int, rng: random.Random) -> Callable[[int], bytes]:
    """Distinct-looking random values without generating one per key."""
    data = rng.randbytes(value_size_bytes + _VALUE_SPAN_BYTES).translate(_VALUE_BYTES)
    span = _VALUE_SPAN_BYTES
    return lambda i: data[i % span : i % span + value_size_bytes]


def build_pool(spec: LoadSpec, router: Router, max_ops: int) -> dict[int, list[bytes]]:
    """Serialized requests per shard id, each of exactly `spec.batch` ops."""
    rng = random.Random(spec.seed)
    indexes = _choose_keys(spec.keys, max(max_ops, spec.batch), rng)
    pool: dict[int, list[bytes]] = {}
    if spec.kind == "put":
        value_of = value_source(spec.value_size_bytes, rng)
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


def interleave(pool: dict[int, list[bytes]]) -> list[tuple[int, bytes]]:
    """One list cycling through the shards, for loads that are not per-shard."""
    out: list[tuple[int, bytes]] = []
    columns = list(pool.items())
    longest = max(len(requests) for _, requests in columns)
    for i in range(longest):
        for shard_id, requests in columns:
            out.append((shard_id, requests[i % len(requests)]))
    return out


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
