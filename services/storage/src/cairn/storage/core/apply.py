"""Applying committed log entries to the shard's state.

`apply_write` is a deterministic function of (state, entry): the same entry
applied to the same state yields the same changes and the same response on
every replica, because everything it uses (offset, timestamp) comes from the
entry, never from a clock. Several entries are applied into one
`PendingChanges` overlay and written to the KV as one atomic batch together
with the new commit offset.
"""

from __future__ import annotations

import bisect
import enum
import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import storage_internal_pb2 as internal_pb
from cairn.storage.core import indexes, wire
from cairn.storage.core.indexes import HAS_INDEXES
from cairn.storage.core.meta import (
    COMMIT_OFFSET_KEY,
    SESSION_PREFIX,
    encode_i64,
    ephemeral_key,
    session_key,
)
from cairn.storage.core.notifications import EntryNotifications
from cairn.storage.core.read_cache import ReadCache
from cairn.storage.core.sequences import next_sequence_suffix
from cairn.storage.core.sessions import ephemeral_range, owning_session
from cairn.storage.kv.store import Change, Column, ColumnChanges, KvReader
from cairn.storage.records import (
    FLAGS_OFFSET,
    HAS_SESSION,
    HEADER,
    RecordMeta,
    encode_record,
    header_session,
    version_header,
)

OK = pb.OK
KEY_NOT_FOUND = pb.KEY_NOT_FOUND
UNEXPECTED_VERSION_ID = pb.UNEXPECTED_VERSION_ID
SESSION_DOES_NOT_EXIST = pb.SESSION_DOES_NOT_EXIST
INVALID_ARGUMENT = pb.INVALID_ARGUMENT
EXPECTED_RECORD_DOES_NOT_EXIST = -1

_RECORDS = Column.RECORDS
# Header flags that mean something else points at the record (its session's
# ownership entry, its index entries) and must let go when it is replaced or deleted.
_LINKED = HAS_SESSION | HAS_INDEXES


class _Absent(enum.Enum):
    """A dict.get default that no stored value can be (values are bytes or None)."""

    TOKEN = enum.auto()


_ABSENT: Final = _Absent.TOKEN
# New overlay keys that PendingChanges.floor_record_key inserts one by one into its
# sorted list; more are sorted in at once (insertion is linear in the list length).
_MAX_INSERTS_BEFORE_RESORT = 64


class HeaderCache:
    """Version headers of recently written records: the read-before-write of every
    put needs only these (the fixed 33 bytes, plus 8 for an ephemeral record's
    session: records.version_header), and a RocksDB lookup costs several times more
    than the rest of the put. Write-through (the applier is the only writer of a
    shard's records), negative entries included, bounded by entry count with
    least-recently-written eviction."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._headers: dict[bytes, bytes | None] = {}

    @property
    def headers(self) -> Mapping[bytes, bytes | None]:
        """The cached headers by encoded key (None: known absent), read-only: the
        plain-put loop reads them directly."""
        return self._headers

    def lookup(self, encoded_key: bytes) -> tuple[bool, bytes | None]:
        headers = self._headers
        if encoded_key in headers:
            return True, headers[encoded_key]
        return False, None

    def store(self, encoded_key: bytes, header: bytes | None) -> None:
        self._headers[encoded_key] = header
        self._evict()

    def store_headers(self, headers: dict[bytes, bytes | None]) -> None:
        """Remember the headers of freshly written records (None: deleted)."""
        self._headers.update(headers)
        self._evict()

    def _evict(self) -> None:
        # Oldest first by first insertion (a dict keeps that order): cheaper than LRU
        # bookkeeping on every put, and recently created keys stay.
        headers = self._headers
        excess = len(headers) - self.max_entries
        if excess > 0:
            for key in [key for key, _ in zip(headers, range(excess), strict=False)]:
                del headers[key]

    def clear(self) -> None:
        self._headers.clear()

    def __len__(self) -> int:
        return len(self._headers)


@dataclass(frozen=True, slots=True)
class PlainPutView:
    """A group's new records and their version headers (None: deleted), and the
    header cache's entries: what the hottest loop reads through local names."""

    records: dict[bytes, bytes | None]
    headers: dict[bytes, bytes | None]
    cached_headers: Mapping[bytes, bytes | None]


