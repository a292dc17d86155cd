"""Key hashing and shard hash ranges.

The reference router of Oxia clients (`XXHASH3`) hashes the routing key (the
partition key when one is given, else the record key) with XXH3-64, seed 0, and
keeps the low 32 bits. A namespace with n shards splits the 32-bit space into n
contiguous inclusive ranges of `0xFFFFFFFF // n + 1` hashes each; the last
range ends at 0xFFFFFFFF.

Not every client does that: the `oxia` 0.2.1 Python client hashes with XXH64
(low 32 bits) whatever the shard map says, so it puts two thirds of the keys of
a three-shard namespace on other shards than XXH3 clients look for them. Tools
that must read or write what such a client wrote route by `KeyHash.XXH64`.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Sequence
from dataclasses import dataclass

import xxhash

HASH_SPACE_MAX = 0xFFFFFFFF
# Above this the equal-width split can no longer give every shard a non-empty
# range that ends inside the space (n * (n - 1) must stay below 2**32).
MAX_SHARDS_PER_NAMESPACE = 65536


def key_hash(routing_key: str) -> int:
    """The 32-bit routing hash of a key, as Oxia's reference clients compute it."""
    return xxhash.xxh3_64_intdigest(routing_key.encode("utf-8")) & HASH_SPACE_MAX


def xxh64_key_hash(routing_key: str) -> int:
    """The 32-bit routing hash of the `oxia` 0.2.1 Python client."""
    return xxhash.xxh64_intdigest(routing_key.encode("utf-8")) & HASH_SPACE_MAX


class KeyHash(enum.Enum):
    """How a client hashes routing keys onto the shards' hash ranges."""

    XXH3 = "xxh3"  # the shard map's XXHASH3 router: Oxia's Go and Java clients, Cairn's
    XXH64 = "xxh64"  # the `oxia` 0.2.1 Python client

    def __call__(self, routing_key: str) -> int:
        return key_hash(routing_key) if self is KeyHash.XXH3 else xxh64_key_hash(routing_key)


@dataclass(frozen=True, slots=True)
class HashRange:
    """An inclusive range of 32-bit key hashes."""

    min_inclusive: int
    max_inclusive: int

    def __post_init__(self) -> None:
        if not 0 <= self.min_inclusive <= self.max_inclusive <= HASH_SPACE_MAX:
            raise ValueError(f"invalid hash range [{self.min_inclusive}, {self.max_inclusive}]")

    def contains(self, key_hash_value: int) -> bool:
        return self.min_inclusive <= key_hash_value <= self.max_inclusive


def split_hash_space(shard_count: int) -> list[HashRange]:
    """The hash ranges of a namespace with `shard_count` equal shards, in order."""
    if not 1 <= shard_count <= MAX_SHARDS_PER_NAMESPACE:
        raise ValueError(
            f"shard count must be between 1 and {MAX_SHARDS_PER_NAMESPACE}, got {shard_count}"
        )
    bucket = HASH_SPACE_MAX // shard_count + 1
    ranges = [HashRange(i * bucket, i * bucket + bucket - 1) for i in range(shard_count - 1)]
    ranges.append(HashRange((shard_count - 1) * bucket, HASH_SPACE_MAX))
    return ranges


def find_range(ranges: Sequence[HashRange], key_hash_value: int) -> int:
    """Index of the range containing the hash; `ranges` sorted and gap-free."""
    index = bisect.bisect_right([r.min_inclusive for r in ranges], key_hash_value) - 1
    if index < 0 or not ranges[index].contains(key_hash_value):
        raise KeyError(f"no range contains hash {key_hash_value:#010x}")
    return index
