"""A digest of a replica's applied state, by which the replicas of a shard are
compared (the audit job). Pure: it is fed the records column's items.

Every replica of a shard that has applied the log up to the same offset holds the
same records (followers apply the same entries, or write the changes their leader's
apply step made), byte for byte: RocksDB returns them in key order, so a SHA-256
over the items in that order, each framed by its lengths, is equal on healthy
replicas and differs wherever one key or value differs, is missing or is extra.
Key order (not an order-independent sum) because the scan gives it for free and a
cryptographic hash cannot be fooled by changes that cancel out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

# Key and value lengths in the framing: keys are bounded far below 4 GiB, values
# by the message size; 8 bytes each keeps the framing obviously unambiguous.
_LENGTH_BYTES = 8


@dataclass(frozen=True, slots=True)
class StateDigest:
    records: int
    sha256: bytes


class DigestBuilder:
    """Items fed in key order; `digest()` at the end."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._records = 0
        self._last_key: bytes | None = None

    def add(self, key: bytes, value: bytes) -> None:
        # The digest is only comparable between replicas if every one feeds the same
        # order: a scan out of order is a programmer error.
        assert self._last_key is None or key > self._last_key, "items out of key order"
        self._last_key = key
        update = self._hash.update
        update(len(key).to_bytes(_LENGTH_BYTES, "big"))
        update(key)
        update(len(value).to_bytes(_LENGTH_BYTES, "big"))
        update(value)
        self._records += 1

    def digest(self) -> StateDigest:
        return StateDigest(self._records, self._hash.digest())


def digest_of(items: Iterable[tuple[bytes, bytes]]) -> StateDigest:
    builder = DigestBuilder()
    for key, value in items:
        builder.add(key, value)
    return builder.digest()
