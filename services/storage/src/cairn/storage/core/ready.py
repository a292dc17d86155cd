"""What the driver does after an event (ShardCore.step), in the order listed.

Modelled on etcd-io/raft's Ready: the core has already changed its state as if
each step were done; the driver does the I/O, in order, and answers the caller
only once all of it is done. A step that fails leaves the replica failed, not
half changed: the driver stops there and reports the error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic

from cairn.proto import storage_internal_pb2 as internal_pb
from cairn.storage.core.folding import WriteFold
from cairn.storage.core.pending import W
from cairn.storage.core.replication.leader import LeaderCore


@dataclass(frozen=True, slots=True)
class SteppedDown(Generic[W]):
    """A leadership ended: its replication stops, and its writers learn why.

    `outcome_unknown` wait for entries already logged: those stay in the log for
    a later leader to decide, so whether they commit is unknown here.
    `not_logged` were collected for an entry never logged: nothing was accepted,
    and they may send again."""

    outcome_unknown: tuple[W, ...]
    not_logged: WriteFold[W] | None


@dataclass(frozen=True, slots=True)
class Leading:
    """A leadership begins: replicate to the followers with `quorum` (the
    term's), then log `first_entry` (the term's first), without waiting for room
    in the write buffer: what fills it may be inherited entries that only this
    entry lets commit."""

    quorum: LeaderCore
    first_entry: internal_pb.TermStartEntry


@dataclass(frozen=True, slots=True)
class Ready(Generic[W]):
    """1. `persist_term`: write the core's term durably (nobody may hear of a
          term the replica could forget after a crash);
    2. `stepped_down`: stop leading (see SteppedDown);
    3. `new_stream`: a leader's stream starts (what the apply step kept of the
          last one goes);
    4. `cut_log_after`: drop the log's entries after this offset, then tell the
          core (`on_log_cut`);
    5. `sync_log`: make the whole log durable: the answer reports the head as
          held;
    6. `lead`: start leading (see Leading)."""

    persist_term: bool = False
    stepped_down: SteppedDown[W] | None = None
    new_stream: bool = False
    cut_log_after: int | None = None
    sync_log: bool = False
    lead: Leading | None = None
