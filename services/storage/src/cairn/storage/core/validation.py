"""Checks on client requests before anything is written to the log.

Everything here is about the request alone (shape and limits). Whether a
conditional write succeeds depends on the stored state and is decided when the
entry is applied (see apply.py), identically on every replica.
"""

from __future__ import annotations

from cairn.common.errors import InvalidRequest, RequestTooLarge
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.config import Limits
from cairn.storage.core.sequences import COMPONENT_BYTES

# A UTF-8 character takes at most 4 bytes: strings shorter than limit / 4
# characters cannot be over the limit, which spares encoding almost every key.
_MAX_UTF8_BYTES_PER_CHAR = 4
# Secondary index entries one put may carry (each is one more internal key written).
MAX_SECONDARY_INDEXES_PER_PUT = 1000


def _check_key(key: str, limits: Limits, what: str) -> None:
    if len(key) * _MAX_UTF8_BYTES_PER_CHAR > limits.max_key_bytes:
        size = len(key.encode("utf-8"))
        if size > limits.max_key_bytes:
            raise RequestTooLarge(f"{what} is {size} bytes; the limit is {limits.max_key_bytes}")


def validate_write(
    request: pb.WriteRequest, limits: Limits, size_bytes: int, plain_puts: bool = False
) -> None:
    """`size_bytes`: the serialized request's size (no key or value can be larger).
    `plain_puts`: no put carries fields beyond key, value and expected version
    (see fastpath.py), so there is no feature rule (sequence keys, secondary
    indexes, version overrides) to check."""
    operations = len(request.puts) + len(request.deletes) + len(request.delete_ranges)
    if operations > limits.max_operations_per_request:
        raise RequestTooLarge(
            f"write request has {operations} operations; "
            f"the limit is {limits.max_operations_per_request}"
        )
    max_value = limits.max_value_bytes
    sizes_cannot_exceed = size_bytes <= min(limits.max_key_bytes, max_value)
    if plain_puts and sizes_cannot_exceed:
        return
    for put in request.puts:
        # Feature checks are cheap container tests; size checks only when needed.
        if put.sequence_key_delta:
            _check_sequence_put(put, limits)
        if put.secondary_indexes:
            _check_secondary_indexes(put, limits)
        if put.HasField("override_version_id") or put.HasField("override_modifications_count"):
            raise InvalidRequest("version overrides are not supported by this server version")
        if sizes_cannot_exceed:
            continue
        _check_key(put.key, limits, "key")
        if len(put.value) > max_value:
            raise RequestTooLarge(
                f"value of key {put.key[:100]!r} is {len(put.value)} bytes; "
                f"the limit is {max_value}"
            )
        if put.HasField("partition_key"):
            _check_key(put.partition_key, limits, "partition key")
        if put.HasField("client_identity"):
            _check_key(put.client_identity, limits, "client identity")
    if sizes_cannot_exceed:
        return
    for delete in request.deletes:
        _check_key(delete.key, limits, "key")
    for delete_range in request.delete_ranges:
        _check_key(delete_range.start_inclusive, limits, "range start")
        _check_key(delete_range.end_exclusive, limits, "range end")


def _check_sequence_put(put: pb.PutRequest, limits: Limits) -> None:
    """Oxia's rules for a put whose key the server generates."""
    if not put.HasField("partition_key"):
        # All keys of a sequence must be on one shard for the counter to be exact.
        raise InvalidRequest("a put with sequence key deltas needs a partition key")
    if put.HasField("expected_version_id"):
        raise InvalidRequest("a put with sequence key deltas cannot have an expected version")
    if put.sequence_key_delta[0] == 0:
        # Otherwise the new key would not sort after the existing ones.
        raise InvalidRequest("the first sequence key delta must be greater than 0")
    generated_bytes = len(put.key.encode("utf-8")) + COMPONENT_BYTES * len(put.sequence_key_delta)
    if generated_bytes > limits.max_key_bytes:
        raise RequestTooLarge(
            f"the generated sequence key would be {generated_bytes} bytes; "
            f"the limit is {limits.max_key_bytes}"
        )


def _check_secondary_indexes(put: pb.PutRequest, limits: Limits) -> None:
    if len(put.secondary_indexes) > MAX_SECONDARY_INDEXES_PER_PUT:
        raise RequestTooLarge(
            f"put of key {put.key[:100]!r} has {len(put.secondary_indexes)} secondary "
            f"indexes; the limit is {MAX_SECONDARY_INDEXES_PER_PUT}"
        )
    for index in put.secondary_indexes:
        if not index.index_name:
            raise InvalidRequest("a secondary index needs a name")
        _check_key(index.index_name, limits, "secondary index name")
        _check_key(index.secondary_key, limits, "secondary key")


def validate_read(request: pb.ReadRequest, limits: Limits) -> None:
    if len(request.gets) > limits.max_operations_per_request:
        raise RequestTooLarge(
            f"read request has {len(request.gets)} gets; "
            f"the limit is {limits.max_operations_per_request}"
        )
    for get in request.gets:
        _check_key(get.key, limits, "key")
        if get.HasField("secondary_index_name"):
            _check_key(get.secondary_index_name, limits, "secondary index name")


def validate_range(start: str, end: str, secondary_index: str | None, limits: Limits) -> None:
    _check_key(start, limits, "range start")
    _check_key(end, limits, "range end")
    if secondary_index is not None:
        _check_key(secondary_index, limits, "secondary index name")


def validate_sequence_updates(request: pb.GetSequenceUpdatesRequest, limits: Limits) -> None:
    _check_key(request.key, limits, "sequence prefix")
