"""Secondary indexes: where their entries live and how they are kept exact.

A put may carry `secondary_indexes` [{index_name, secondary_key}, ...]. Each
pair becomes one entry in the internal state (the META column, never visible
to clients):

    index/ + esc(name) + T + esc(encode(secondary_key)) + T + encode(primary_key)  ->  b""

`encode` is the shard's key order encoding, `T` = 00 01 and `esc` doubles
NUL bytes into 00 FF. `esc(x) + T` is prefix-free and sorts exactly like `x`
(T sorts below any escaped continuation), so one index's entries form one
contiguous range, ordered by secondary key in the shard's key order, then by
primary key; the primary key needs no escaping because nothing follows it.

To remove a record's entries exactly (overwrite, delete, delete range,
session close), the record remembers them:

    record_indexes/ + encode(primary_key)  ->  the entries' middles, concatenated
                                               (esc(name) + T + esc(encoded secondary) + T)

and its stored header carries the HAS_INDEXES flag, so that overwriting or
deleting a record without indexes (the common case) costs no extra lookup. The
version header that the apply overlay and the header cache keep of a record
indexed since it was last read from the KV carries those middles after it
(`with_carried_middles`), so that overwriting or deleting it soon after needs no
read of the reverse entry either; a header read from the KV carries none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core.meta import prefix_end
from cairn.storage.kv.store import Column, KvReader
from cairn.storage.records import FLAGS_OFFSET, HEADER_SIZE, version_header_size

INDEX_PREFIX = b"index/"
RECORD_INDEXES_PREFIX = b"record_indexes/"
# A bit of the record header's flags byte (records.py defines 0x01..0x04 and
# ignores bits it does not know): the record has index entries.
HAS_INDEXES = 0x08

_TERMINATOR = b"\x00\x01"
# Above every `esc(x) + T + ...` with the same x, below any greater x.
_AFTER_TERMINATOR = b"\x00\x02"
_NUL = b"\x00"
_ESCAPED_NUL = b"\x00\xff"
# Middles longer than this stay out of cached version headers (each costs its
# length for as long as the header stays cached): such a record's reverse entry is
# read when it is replaced, as for a header read from the KV.
MAX_CARRIED_MIDDLES_BYTES = 512


class MetaState(Protocol):
    """The part of the apply overlay (apply.PendingChanges) that indexes use."""

    def get_meta(self, key: bytes) -> bytes | None: ...

    def set_meta(self, key: bytes, data: bytes | None) -> None: ...


def _escaped(raw: bytes) -> bytes:
    """Escaped and terminated: prefix-free and order-preserving."""
    return raw.replace(_NUL, _ESCAPED_NUL) + _TERMINATOR if _NUL in raw else raw + _TERMINATOR


def _unescaped(escaped: bytes) -> bytes:
    return escaped.replace(_ESCAPED_NUL, _NUL)


def index_prefix(index_name: str) -> bytes:
    """The start of one index's entries."""
    return INDEX_PREFIX + _escaped(index_name.encode("utf-8"))


def _middle(index_name: str, encoded_secondary: bytes) -> bytes:
    """What sits between INDEX_PREFIX and the primary key in an entry's key."""
    return _escaped(index_name.encode("utf-8")) + _escaped(encoded_secondary)


def record_indexes_key(encoded_primary: bytes) -> bytes:
    return RECORD_INDEXES_PREFIX + encoded_primary


def with_index_flag(record: bytes) -> bytes:
    return b"".join(
        (record[:FLAGS_OFFSET], bytes((record[FLAGS_OFFSET] | HAS_INDEXES,)), record[HEADER_SIZE:])
    )


# ---- maintenance, while entries are applied --------------------------------------------


def add_entries(
    state: MetaState,
    encoded_primary: bytes,
    indexes: Sequence[pb.SecondaryIndex],
    encode: Callable[[str], bytes],
) -> bytes:
    """Index a record just written (its previous entries already removed); returns
    the entries' middles as the reverse entry holds them (never empty)."""
    middles: dict[bytes, None] = {}  # ordered and without duplicates
    for index in indexes:
        middles[_middle(index.index_name, encode(index.secondary_key))] = None
    for middle in middles:
        state.set_meta(INDEX_PREFIX + middle + encoded_primary, b"")
    joined = b"".join(middles)
    state.set_meta(record_indexes_key(encoded_primary), joined)
    return joined


