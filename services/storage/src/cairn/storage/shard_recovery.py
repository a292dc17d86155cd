"""A shard replica's state read back from its KV and WAL when it opens: the I/O
edge of core/recovery.py, which decides where the log restarts and what its
term is."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from cairn.storage.core.meta import (
    COMMIT_OFFSET_KEY,
    INCARNATION_KEY,
    LOG_BASE_KEY,
    TERM_KEY,
    decode_entry_id,
    decode_i64,
    decode_u64,
    encode_u64,
)
from cairn.storage.core.recovery import LogExtent, plan_recovery, recovered_term
from cairn.storage.core.replication.terms import NO_OFFSET, NO_TERM, EntryId, history_of
from cairn.storage.core.shard_core import PipelineLimits, ShardCore
from cairn.storage.kv import Column, KvStore
from cairn.storage.ports import LogStore

log = logging.getLogger(__name__)


def recover(
    shard_id: int,
    kv: KvStore,
    wal: LogStore,
    limits: PipelineLimits,
    incarnation_source: Callable[[], int],
) -> tuple[ShardCore[Any], int]:
    """The replica's core (term, log history, applied offset) and the
    incarnation of its data, drawn (and made durable) for storage created empty."""
    incarnation = decode_u64(kv.get(Column.META, INCARNATION_KEY))
    if incarnation is None:
        # Storage created empty (a new replica, or one whose disk was lost): its
        # data is a new incarnation, durable before anyone hears of it.
        incarnation = incarnation_source()
        kv.write([(Column.META, INCARNATION_KEY, encode_u64(incarnation))])
        kv.sync()
        log.info("shard %d: storage created, incarnation %#x", shard_id, incarnation)
    applied = decode_i64(kv.get(Column.META, COMMIT_OFFSET_KEY), NO_OFFSET)
    stored_base = decode_entry_id(kv.get(Column.META, LOG_BASE_KEY))
    recovery = plan_recovery(
        shard_id,
        applied,
        EntryId(*stored_base) if stored_base is not None else None,
        LogExtent(wal.first_offset, wal.last_offset, wal.last_term),
    )
    if recovery.restart_log_at is not None:
        log.warning(
            "shard %d: WAL ends at %d but the KV has applied up to %d",
            shard_id,
            wal.last_offset,
            applied,
        )
        wal.reset(recovery.restart_log_at)
    history = history_of(
        recovery.log.first_offset,
        recovery.log.last_offset,
        lambda offset: wal.get(offset).term,
        recovery.base,
    )
    stored_term = decode_i64(kv.get(Column.META, TERM_KEY), NO_TERM)
    core: ShardCore[Any] = ShardCore(
        shard_id,
        recovered_term(stored_term, history.last_term),
        history,
        commit_offset=applied,
        applied_offset=applied,
        last_timestamp_ms=(
            wal.get(wal.last_offset).timestamp_ms if wal.first_offset != NO_OFFSET else 0
        ),
        limits=limits,
    )
    return core, incarnation
