"""Answers to exact-key gets of a leading shard, kept in memory.

A metadata store's hot set is small and read far more than written: ZooKeeper
and etcd keep all of it in memory. Here RocksDB stays the store, and this cache
spares the exact-key gets that find their key here both RocksDB's lookup and the
building of the answer: it holds each record as `reads.answer_fields`, the
serialized version and value of its GetResponse, so that a hit costs a dict
lookup and the framing of the key. (Under `cairn-bench get`, RocksDB's MultiGet
and building the answer as protobuf objects took most of a get's server time;
measurements: docs/performance.md, "Read cache".)

Answers enter when a read fetched their record from the KV; when the applier
changes a record held, its answer becomes the new record's; they leave by
eviction. The cache always answers as the committed KV would for every key it
holds, because:
- a read admits what it found in the KV in the same step (no await between);
- the applier replaces the answer of every record it writes that is held
  (`refresh_written`, right after the KV batch, with no await between, from the
  very bytes written), deletions included (held as absent);
- whatever else changes the KV (a snapshot installed, storage reopened) clears
  it, and it holds nothing while disabled: a follower pays neither the memory nor
  the upkeep, and a new leader starts empty.

Bounded by entry count and by bytes held, counted exactly; the oldest admissions
go first (a dict keeps that order; cheaper than recency bookkeeping on every
hit), a thirty-second of the bounds at a time, so that eviction runs once per
many reads rather than at each. Every per-key step of the upkeep runs in C
iterators.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Final, cast

from cairn.storage.core.reads import answer_fields, read_answers
from cairn.storage.kv.store import KvReader


class _Missing(enum.Enum):
    """What dict.get answers for a key not held: no answer is this value."""

    TOKEN = enum.auto()


_MISSING: Final = _Missing.TOKEN
# Eviction frees this fraction of the bounds beyond what overflowed.
_EVICTION_STEP_DIVISOR = 32


class ReadCache:
    __slots__ = (
        "_answers",
        "_bytes",
        "_keep_bytes",
        "_keep_entries",
        "_mirrored",
        "lookups",
        "max_bytes",
        "max_entries",
        "misses",
    )

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        if max_entries < 0 or max_bytes < 0:
            raise ValueError("cache bounds must not be negative")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._keep_entries = max_entries - max_entries // _EVICTION_STEP_DIVISOR
        self._keep_bytes = max_bytes - max_bytes // _EVICTION_STEP_DIVISOR
        # encoded key -> the record's answer_fields, None for a key known absent
        self._answers: dict[bytes, bytes | None] = {}
        self._bytes = 0
        # The KV whose records it holds answers of; None while disabled.
        self._mirrored: KvReader | None = None
        # Keys looked up here and those not held (for metrics; hits are the difference).
        self.lookups = 0
        self.misses = 0

    def enable(self, kv: KvReader) -> None:
        """Start holding answers from `kv` (a leader's term begins), empty. Bounds of
        0 keep it disabled."""
        self.clear()
        self._mirrored = kv if self.max_entries > 0 and self.max_bytes > 0 else None

    def disable(self) -> None:
        self._mirrored = None
        self.clear()

    @property
    def enabled(self) -> bool:
        return self._mirrored is not None

    def clear(self) -> None:
        """Forget everything (the KV was replaced, or changed behind the applier)."""
        self._answers.clear()
        self._bytes = 0

    def answers(self, reader: KvReader, keys: Sequence[bytes]) -> list[bytes | None]:
        """`answer_fields` of each key's record (None: absent): from memory where
        held, the rest read from `reader` in one call, then held. A reader other than
        the KV the cache was enabled for (a read begun before storage was reopened)
        bypasses it."""
        if reader is not self._mirrored:  # disabled (None), or another KV
            return read_answers(reader, keys)
        self.lookups += len(keys)
        lookup = self._answers.get
        found: list[bytes | _Missing | None] = [lookup(key, _MISSING) for key in keys]
        if _MISSING not in found:
            return cast(list[bytes | None], found)
        missing = [index for index, answer in enumerate(found) if answer is _MISSING]
        missing_keys = [keys[index] for index in missing]
        self.misses += len(missing_keys)
        read = read_answers(reader, missing_keys)
        for index, answer in zip(missing, read, strict=True):
            found[index] = answer
        self._admit(dict(zip(missing_keys, read, strict=True)))
        # Every _MISSING was replaced by what the reader answered.
        return cast(list[bytes | None], found)

    def refresh_written(self, records: Mapping[bytes, bytes | None]) -> None:
        """The applier wrote these records to the KV (None: deleted): each one held
        now answers as its new record (a deleted one as absent). Records not held
        are not admitted: holding every written record, for reads that may never
        come, cost a leader's apply a noticeable share of its time, so a load of writes
        alone, which holds nothing, pays one lookup a record. A record held was
        read, and keys that are read and written (a mixed load on one key set) are
        read again: dropping their answers sent those reads to RocksDB's MultiGet,
        much dearer than a hit, and under a mixed load the loop's CPU rose
        several-fold, and get latency with it (measurements: docs/performance.md, "Read cache")."""
        held = self._answers
        if not held:
            return
        grown = 0
        for key in filter(held.__contains__, records):
            data = records[key]
            answer = None if data is None else answer_fields(data)
            replaced = held[key]
            held[key] = answer
            grown += (len(answer) if answer else 0) - (len(replaced) if replaced else 0)
        self._bytes += grown
        if self._bytes > self.max_bytes:
            self._evict()

    def _admit(self, answers: dict[bytes, bytes | None]) -> None:
        """Hold answers just read, none of them held (the caller looked)."""
        held = self._answers
        held.update(answers)
        self._bytes += sum(map(len, filter(None, answers.values())))
        if len(held) > self.max_entries or self._bytes > self.max_bytes:
            self._evict()

    def _evict(self) -> None:
        held = self._answers
        keep_entries, keep_bytes = self._keep_entries, self._keep_bytes
        while held and (len(held) > keep_entries or self._bytes > keep_bytes):
            over_bytes = self._bytes - keep_bytes
            # Entries of an average size that would take the bytes under their bound.
            by_bytes = math.ceil(over_bytes * len(held) / self._bytes) if over_bytes > 0 else 0
            count = max(len(held) - keep_entries, by_bytes, 1)
            oldest = list(itertools.islice(held, count))
            self._bytes -= sum(map(len, filter(None, map(held.pop, oldest))))

    def __len__(self) -> int:
        return len(self._answers)

    @property
    def held_bytes(self) -> int:
        """Bytes of the answers held (their serialized size, not Python's overhead)."""
        return self._bytes
