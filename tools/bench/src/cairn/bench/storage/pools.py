"""Pre-serialized request pools, and the checks on the responses to them.

Requests are serialized once, up front, into a pool per shard (building a
100-put protobuf from Python objects costs far more than sending it). The pool
covers the key space once (or a uniform sample of it, when larger than the
pool bound) and is cycled through.

Responses are checked without decoding every element when that can be avoided:
see `_NON_OK_STATUS`; `entry_offset` reads the log offset of an answered write
from its first put alone (notify matches writes to notifications by it).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence

from google.protobuf.message import DecodeError

from cairn.bench.storage.rpc import STATUS_OK, Router
from cairn.bench.storage.specs import LoadSpec, SessionRef
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core.wire import read_varint

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


def choose_keys(keys: int, max_ops: int, rng: random.Random) -> list[int]:
    """Every key once in random order, or a uniform sample when the pool is smaller."""
    if keys <= max_ops:
        chosen = list(range(keys))
        rng.shuffle(chosen)
        return chosen
    return rng.sample(range(keys), max_ops)


def _group_by_shard(indexes: Sequence[int], router: Router) -> dict[int, list[int]]:
    """The key indexes of each shard (shards without any left out), in the given order."""
    groups: dict[int, list[int]] = {s.shard_id: [] for s in router.shards}
    for index in indexes:
        groups[router.shard_of(key_name(index)).shard_id].append(index)
    return {shard_id: found for shard_id, found in groups.items() if found}


def _batches(indexes: list[int], batch: int) -> list[list[int]]:
    """Chunks of exactly `batch` keys, wrapping around (a shard with fewer keys repeats)."""
    count = max(1, math.ceil(len(indexes) / batch))
    size = len(indexes)
    return [[indexes[(i * batch + j) % size] for j in range(batch)] for i in range(count)]


def _sessions_by_shard(sessions: Sequence[SessionRef]) -> dict[int, list[SessionRef]]:
    by_shard: dict[int, list[SessionRef]] = {}
    for session in sessions:
        by_shard.setdefault(session.shard_id, []).append(session)
    return by_shard


def _put(name: str, value: bytes, index: int, sessions: Sequence[SessionRef]) -> pb.PutRequest:
    """A put; ephemeral when `sessions` are given, owned by the same one of them for a
    key whatever the request it lands in (so `--procs`, which shuffles keys into other
    requests, never moves a record between sessions, which costs the server extra)."""
    if not sessions:
        return pb.PutRequest(key=name, value=value)
    session = sessions[index % len(sessions)]
    return pb.PutRequest(
        key=name,
        value=value,
        session_id=session.session_id,
        client_identity=session.client_identity,
    )


def value_source(value_size_bytes: int, rng: random.Random) -> Callable[[int], bytes]:
    """Distinct-looking random values without generating one per key."""
    data = rng.randbytes(value_size_bytes + _VALUE_SPAN_BYTES).translate(_VALUE_BYTES)
    span = _VALUE_SPAN_BYTES
    return lambda i: data[i % span : i % span + value_size_bytes]


def build_pool(spec: LoadSpec, router: Router, max_ops: int) -> dict[int, list[bytes]]:
    """Serialized requests per shard id, each of exactly `spec.batch` ops."""
    rng = random.Random(spec.seed)
    indexes = choose_keys(spec.keys, max(max_ops, spec.batch), rng)
    pool: dict[int, list[bytes]] = {}
    if spec.kind == "put":
        value_of = value_source(spec.value_size_bytes, rng)
        sessions = _sessions_by_shard(spec.sessions)
        op = 0
        for shard_id, shard_indexes in _group_by_shard(indexes, router).items():
            own_sessions = sessions.get(shard_id, [])
            if spec.sessions and not own_sessions:
                raise ValueError(f"ephemeral puts: no session on shard {shard_id}")
            requests = []
            for chunk in _batches(shard_indexes, spec.batch):
                puts = []
                for index in chunk:
                    puts.append(_put(key_name(index), value_of(op), index, own_sessions))
                    op += 1
                message = pb.WriteRequest(shard=shard_id, puts=puts)
                requests.append(message.SerializeToString())
            pool[shard_id] = requests
    else:
        for shard_id, shard_indexes in _group_by_shard(indexes, router).items():
            pool[shard_id] = [
                pb.ReadRequest(
                    shard=shard_id,
                    gets=[
                        pb.GetRequest(key=key_name(index), include_value=True) for index in chunk
                    ],
                ).SerializeToString()
                for chunk in _batches(shard_indexes, spec.batch)
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


def entry_offset(raw: bytes) -> int | None:
    """The log offset a serialized WriteResponse's request was committed at, or None.

    Every put of a request is applied at the request's entry offset, which each OK
    put reports as its version id; this reads the first put only (field 1 comes
    first: serializers emit fields in field-number order), not the whole response.
    None when the first put failed or the response has no puts.
    """
    if not raw or raw[0] != 0x0A:
        return None
    try:
        length, start = read_varint(raw, 1)
        put = pb.PutResponse.FromString(raw[start : start + length])
    except (IndexError, ValueError, DecodeError):
        return None
    if put.status != STATUS_OK or not put.HasField("version"):
        return None
    return int(put.version.version_id)


def distinct_put_keys(raw_request: bytes) -> int:
    """Keys the puts of a serialized WriteRequest change: the entry count of its
    notification batch when they all succeed (a key put twice in one request, as a
    shard with fewer keys than a batch does, is notified once)."""
    return len({put.key for put in pb.WriteRequest.FromString(raw_request).puts})
