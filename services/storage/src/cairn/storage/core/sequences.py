"""Sequence keys: server-generated keys `prefix-%020d[-%020d...]` (Oxia semantics).

A put with `sequence_key_delta = [d1, d2, ...]` stores its record under
`key` + `-%020d` % (base_i + d_i) for each delta, where the bases are the
components of the highest existing sequence key of that prefix (0 for
components it lacks, or when there is none). The counter is not stored
anywhere: it is derived from the records, so deleting the keys resets it,
and the same log always generates the same keys.

Where the keys sit: a suffix holds no '/', so in either key order the
encoding of `prefix + suffix` is the encoding of `prefix` followed by the
suffix bytes (hierarchical: the last segment is stored raw). All sequence
keys of a prefix therefore share one encoded byte prefix, and because every
component has exactly 20 digits, bytewise order among them is numeric order
of (c1, c2, ...). The highest one is found with floor lookups from just
above `encode(prefix) + "-9..."`, stepping over keys in that region that
are not well-formed sequence keys (a user may store `/seq-x` next to
`/seq-00000000000000000001`): each step either lands on a well-formed key
or moves the bound below the malformed one, skipping every key that shares
its malformed part at once. The number of steps depends only on the
logical state, so a bound on it keeps apply deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

# Digits of one suffix component: enough for any uint64 (Oxia's delta type).
COMPONENT_DIGITS = 20
MAX_COMPONENT_VALUE = 2**64 - 1
# A suffix component is `-` + 20 digits.
COMPONENT_BYTES = 1 + COMPONENT_DIGITS
# Floor lookups one search for the highest sequence key may make before it
# gives up (each is one KV seek). Only thousands of malformed keys under one
# sequence prefix, stored on purpose, get near it.
MAX_SEQUENCE_PROBES = 1000

_DASH = b"-"
_DIGIT_LOW = ord("0")
_DIGIT_HIGH = ord("9")
_DASH_BYTE = ord("-")
# The byte after '9' and after '-': bounds just above "<digits>" / "-..." regions.
_AFTER_DIGITS = b":"
_AFTER_DASH = b"."

# floor(key, inclusive) -> the highest present record key <= key (< if not inclusive).
FloorLookup = Callable[[bytes, bool], bytes | None]


class SequenceSearchTooLong(Exception):
    """More than MAX_SEQUENCE_PROBES malformed keys stand in the way."""


def component_values(suffix: bytes) -> list[int]:
    """The numbers of a well-formed suffix (`-DDDD...` repeated)."""
    return [
        int(suffix[start + 1 : start + COMPONENT_BYTES])
        for start in range(0, len(suffix), COMPONENT_BYTES)
    ]


def _leading_digits(data: bytes, start: int, limit: int) -> int:
    count = 0
    end = min(len(data), start + limit)
    position = start
    while position < end and _DIGIT_LOW <= data[position] <= _DIGIT_HIGH:
        position += 1
        count += 1
    return count


def highest_sequence_key(floor: FloorLookup, encoded_prefix: bytes) -> bytes | None:
    """The highest well-formed encoded key `encoded_prefix(-D{20})+`, None if none.

    Raises SequenceSearchTooLong after MAX_SEQUENCE_PROBES lookups."""
    region = encoded_prefix + _DASH
    size = len(encoded_prefix)
    # Above every key `prefix-<digit>...`; the search only moves down from here.
    bound, inclusive = region + _AFTER_DIGITS, False
    for _ in range(MAX_SEQUENCE_PROBES):
        found = floor(bound, inclusive)
        if found is None or not found.startswith(region):
            return None
        tail = found[size:]  # starts with "-"
        position = 0  # tail[position] is the "-" of the component being checked
        while True:
            digits = _leading_digits(tail, position + 1, COMPONENT_DIGITS)
            stop = position + 1 + digits  # first byte not part of this component
            if digits == COMPONENT_DIGITS:
                if stop == len(tail):
                    return found  # well formed
                if tail[stop] == _DASH_BYTE:
                    position = stop
                    continue
                # `head` is well formed but `found` continues it with junk.
                head = found[: size + stop]
                if tail[stop] > _DASH_BYTE:
                    # head, head-..., and nothing malformed of this family above them.
                    bound, inclusive = head + _AFTER_DASH, False
                else:
                    # head-... sorts above `found`, so none exist below the old bound;
                    # head itself is the only candidate of this family.
                    bound, inclusive = head, True
            else:
                head = found[: size + stop]
                if stop == len(tail) or tail[stop] < _DIGIT_LOW:
                    # Keys continuing head with a digit sort above `found`: none exist
                    # below the old bound, so every candidate is below head.
                    bound, inclusive = head, False
                else:
                    # head followed by a byte above '9': candidates continue head with
                    # a digit, below head + ':'.
                    bound, inclusive = head + _AFTER_DIGITS, False
            break
    raise SequenceSearchTooLong(
        f"more than {MAX_SEQUENCE_PROBES} keys that are not sequence keys share the sequence prefix"
    )


def next_sequence_suffix(
    floor: FloorLookup, encoded_prefix: bytes, deltas: Sequence[int]
) -> tuple[str | None, str | None]:
    """(the suffix the next sequence put with these deltas gets, None) or, when it
    cannot proceed, (None, why)."""
    try:
        highest = highest_sequence_key(floor, encoded_prefix)
    except SequenceSearchTooLong as error:
        return None, str(error)
    bases = [] if highest is None else component_values(highest[len(encoded_prefix) :])
    if len(bases) > len(deltas):
        # Oxia refuses too (ErrMissingSequenceDeltas): the new key would not sort last.
        return None, (
            f"the highest key of the sequence has {len(bases)} components "
            f"but the put has only {len(deltas)} deltas"
        )
    parts = []
    for index, delta in enumerate(deltas):
        value = (bases[index] if index < len(bases) else 0) + delta
        if value > MAX_COMPONENT_VALUE:
            return None, f"sequence component {index} would exceed 2^64 - 1"
        parts.append(f"-{value:0{COMPONENT_DIGITS}d}")
    return "".join(parts), None
