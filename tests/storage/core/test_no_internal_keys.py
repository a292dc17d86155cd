"""No internal key is ever visible: random operations against a plain dict model.

Puts with and without secondary indexes and sessions, sequence puts, deletes,
delete ranges, session opens and closes, applied one entry at a time or
several entries into one overlay (as the shard's apply groups do). After every
step, everything a client can read (List/RangeScan over the full range, Get
with every comparison, reads by index) must be exactly what the model
predicts: the internal state (sessions, index entries, notifications, the
commit offset) lives beside the records and must never leak into an answer.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cairn.common.keyorder import KeyOrder, compare_hierarchical
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import storage_internal_pb2 as internal_pb
from cairn.storage.core import reads
from cairn.storage.core.apply import (
    CloseOutcome,
    PendingChanges,
    apply_close_session,
    apply_create_session,
    apply_write,
)
from cairn.storage.core.fastpath import has_plain_puts
from cairn.storage.kv import Column, MemoryKv

ORDER = KeyOrder.HIERARCHICAL
INDEX_NAMES = ("n", "m")
SEQUENCE_PREFIXES = ("/s", "/a/s", "s")
COMPARISONS = (pb.EQUAL, pb.FLOOR, pb.CEILING, pb.LOWER, pb.HIGHER)
_WELL_FORMED = re.compile(r"(-[0-9]{20})+")

# Keys: a few segments, some shaped like internal keys or like sequence keys.
_SEGMENTS = st.sampled_from(["a", "b", "s", "a-", "index", "session", "commit_offset", ""])
KEYS = st.one_of(
    st.lists(_SEGMENTS, min_size=1, max_size=3).map("/".join),
    st.sampled_from(["/s-00000000000000000003", "/s-x", "/a/s-00000000000000000001-5"]),
)
SECONDARY_KEYS = st.sampled_from(["a", "b", "a/b", "c", "", "b\x00"])
INDEXES = st.lists(st.tuples(st.sampled_from(INDEX_NAMES), SECONDARY_KEYS), max_size=3)


# Sort key of the reference comparator (not the encoding the store uses).
hierarchical = functools.cmp_to_key(lambda a, b: compare_hierarchical(a.encode(), b.encode()))


@dataclass(frozen=True)
class Record:
    value: bytes
    session: int | None
    indexes: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Put:
    key: str
    value: bytes
    indexes: tuple[tuple[str, str], ...] = ()
    session: int | None = None
    partition_key: str | None = None
    deltas: tuple[int, ...] = ()

    def message(self) -> pb.PutRequest:
        put = pb.PutRequest(key=self.key, value=self.value)
        put.sequence_key_delta.extend(self.deltas)
        for name, secondary in self.indexes:
            put.secondary_indexes.add(index_name=name, secondary_key=secondary)
        if self.session is not None:
            put.session_id = self.session
        if self.partition_key is not None:
            put.partition_key = self.partition_key
        return put


PUTS = st.builds(
    Put,
    key=KEYS,
    value=st.binary(max_size=3),
    indexes=INDEXES.map(tuple),
    partition_key=st.sampled_from([None, "p"]),
)
SEQUENCE_PUTS = st.builds(
    Put,
    key=st.sampled_from(SEQUENCE_PREFIXES),
    value=st.binary(max_size=3),
    indexes=INDEXES.map(tuple),
    partition_key=st.just("p"),
    deltas=st.tuples(st.integers(1, 3)) | st.tuples(st.integers(1, 3), st.integers(0, 2)),
)
RANGES = st.tuples(KEYS, KEYS)


class Model:
    def __init__(self) -> None:
        self.records: dict[str, Record] = {}
        self.sessions: set[int] = set()

    def sorted_keys(self) -> list[str]:
        return sorted(self.records, key=hierarchical)

    def next_sequence_key(self, prefix: str, deltas: tuple[int, ...]) -> str | None:
        well_formed = [
            key[len(prefix) :]
            for key in self.records
            if key.startswith(prefix) and _WELL_FORMED.fullmatch(key[len(prefix) :])
        ]
        bases = [int(part) for part in max(well_formed, default="").split("-")[1:]]
        if len(bases) > len(deltas):
            return None
        bases += [0] * (len(deltas) - len(bases))
        return prefix + "".join(f"-{b + d:020d}" for b, d in zip(bases, deltas, strict=True))

    def put(self, put: Put) -> tuple[int, str | None]:
        key = put.key
        if put.deltas:
            generated = self.next_sequence_key(put.key, put.deltas)
            if generated is None:
                return pb.INVALID_ARGUMENT, None
            key = generated
        if put.session is not None and put.session not in self.sessions:
            return pb.SESSION_DOES_NOT_EXIST, None
        indexes = tuple(dict.fromkeys(put.indexes))
        self.records[key] = Record(put.value, put.session, indexes)
        return pb.OK, key if put.deltas else None

    def delete(self, key: str) -> int:
        return pb.OK if self.records.pop(key, None) is not None else pb.KEY_NOT_FOUND

    def delete_range(self, start: str, end: str) -> None:
        low, high = hierarchical(start), hierarchical(end)
        for key in [k for k in self.records if low <= hierarchical(k) < high]:
            del self.records[key]

    def close_session(self, session: int) -> None:
        self.sessions.discard(session)
        for key in [k for k, r in self.records.items() if r.session == session]:
            del self.records[key]

    def index_entries(self, name: str) -> list[tuple[str, str]]:
        """(secondary, primary) in index order."""
        entries = [
            (secondary, key)
            for key, record in self.records.items()
            for index_name, secondary in record.indexes
            if index_name == name
        ]
        return sorted(entries, key=lambda e: (hierarchical(e[0]), hierarchical(e[1])))


def find(ordered: list[str], probe: str, comparison: int) -> str | None:
    """Get's answer over keys sorted in the key order (the first/last of ties)."""
    p = hierarchical(probe)
    if comparison == pb.EQUAL:
        return next((k for k in ordered if hierarchical(k) == p), None)
    if comparison == pb.CEILING:
        return next((k for k in ordered if hierarchical(k) >= p), None)
    if comparison == pb.HIGHER:
        return next((k for k in ordered if hierarchical(k) > p), None)
    if comparison == pb.FLOOR:
        return next((k for k in reversed(ordered) if hierarchical(k) <= p), None)
    return next((k for k in reversed(ordered) if hierarchical(k) < p), None)


