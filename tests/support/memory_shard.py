"""A shard that applies entries directly, for core tests: in memory unless given
another store."""

from __future__ import annotations

from cairn.common.keyorder import KeyOrder
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
from cairn.storage.core.read_cache import ReadCache
from cairn.storage.kv import KvStore, MemoryKv

ORDER = KeyOrder.HIERARCHICAL


class Shard:
    """Applies as a shard's applier does, `read_cache` (if given) included."""

    def __init__(self, kv: KvStore | None = None, read_cache: ReadCache | None = None) -> None:
        self.kv: KvStore = MemoryKv() if kv is None else kv
        self.read_cache = read_cache
        self.offset = -1

    def _changes(self) -> PendingChanges:
        return PendingChanges(self.kv, None, self.read_cache)

    def _write(self, state: PendingChanges) -> None:
        self.kv.write(state.changes())
        state.written()

    def write(self, request: pb.WriteRequest, timestamp_ms: int = 1000) -> pb.WriteResponse:
        self.offset += 1
        state = self._changes()
        plain = has_plain_puts(request.SerializeToString())
        response = pb.WriteResponse.FromString(
            apply_write(state, request, self.offset, timestamp_ms, ORDER, plain)
        )
        state.set_commit_offset(self.offset)
        self._write(state)
        return response

    def create_session(self, timeout_ms: int = 5000) -> int:
        self.offset += 1
        state = self._changes()
        entry = internal_pb.CreateSessionEntry(timeout_ms=timeout_ms, client_identity="c")
        session_id = apply_create_session(state, entry, self.offset)
        self._write(state)
        return session_id

    def close_session_step(self, session_id: int) -> CloseOutcome:
        """One CloseSession entry."""
        self.offset += 1
        state = self._changes()
        outcome = apply_close_session(
            state, internal_pb.CloseSessionEntry(session_id=session_id), ORDER
        )
        self._write(state)
        return outcome

    def close_session(self, session_id: int) -> bool:
        """CloseSession entries until done, as the leader appends them; False if the
        session was not open."""
        outcome = self.close_session_step(session_id)
        while outcome is CloseOutcome.MORE:
            outcome = self.close_session_step(session_id)
        return outcome is CloseOutcome.CLOSED

    def get(self, key: str, comparison: int = pb.EQUAL) -> pb.GetResponse:
        return reads.get(
            self.kv, pb.GetRequest(key=key, include_value=True, comparison_type=comparison), ORDER
        )


def put(key: str, value: bytes = b"v", **kwargs: object) -> pb.WriteRequest:
    return pb.WriteRequest(puts=[pb.PutRequest(key=key, value=value, **kwargs)])  # type: ignore[arg-type]
