"""Clients: write requests for the leader, and a simple oracle of what they do.

Requests are real `pb.WriteRequest`s over a few hierarchical keys: plain and
conditional puts (expected version -1, a version seen in an answer, or a stale
one) and deletes, some conditional. A write is *acknowledged* when the leader
of its term applied it; its answer is recorded with it.

`Oracle` is deliberately simple: a dict from key to (version, value), replaying
committed entries by the documented rules (a record's version is the offset of
the entry that last wrote it). Checkers compare replicas and answers against it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import storage_internal_pb2 as internal_pb
from cairn.storage.core.entries import (
    CLIENT_WRITE,
    CLOSE_SESSION,
    CREATE_SESSION,
    FOLDED_WRITES,
    Folded,
    decode_entry,
)

KEYS = ("/k/0", "/k/1", "/k/2", "/k/3", "/a", "/a/b", "/a/b/c")
# The lock the lockers take: an ephemeral record of their session.
LOCK_KEY = "/lock"


@dataclass(frozen=True, slots=True)
class AckedWrite:
    term: int
    offset: int
    payload: bytes
    response: bytes  # the serialized WriteResponse the leader answered with
    request_id: int
    leader: str
    step: int
    # Which of the entry's requests (a folded entry holds several).
    index: int = 0

    def request(self) -> pb.WriteRequest:
        return requests_of(self.payload)[self.index]


def requests_of(payload: bytes) -> list[pb.WriteRequest]:
    """The client write requests of a log entry, in order (none if it is not a
    client write)."""
    kind, body = decode_entry(payload)
    if kind == CLIENT_WRITE:
        assert isinstance(body, pb.WriteRequest)
        return [body]
    if kind == FOLDED_WRITES:
        assert isinstance(body, Folded)
        return list(body.requests)
    return []


@dataclass
class Clients:
    rng: random.Random
    # Versions seen in answers: what a client would send as expected_version_id.
    seen_versions: dict[str, int] = field(default_factory=dict)
    next_request_id: int = 0

    def next_request(self) -> tuple[int, pb.WriteRequest]:
        rng = self.rng
        request = pb.WriteRequest()
        roll = rng.random()
        if roll < 0.65:
            for _ in range(rng.randint(1, 2)):
                put = request.puts.add(key=rng.choice(KEYS), value=rng.randbytes(rng.randint(0, 8)))
                self._maybe_expect(put)
        elif roll < 0.9:
            delete = request.deletes.add(key=rng.choice(KEYS))
            if rng.random() < 0.3:
                delete.expected_version_id = self._some_version(delete.key)
        else:
            put = request.puts.add(key=rng.choice(KEYS), value=rng.randbytes(4))
            self._maybe_expect(put)
            request.deletes.add(key=rng.choice(KEYS))
        self.next_request_id += 1
        return self.next_request_id, request

    def acknowledged(self, write: AckedWrite) -> None:
        request = write.request()
        response = pb.WriteResponse.FromString(write.response)
        for put, answer in zip(request.puts, response.puts, strict=True):
            if answer.status == pb.OK:
                self.seen_versions[put.key] = answer.version.version_id

    def _maybe_expect(self, put: pb.PutRequest) -> None:
        roll = self.rng.random()
        if roll < 0.15:
            put.expected_version_id = -1
        elif roll < 0.45:
            put.expected_version_id = self._some_version(put.key)

    def _some_version(self, key: str) -> int:
        seen = self.seen_versions.get(key)
        if seen is None or self.rng.random() < 0.25:
            return self.rng.randint(0, 50)  # most likely stale
        return seen


@dataclass
class Oracle:
    """Puts and deletes by the book, one committed entry after another."""

    records: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    applied_offset: int = -1
    # Open sessions (by id: the offset of their CreateSession entry), and the
    # session owning each ephemeral record.
    sessions: set[int] = field(default_factory=set)
    owners: dict[str, int] = field(default_factory=dict)

    def apply(self, offset: int, payload: bytes) -> list[tuple[list[int], list[int]]] | None:
        """Apply the entry at `offset`; returns the statuses of the puts and of the
        deletes of each of its requests (None for entries that are not client
        writes). A folded entry's requests apply in order, all at its offset."""
        assert offset == self.applied_offset + 1, (offset, self.applied_offset)
        self.applied_offset = offset
        kind, body = decode_entry(payload)
        if kind == CREATE_SESSION:
            self.sessions.add(offset)
            return None
        if kind == CLOSE_SESSION:
            assert isinstance(body, internal_pb.CloseSessionEntry)
            self.sessions.discard(body.session_id)
            for key in [k for k, owner in self.owners.items() if owner == body.session_id]:
                del self.owners[key]
                del self.records[key]
            return None
        requests = requests_of(payload)
        if not requests:
            return None
        statuses = []
        for request in requests:
            put_statuses = [self._put(put, offset) for put in request.puts]
            delete_statuses = [self._delete(delete) for delete in request.deletes]
            assert not request.delete_ranges
            statuses.append((put_statuses, delete_statuses))
        return statuses

    def _put(self, put: pb.PutRequest, offset: int) -> int:
        existing = self.records.get(put.key)
        if put.HasField("expected_version_id"):
            expected = put.expected_version_id
            if expected == -1 and existing is not None:
                return pb.UNEXPECTED_VERSION_ID
            if expected != -1 and (existing is None or existing[0] != expected):
                return pb.UNEXPECTED_VERSION_ID
        if put.HasField("session_id"):
            if put.session_id not in self.sessions:
                return pb.SESSION_DOES_NOT_EXIST
            self.owners[put.key] = put.session_id
        else:
            self.owners.pop(put.key, None)
        self.records[put.key] = (offset, put.value)
        return pb.OK

    def _delete(self, delete: pb.DeleteRequest) -> int:
        existing = self.records.get(delete.key)
        if existing is None:
            return pb.KEY_NOT_FOUND
        if delete.HasField("expected_version_id") and existing[0] != delete.expected_version_id:
            return pb.UNEXPECTED_VERSION_ID
        del self.records[delete.key]
        self.owners.pop(delete.key, None)
        return pb.OK