class NoInternalKeyIsEverVisible(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.kv = MemoryKv()
        self.model = Model()
        self.offset = 0
        self.sessions: list[int] = []  # open
        self.every_session: list[int] = []  # open or closed

    # ---- operations ------------------------------------------------------------------

    def _apply(self, requests: list[pb.WriteRequest]) -> list[pb.WriteResponse]:
        """Apply the requests as consecutive entries of one group."""
        state = PendingChanges(self.kv)
        responses = []
        for request in requests:
            self.offset += 1
            plain = has_plain_puts(request.SerializeToString())
            raw = apply_write(state, request, self.offset, 1000 + self.offset, ORDER, plain)
            responses.append(pb.WriteResponse.FromString(raw))
        state.set_commit_offset(self.offset)
        self.kv.write(state.changes())
        return responses

    def _expect(
        self, request: pb.WriteRequest, puts: list[Put], response: pb.WriteResponse
    ) -> None:
        for put, answer in zip(puts, response.puts, strict=True):
            status, generated = self.model.put(put)
            assert answer.status == status
            assert answer.HasField("key") == (generated is not None)
            if generated is not None:
                assert answer.key == generated
        for delete, answer in zip(request.deletes, response.deletes, strict=True):
            assert answer.status == self.model.delete(delete.key)
        for delete_range in request.delete_ranges:
            self.model.delete_range(delete_range.start_inclusive, delete_range.end_exclusive)

    def _request(
        self, puts: list[Put], deletes: list[str], ranges: list[tuple[str, str]]
    ) -> pb.WriteRequest:
        return pb.WriteRequest(
            puts=[put.message() for put in puts],
            deletes=[pb.DeleteRequest(key=key) for key in deletes],
            delete_ranges=[
                pb.DeleteRangeRequest(start_inclusive=s, end_exclusive=e) for s, e in ranges
            ],
        )

    @rule(
        entries=st.lists(
            st.tuples(
                st.lists(PUTS | SEQUENCE_PUTS, max_size=3),
                st.lists(KEYS, max_size=2),
                st.lists(RANGES, max_size=1),
                st.lists(st.integers(0, 9), max_size=3),  # which puts are ephemeral
            ),
            min_size=1,
            max_size=3,
        )
    )
    def write(
        self, entries: list[tuple[list[Put], list[str], list[tuple[str, str]], list[int]]]
    ) -> None:
        batch = []
        for puts, deletes, ranges, ephemeral in entries:
            if self.every_session:
                sessions = self.every_session
                puts = [
                    Put(p.key, p.value, p.indexes, sessions[i % len(sessions)], "p", p.deltas)
                    if i in ephemeral
                    else p
                    for i, p in enumerate(puts)
                ]
            batch.append((self._request(puts, deletes, ranges), puts))
        responses = self._apply([request for request, _ in batch])
        for (request, puts), response in zip(batch, responses, strict=True):
            self._expect(request, puts, response)

    @rule()
    def open_session(self) -> None:
        self.offset += 1
        state = PendingChanges(self.kv)
        entry = internal_pb.CreateSessionEntry(timeout_ms=5000, client_identity="c")
        session = apply_create_session(state, entry, self.offset)
        self.kv.write(state.changes())
        self.sessions.append(session)
        self.every_session.append(session)
        self.model.sessions.add(session)

    @precondition(lambda self: bool(self.sessions))
    @rule(index=st.integers(0, 5), twice=st.booleans())
    def close_session(self, index: int, twice: bool) -> None:
        session = self.sessions.pop(index % len(self.sessions))
        for attempt in range(2 if twice else 1):
            self.offset += 1
            state = PendingChanges(self.kv)
            outcome = apply_close_session(
                state, internal_pb.CloseSessionEntry(session_id=session), ORDER
            )
            self.kv.write(state.changes())
            # (sessions here own far fewer records than one entry deletes)
            expected = CloseOutcome.CLOSED if attempt == 0 else CloseOutcome.NOT_OPEN
            assert outcome is expected
        self.model.close_session(session)

    # ---- what clients can see --------------------------------------------------------

    @invariant()
    def scans_and_gets_show_exactly_the_records(self) -> None:
        expected = self.model.sorted_keys()
        # the full key range: "" up to a key above any key of the universe
        scanned = list(reads.scan_records(self.kv, "", "~~~/~/~/~", ORDER))
        assert [key for key, _ in scanned] == expected
        for key, data in scanned:
            response = reads.record_response(key, data, True, pb.GetResponse())
            record = self.model.records[key]
            assert response.value == record.value
            assert response.version.HasField("session_id") == (record.session is not None)
        for probe in ("", "/a", "/a/b", "/s-00000000000000000002", "index", "session/", "~"):
            for comparison in COMPARISONS:
                request = pb.GetRequest(key=probe, comparison_type=comparison)  # type: ignore[arg-type]
                response = reads.get(self.kv, request, ORDER)
                found = find(expected, probe, comparison)
                if found is None:
                    assert response.status == pb.KEY_NOT_FOUND
                else:
                    assert (response.status, response.key) == (pb.OK, found)

    @invariant()
    def reads_by_index_show_exactly_the_entries(self) -> None:
        for name in INDEX_NAMES:
            entries = self.model.index_entries(name)
            listed = list(reads.list_index(self.kv, name, "", "~/~/~", ORDER))
            assert listed == [primary for _, primary in entries]
            scanned = [key for key, _ in reads.scan_index(self.kv, name, "", "~/~/~", ORDER)]
            assert scanned == listed
            secondaries = [secondary for secondary, _ in entries]
            for probe in ("a", "b", "a/b", "bb", "", "zz/z"):
                for comparison in COMPARISONS:
                    request = pb.GetRequest(
                        key=probe,
                        comparison_type=comparison,  # type: ignore[arg-type]
                        secondary_index_name=name,
                        include_value=True,
                    )
                    response = reads.get(self.kv, request, ORDER)
                    found = find(secondaries, probe, comparison)
                    if found is None:
                        assert response.status == pb.KEY_NOT_FOUND
                        continue
                    # the first (last for FLOOR/LOWER) entry with that secondary key
                    ties = [p for s, p in entries if s == found]
                    primary = ties[-1] if comparison in (pb.FLOOR, pb.LOWER) else ties[0]
                    assert (response.status, response.key) == (pb.OK, primary)
                    assert response.secondary_index_key == found
                    assert response.value == self.model.records[primary].value

    @invariant()
    def internal_state_is_only_in_its_own_column(self) -> None:
        stored = {ORDER.decode(key) for key, _ in self.kv.scan(Column.RECORDS, b"", None)}
        assert stored == set(self.model.records)


NoInternalKeyIsEverVisible.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_no_internal_key_is_ever_visible = NoInternalKeyIsEverVisible.TestCase
