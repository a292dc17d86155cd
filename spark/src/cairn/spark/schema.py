"""The columns of the data sources, as Spark DDL and as the Arrow schemas the
readers build batches with (the two must agree field by field).

The Arrow schemas are made on first use: Spark starts a fresh Python process to
ask a data source for its schema (the DDL), and pyarrow's import is a good part of
that process's start-up on a busy machine."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

# One row per record. Timestamps are milliseconds since the epoch, as on the wire.
# `session_id` and `client_identity` are null for persistent records. The protocol
# does not return a record's partition key, so `partition_key` reads as null; on
# write it routes the record (as `put(partition_key=...)` does).
RECORD_DDL = (
    "namespace string, shard long, key string, value binary, version_id long, "
    "modifications_count long, created_timestamp long, modified_timestamp long, "
    "session_id long, client_identity string, partition_key string"
)


@cache
def record_arrow() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            ("namespace", pa.string()),
            ("shard", pa.int64()),
            ("key", pa.string()),
            ("value", pa.binary()),
            ("version_id", pa.int64()),
            ("modifications_count", pa.int64()),
            ("created_timestamp", pa.int64()),
            ("modified_timestamp", pa.int64()),
            ("session_id", pa.int64()),
            ("client_identity", pa.string()),
            ("partition_key", pa.string()),
        ]
    )


# One row per change: `offset` is the shard's notification offset (the log entry
# that made it), `timestamp` that entry's time (ms since the epoch), `type` one of
# CREATED, MODIFIED, DELETED, RANGE_DELETED; `version_id` is set for CREATED and
# MODIFIED; `key_range_end` (exclusive) for RANGE_DELETED, whose `key` is the start.
CHANGE_DDL = (
    "namespace string, shard long, offset long, timestamp long, key string, type string, "
    "version_id long, key_range_end string"
)


@cache
def change_arrow() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            ("namespace", pa.string()),
            ("shard", pa.int64()),
            ("offset", pa.int64()),
            ("timestamp", pa.int64()),
            ("key", pa.string()),
            ("type", pa.string()),
            ("version_id", pa.int64()),
            ("key_range_end", pa.string()),
        ]
    )