class PendingChanges:
    """Changes of a group of entries not yet written, readable as the new state."""

    def __init__(
        self,
        reader: KvReader,
        header_cache: HeaderCache | None = None,
        read_cache: ReadCache | None = None,
    ) -> None:
        self._reader = reader
        self._cache = header_cache
        self._read_cache = read_cache
        self._records: dict[bytes, bytes | None] = {}
        # The version header of every record in `_records` (same keys; None: deleted),
        # kept as records are written so that neither reads nor the cache slice them.
        self._headers: dict[bytes, bytes | None] = {}
        self._meta: dict[bytes, bytes | None] = {}
        # The keys of `_records`, sorted, for floor lookups; built on first use and
        # extended with the keys added since (`_records` never loses a key: a
        # deletion is a None value), so puts pay nothing for it.
        self._sorted_records: list[bytes] = []
        self._sorted_count = 0
        # A sequence put was applied: GetSequenceUpdates subscribers should look.
        self.sequence_keys_generated = False
        # session id -> open and taking puts, as read in this group (see session_exists)
        self._open_sessions: dict[int, bool] = {}

    def plain_put_view(self) -> PlainPutView:
        """The maps the plain-put loop reads and writes directly (_apply_plain_puts):
        it keeps `records` and `headers` in step, as put_record does."""
        cache = self._cache
        return PlainPutView(self._records, self._headers, {} if cache is None else cache.headers)

    def get_header(self, encoded_key: bytes) -> bytes | None:
        """The version header of the record in the new state, None if absent."""
        headers = self._headers
        if encoded_key in headers:
            return headers[encoded_key]
        cache = self._cache
        if cache is not None:
            found, header = cache.lookup(encoded_key)
            if found:
                return header
        data = self._reader.get(_RECORDS, encoded_key)
        header = None if data is None else version_header(data)
        if cache is not None:
            cache.store(encoded_key, header)
        return header

    def get_record(self, encoded_key: bytes) -> bytes | None:
        if encoded_key in self._records:
            return self._records[encoded_key]
        return self._reader.get(_RECORDS, encoded_key)

    def put_record(self, encoded_key: bytes, data: bytes, index_middles: bytes = b"") -> None:
        """`index_middles`: the record's index entries (indexes.add_entries), carried
        in its version header so that replacing it needs no read of them."""
        self._records[encoded_key] = data
        self._headers[encoded_key] = indexes.with_carried_middles(
            version_header(data), index_middles
        )

    def delete_record(self, encoded_key: bytes) -> None:
        self._records[encoded_key] = None
        self._headers[encoded_key] = None

    def record_keys_in_range(self, start: bytes, end: bytes) -> list[bytes]:
        """Keys present in [start, end) in the new state, ascending."""
        keys = {key for key, _ in self._reader.scan(_RECORDS, start, end)}
        for key, data in self._records.items():
            if start <= key < end:
                if data is None:
                    keys.discard(key)
                else:
                    keys.add(key)
        return sorted(keys)

    def floor_record_key(self, key: bytes, inclusive: bool) -> bytes | None:
        """The highest record key <= `key` (< if not inclusive) in the new state."""
        records = self._records
        if len(records) != self._sorted_count:
            added = list(itertools.islice(records, self._sorted_count, None))
            if len(added) > _MAX_INSERTS_BEFORE_RESORT:
                self._sorted_records = sorted(records)  # e.g. after a large delete range
            else:
                for key_added in added:
                    bisect.insort(self._sorted_records, key_added)
            self._sorted_count = len(records)
        pending = self._sorted_records
        position = (bisect.bisect_right if inclusive else bisect.bisect_left)(pending, key) - 1
        while position >= 0 and records[pending[position]] is None:
            position -= 1
        best = pending[position] if position >= 0 else None
        # The KV's candidate, stepping over keys this overlay deleted; a candidate at
        # or below the overlay's own is beaten by it.
        probe, probe_inclusive = key, inclusive
        while (found := self._reader.floor(_RECORDS, probe, probe_inclusive)) is not None:
            stored = found[0]
            if best is not None and stored <= best:
                break
            if records.get(stored, b"") is not None:
                return stored
            probe, probe_inclusive = stored, False
        return best

    def set_meta(self, key: bytes, data: bytes | None) -> None:
        self._meta[key] = data
        if key.startswith(SESSION_PREFIX):
            self._open_sessions.clear()

    def get_meta(self, key: bytes) -> bytes | None:
        if key in self._meta:
            return self._meta[key]
        return self._reader.get(Column.META, key)

    def meta_items(self, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Internal-state items in [start, end) of the new state, ascending, read
        lazily (the committed KV merged with this group's changes)."""
        overlay = sorted((key, data) for key, data in self._meta.items() if start <= key < end)
        committed = self._reader.scan(Column.META, start, end)
        pending_index = 0
        for key, data in committed:
            while pending_index < len(overlay) and overlay[pending_index][0] < key:
                new_key, new_data = overlay[pending_index]
                pending_index += 1
                if new_data is not None:
                    yield new_key, new_data
            if pending_index < len(overlay) and overlay[pending_index][0] == key:
                replaced = overlay[pending_index][1]
                pending_index += 1
                if replaced is not None:
                    yield key, replaced
                continue
            yield key, data
        for new_key, new_data in overlay[pending_index:]:
            if new_data is not None:
                yield new_key, new_data

    def meta_keys_in_range(self, start: bytes, end: bytes) -> list[bytes]:
        """Internal-state keys present in [start, end) in the new state, ascending."""
        keys = {key for key, _ in self._reader.scan(Column.META, start, end)}
        for key, data in self._meta.items():
            if start <= key < end:
                if data is None:
                    keys.discard(key)
                else:
                    keys.add(key)
        return sorted(keys)

    def session_exists(self, session_id: int) -> bool:
        """Open and taking puts (not being closed). Remembered for the group until a
        session's state changes in it: the ephemeral puts of a request mostly name one
        session, and each answer would otherwise be a KV read and a parse."""
        known = self._open_sessions.get(session_id)
        if known is not None:
            return known
        stored = self.get_meta(session_key(session_id))
        is_open = stored is not None and not internal_pb.SessionState.FromString(stored).closing
        self._open_sessions[session_id] = is_open
        return is_open

    def first_meta_keys(self, start: bytes, end: bytes, limit: int) -> list[bytes]:
        """The first `limit` internal-state keys in [start, end) in the new state."""
        pending = self._meta
        added = sorted(k for k, data in pending.items() if start <= k < end and data is not None)
        stored = (k for k, _ in self._reader.scan(Column.META, start, end) if k not in pending)
        return list(itertools.islice(heapq.merge(stored, added), limit))

    def detach_ephemeral(self, encoded_key: bytes, header: bytes) -> None:
        """Drop the record from its owning session's index, if it has an owner (the
        header carries its id: see records.version_header)."""
        owner = header_session(header)
        if owner is not None:
            self._meta[ephemeral_key(owner, encoded_key)] = None

    def unlink(self, encoded_key: bytes, header: bytes) -> None:
        """Before a record is replaced or deleted: drop its session ownership entry
        and its index entries, if it has any (the header's flags say)."""
        flags = header[FLAGS_OFFSET]
        if flags & HAS_SESSION:
            self.detach_ephemeral(encoded_key, header)
        if flags & HAS_INDEXES:
            indexes.remove_entries(self, encoded_key, indexes.carried_middles(header))

    def set_commit_offset(self, offset: int) -> None:
        self._meta[COMMIT_OFFSET_KEY] = encode_i64(offset)

    def changes(self) -> list[Change]:
        result: list[Change] = [(_RECORDS, key, data) for key, data in self._records.items()]
        result.extend((Column.META, key, data) for key, data in self._meta.items())
        return result

    def column_changes(self) -> ColumnChanges:
        """The changes per column, as the KV's `write_unlogged` takes them: this
        state's own dicts, not copies (read them before changing the state again)."""
        return {_RECORDS: self._records, Column.META: self._meta}

    def written(self) -> None:
        """The changes are in the KV: carry the new headers into the header cache,
        and the records changed into the answers the read cache holds of them."""
        if self._cache is not None:
            self._cache.store_headers(self._headers)
        if self._read_cache is not None:
            self._read_cache.refresh_written(self._records)

    def __len__(self) -> int:
        return len(self._records) + len(self._meta)


def version_of(meta: RecordMeta) -> pb.Version:
    version = pb.Version(
        version_id=meta.version_id,
        modifications_count=meta.modifications_count,
        created_timestamp=meta.created_ms,
        modified_timestamp=meta.modified_ms,
    )
    if meta.session_id is not None:
        version.session_id = meta.session_id
    if meta.client_identity is not None:
        version.client_identity = meta.client_identity
    return version


# Framed (tag + length + message) responses that never vary.
_PUT_UNEXPECTED_VERSION = wire.field(wire.PUTS, wire.status_only(UNEXPECTED_VERSION_ID))
_PUT_NO_SESSION = wire.field(wire.PUTS, wire.status_only(SESSION_DOES_NOT_EXIST))
_PUT_INVALID = wire.field(wire.PUTS, wire.status_only(INVALID_ARGUMENT))
_DELETE_RESPONSES: dict[int, bytes] = {
    status: wire.field(wire.DELETES, wire.status_only(status))
    for status in (OK, KEY_NOT_FOUND, UNEXPECTED_VERSION_ID)
}
_DELETE_RANGE_OK = wire.field(wire.DELETE_RANGES, wire.status_only(OK))
_NO_PUT_RESPONSES = wire.NoPutResponses()


def apply_write(
    state: PendingChanges,
    request: pb.WriteRequest,
    offset: int,
    timestamp_ms: int,
    key_order: KeyOrder,
    plain_puts: bool = False,
    notes: EntryNotifications | None = None,
    answer: bool = True,
) -> bytes:
    """Apply one entry's write request (puts, then deletes, then delete ranges) and
    return the serialized WriteResponse (with `answer` False, what successful puts
    would answer is left out: nobody waits for it).

    `plain_puts`: the caller established (see fastpath.py) that no put carries more
    than key, value and expected version, so the general checks can be skipped.
    This is the hottest loop of the server, hence struct-level record handling
    and hand-encoded responses."""
    encode = key_order.encoder
    parts: list[bytes] = []
    append = parts.append
    responses = wire.PutResponses(offset, timestamp_ms) if answer else _NO_PUT_RESPONSES
    if plain_puts:
        _apply_plain_puts(
            state, request.puts, encode, offset, timestamp_ms, responses, notes, parts
        )
    else:
        for put in request.puts:
            append(_apply_put(state, put, encode, offset, timestamp_ms, responses, notes))
    for delete in request.deletes:
        status = _apply_delete(state, delete, encode(delete.key))
        if notes is not None and status == OK:
            notes.deleted(delete.key)
        append(_DELETE_RESPONSES[status])
    for delete_range in request.delete_ranges:
        start = encode(delete_range.start_inclusive)
        end = encode(delete_range.end_exclusive)
        if start < end:
            for key in state.record_keys_in_range(start, end):
                header = state.get_header(key)
                if header is not None:
                    state.unlink(key, header)
                state.delete_record(key)
            if notes is not None:
                notes.range_deleted(delete_range.start_inclusive, delete_range.end_exclusive)
        append(_DELETE_RANGE_OK)
    return b"".join(parts)


def _expected_version_fails(put: pb.PutRequest, existing_version: int | None) -> bool:
    expected = put.expected_version_id
    if expected == EXPECTED_RECORD_DOES_NOT_EXIST:
        return existing_version is not None
    return expected != existing_version


def _apply_plain_puts(
    state: PendingChanges,
    puts: Iterable[pb.PutRequest],
    encode: Callable[[str], bytes],
    offset: int,
    timestamp_ms: int,
    responses: wire.PutResponses,
    notes: EntryNotifications | None,
    parts: list[bytes],
) -> None:
    """Plain puts (key, value, maybe an expected version), their responses appended
    to `parts`. The per-put work of the server's hottest loop, written out in one
    function over local names: the overlay's headers and the header cache are read
    directly (a header comes from the newest of: this group's records, the cache,
    the KV), and notifications are recorded in one dict per entry."""
    view = state.plain_put_view()
    records, headers, cached = view.records, view.headers, view.cached_headers
    absent = _ABSENT  # a local: read up to three times a put
    unpack = HEADER.unpack_from
    pack = HEADER.pack
    append = parts.append
    # Every record created by this entry gets the same header and response.
    created_header = pack(offset, 0, timestamp_ms, timestamp_ms, 0)
    created_response = responses.created
    updated_response = responses.updated
    if notes is not None:
        changes, created_note, modified_note = notes.put_encodings(offset)
    else:
        changes, created_note, modified_note = None, b"", b""
    for put in puts:
        key = put.key
        encoded_key = encode(key)
        existing = headers.get(encoded_key, absent)
        if existing is absent:
            existing = cached.get(encoded_key, absent)
            if existing is absent:
                existing = state.get_header(encoded_key)
        if existing is None:
            if put.HasField("expected_version_id") and _expected_version_fails(put, None):
                append(_PUT_UNEXPECTED_VERSION)
                continue
            records[encoded_key] = created_header + put.value
            headers[encoded_key] = created_header
            if changes is not None:
                changes[key] = created_note
            append(created_response)
            continue
        existing_version, previous_modifications, created_ms, _, flags = unpack(existing)
        if put.HasField("expected_version_id") and _expected_version_fails(put, existing_version):
            append(_PUT_UNEXPECTED_VERSION)
            continue
        if flags & _LINKED:
            # A persistent put over an ephemeral record detaches it from its session; a
            # put without indexes over an indexed record drops its index entries.
            state.unlink(encoded_key, existing)
        modifications = previous_modifications + 1
        header = pack(offset, modifications, created_ms, timestamp_ms, 0)
        records[encoded_key] = header + put.value
        headers[encoded_key] = header
        if changes is not None:
            changes[key] = modified_note
        append(updated_response(modifications, created_ms))


def _apply_put(
    state: PendingChanges,
    put: pb.PutRequest,
    encode: Callable[[str], bytes],
    offset: int,
    timestamp_ms: int,
    responses: wire.PutResponses,
    notes: EntryNotifications | None,
) -> bytes:
    key = put.key
    encoded_key = encode(key)
    generated = False
    if put.sequence_key_delta:
        # Validation made sure of a partition key, no expected version and d1 > 0.
        suffix, _ = next_sequence_suffix(
            state.floor_record_key, encoded_key, put.sequence_key_delta
        )
        if suffix is None:
            return _PUT_INVALID
        # A suffix holds no '/': its encoding is the prefix's plus the suffix bytes.
        key += suffix
        encoded_key += suffix.encode("ascii")
        generated = True
    existing = state.get_header(encoded_key)
    if existing is None:
        existing_version = None
        modifications = 0
        created_ms = timestamp_ms
    else:
        existing_version, previous_modifications, created_ms, _, _ = HEADER.unpack_from(existing)
        modifications = previous_modifications + 1
    if put.HasField("expected_version_id") and _expected_version_fails(put, existing_version):
        return _PUT_UNEXPECTED_VERSION
    session_id: int | None = None
    client_identity: str | None = None
    if put.HasField("session_id"):
        if not state.session_exists(put.session_id):
            return _PUT_NO_SESSION
        session_id = put.session_id
        if put.HasField("client_identity"):
            client_identity = put.client_identity
    if existing is not None:
        # The record leaves its previous owner, if any (it may be taken over below),
        # and its previous index entries.
        state.unlink(encoded_key, existing)
    if session_id is not None:
        state.set_meta(ephemeral_key(session_id, encoded_key), b"")
    record = encode_record(
        offset,
        modifications,
        created_ms,
        timestamp_ms,
        session_id,
        client_identity,
        put.partition_key if put.HasField("partition_key") else None,
        put.value,
    )
    if put.secondary_indexes:
        middles = indexes.add_entries(state, encoded_key, put.secondary_indexes, encode)
        state.put_record(encoded_key, indexes.with_index_flag(record), middles)
    else:
        state.put_record(encoded_key, record)
    if generated:
        state.sequence_keys_generated = True
    if notes is not None:
        if existing is None:
            notes.created(key, offset)
        else:
            notes.modified(key, offset)
    if session_id is None and not generated:
        # What every put of the entry shares is encoded once.
        if existing is None:
            return responses.created
        return responses.updated(modifications, created_ms)
    return responses.owned_or_named(
        modifications, created_ms, session_id, client_identity, key if generated else None
    )


def _apply_delete(state: PendingChanges, delete: pb.DeleteRequest, encoded_key: bytes) -> int:
    existing = state.get_header(encoded_key)
    if existing is None:
        return KEY_NOT_FOUND
    if (
        delete.HasField("expected_version_id")
        and HEADER.unpack_from(existing)[0] != delete.expected_version_id
    ):
        return UNEXPECTED_VERSION_ID
    state.unlink(encoded_key, existing)
    state.delete_record(encoded_key)
    return OK


def apply_create_session(
    state: PendingChanges, entry: internal_pb.CreateSessionEntry, offset: int
) -> int:
    """Open a session; its id is the entry's offset (unique and increasing per shard)."""
    stored = internal_pb.SessionState(
        timeout_ms=entry.timeout_ms, client_identity=entry.client_identity, owner=entry.owner
    )
    state.set_meta(session_key(offset), stored.SerializeToString())
    return offset


class CloseOutcome(enum.Enum):
    NOT_OPEN = "not open"  # unknown, or already closed
    MORE = "more"  # records remain: the leader appends another CloseSession entry
    CLOSED = "closed"


# Records one CloseSession entry deletes at most: a session owning many records is
# closed over several entries, so that no single entry stalls the shard.
MAX_RECORDS_PER_CLOSE_ENTRY = 1000


def apply_close_session(
    state: PendingChanges,
    entry: internal_pb.CloseSessionEntry,
    key_order: KeyOrder,
    notes: EntryNotifications | None = None,
) -> CloseOutcome:
    """Delete (up to a bound of) the records the session still owns; once none is
    left, the session itself."""
    session_id = entry.session_id
    stored_state = state.get_meta(session_key(session_id))
    if stored_state is None:
        return CloseOutcome.NOT_OPEN
    session = internal_pb.SessionState.FromString(stored_state)
    if not session.closing:
        session.closing = True
        state.set_meta(session_key(session_id), session.SerializeToString())
    start, end = ephemeral_range(session_id)
    batch = state.first_meta_keys(start, end, MAX_RECORDS_PER_CLOSE_ENTRY + 1)
    for index_key in batch[:MAX_RECORDS_PER_CLOSE_ENTRY]:
        encoded_key = index_key[len(start) :]
        record = state.get_record(encoded_key)
        if record is not None and owning_session(record) == session_id:
            if record[FLAGS_OFFSET] & HAS_INDEXES:
                indexes.remove_entries(state, encoded_key, None)
            state.delete_record(encoded_key)
            if notes is not None:
                notes.deleted(key_order.decode(encoded_key))
        state.set_meta(index_key, None)
    if len(batch) > MAX_RECORDS_PER_CLOSE_ENTRY:
        return CloseOutcome.MORE
    state.set_meta(session_key(session_id), None)
    return CloseOutcome.CLOSED
