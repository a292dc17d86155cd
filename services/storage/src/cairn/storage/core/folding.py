"""Folding client writes into one log entry: when a leader folds, which requests
may fold, and whether one fits a fold.

Every log entry costs the same fixed work however many operations it carries: a
replication message to each follower and its acknowledgement, an fsync on every
replica, an apply step with its notification batch. While the entries already
logged wait for their commit (a follower round trip), more client requests
arrive; a leader that logs each as its own entry spends most of its CPU on that
fixed work. So once an entry is uncommitted (a threshold), the leader collects what
arrives in a fold and logs it as a single FOLDED_WRITES entry as soon as
the commit offset moves (or the fold is full). That trades a little latency (a
folded request waits for the commit step that logs it) for much less work per
operation, and only under load: while nothing waits for its commit, nothing folds.
A leader without followers never folds: its commit is its own fsync, which
covers every entry logged before it (group commit), so folding would only add
a round of waiting, and cost single-put writers throughput (measurements:
docs/performance.md, "Folding threshold").

Only requests of plain puts and deletes fold, and only while their keys are
disjoint from the fold's: a record then changes at most once per entry, so its
version id (the entry's offset) still names exactly one state of it, and a
conditional write cannot confuse two states with the same version id. A request
that does not fit seals the fold and starts the next one; a request that cannot
fold at all seals the fold before it is logged, so a client's pipelined requests
are logged in the order they came.

Pure: the fold holds what each writer waits on (`W`, the driver's: an asyncio
future in the storage pod), and the driver answers them from the entry's result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic

from google.protobuf.message import Message

from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core.entries import (
    CLIENT_WRITE,
    FOLDED_WRITES,
    Folded,
    encode_entry,
    encode_folded_writes,
)
from cairn.storage.core.pending import W


@dataclass(slots=True)
class WriteFold(Generic[W]):
    """Client write requests collected for one entry, and what each one's writer
    waits on, in the order they came."""

    raw_requests: list[bytes] = field(default_factory=list)
    requests: list[pb.WriteRequest] = field(default_factory=list)
    waiters: list[W] = field(default_factory=list)
    # With tracing on: the contexts of the sampled requests (at most one each).
    traces: list[Any] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)
    operations: int = 0
    size_bytes: int = 0

    def fits(
        self, keys: set[str], operations: int, size_bytes: int, max_operations: int, max_bytes: int
    ) -> bool:
        """Whether a request can join: disjoint keys and within both bounds (an empty
        fold takes any request)."""
        return not self.requests or fits_fold(
            self.keys,
            self.operations,
            self.size_bytes,
            keys,
            operations,
            size_bytes,
            max_operations,
            max_bytes,
        )

    def add(
        self,
        raw_request: bytes,
        request: pb.WriteRequest,
        keys: set[str],
        operations: int,
        waiter: W,
    ) -> None:
        self.raw_requests.append(raw_request)
        self.requests.append(request)
        self.waiters.append(waiter)
        self.keys |= keys
        self.operations += operations
        self.size_bytes += len(raw_request)

    def entry(self) -> tuple[int, bytes, Message | Folded]:
        """The entry it is logged as (kind, payload, body): a plain client write
        if it holds one request. Its result is one response per request, in
        order (`responses`)."""
        if len(self.requests) == 1:
            return CLIENT_WRITE, encode_entry(CLIENT_WRITE, self.raw_requests[0]), self.requests[0]
        return FOLDED_WRITES, encode_folded_writes(self.raw_requests), Folded(self.requests)


def responses(result: bytes | list[bytes]) -> list[bytes]:
    """The responses of a fold's requests, in order, from its entry's result."""
    return [result] if isinstance(result, bytes) else result


def starts_fold(uncommitted_entries: int, threshold: int, has_followers: bool) -> bool:
    """Whether a leader starts collecting a fold: enough entries wait for their
    commit, and the commit waits on followers. Alone, a leader commits at its own
    fsync, which already covers every entry appended before it (group commit): a
    fold would only add a round of waiting."""
    return has_followers and uncommitted_entries >= threshold


def may_fold(request: pb.WriteRequest, plain_puts: bool) -> bool:
    """Plain puts and deletes only: no session, index, sequence or partition-key put
    (their effects reach beyond their own key) and no delete range."""
    return plain_puts and not request.delete_ranges


def keys_of(request: pb.WriteRequest) -> set[str]:
    keys = {put.key for put in request.puts}
    keys.update(delete.key for delete in request.deletes)
    return keys


def fits_fold(
    fold_keys: set[str],
    fold_operations: int,
    fold_bytes: int,
    keys: set[str],
    operations: int,
    size_bytes: int,
    max_operations: int,
    max_bytes: int,
) -> bool:
    """Whether a request can join a fold that holds requests already: disjoint keys
    (a record changes at most once per entry) and within both bounds."""
    return (
        fold_operations + operations <= max_operations
        and fold_bytes + size_bytes <= max_bytes
        and fold_keys.isdisjoint(keys)
    )
