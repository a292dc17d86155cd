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

Pure: the driver collects the requests and their futures (storage/folding.py).
"""

from __future__ import annotations

from cairn.proto import oxia_client_pb2 as pb


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