def remove_entries(state: MetaState, encoded_primary: bytes, middles: bytes | None) -> None:
    """Remove every entry of a record that has the HAS_INDEXES flag. `middles`: as
    its version header carried them; None to read them from the reverse entry."""
    reverse_key = record_indexes_key(encoded_primary)
    if middles is None:
        middles = state.get_meta(reverse_key) or b""
    for middle in _split_middles(middles):
        state.set_meta(INDEX_PREFIX + middle + encoded_primary, None)
    state.set_meta(reverse_key, None)


def with_carried_middles(header: bytes, middles: bytes) -> bytes:
    """A version header carrying its record's index middles (none given, or too
    long to keep: the header as it is)."""
    if middles and len(middles) <= MAX_CARRIED_MIDDLES_BYTES:
        return header + middles
    return header


def carried_middles(header: bytes) -> bytes | None:
    """The middles a version header of an indexed record carries; None if it
    carries none (the reverse entry must be read). An indexed record has at least
    one entry, so carried middles are never empty."""
    middles = header[version_header_size(header) :]
    return middles or None


def _split_middles(data: bytes) -> Iterator[bytes]:
    """Each middle holds exactly two terminators (escaped content holds none)."""
    start = 0
    while start < len(data):
        first = data.index(_TERMINATOR, start)
        end = data.index(_TERMINATOR, first + len(_TERMINATOR)) + len(_TERMINATOR)
        yield data[start:end]
        start = end


# ---- reads -----------------------------------------------------------------------------


def _split_entry(entry_key: bytes, prefix_size: int) -> tuple[bytes, bytes]:
    """(encoded secondary key, encoded primary key) of an entry of a known index."""
    end = entry_key.index(_TERMINATOR, prefix_size)
    return _unescaped(entry_key[prefix_size:end]), entry_key[end + len(_TERMINATOR) :]


def find_entry(
    reader: KvReader, index_name: str, encoded_key: bytes, comparison: int
) -> tuple[bytes, bytes] | None:
    """The index entry a Get by index answers with: (encoded secondary, encoded primary).

    The index is ordered by (secondary key, primary key): EQUAL / CEILING / HIGHER
    take the first entry with secondary key ==, >=, > the key; FLOOR / LOWER the
    last one with <=, <."""
    prefix = index_prefix(index_name)
    probe = prefix + _escaped(encoded_key)  # = below every entry with this secondary key
    above = probe[: -len(_TERMINATOR)] + _AFTER_TERMINATOR  # above every such entry
    if comparison in (pb.EQUAL, pb.CEILING):
        found = reader.ceiling(Column.META, probe, inclusive=True)
    elif comparison == pb.HIGHER:
        found = reader.ceiling(Column.META, above, inclusive=True)
    elif comparison == pb.FLOOR:
        found = reader.floor(Column.META, above, inclusive=False)
    elif comparison == pb.LOWER:
        found = reader.floor(Column.META, probe, inclusive=False)
    else:
        raise ValueError(f"unknown comparison type {comparison}")
    if found is None or not found[0].startswith(prefix):
        return None
    secondary, primary = _split_entry(found[0], len(prefix))
    if comparison == pb.EQUAL and secondary != encoded_key:
        return None
    return secondary, primary


def scan_entries(
    reader: KvReader, index_name: str, encoded_start: bytes, encoded_end: bytes
) -> Iterator[tuple[bytes, bytes]]:
    """(encoded secondary, encoded primary) with start <= secondary < end, in index order."""
    if encoded_end <= encoded_start:
        return
    prefix = index_prefix(index_name)
    start = prefix + _escaped(encoded_start)
    end = prefix + _escaped(encoded_end)
    size = len(prefix)
    for entry_key, _ in reader.scan(Column.META, start, end):
        yield _split_entry(entry_key, size)


def index_range(index_name: str) -> tuple[bytes, bytes]:
    """All entries of one index (for tests and tools)."""
    prefix = index_prefix(index_name)
    return prefix, prefix_end(prefix)
