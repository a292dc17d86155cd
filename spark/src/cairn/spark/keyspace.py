"""Key sets as range scans: which [start, end) ranges of a shard hold the keys a
set of pushed-down filters can match. Pure.

The protocol takes ranges as keys, compared in the namespace's key order. A key
prefix is one range in the natural order and two in the hierarchical order (the
keys whose last segment starts with the prefix's last part, and the deeper keys
whose segment at that depth does: between the two sort keys of other depths).
Ranges from `prefix_ranges` are exact when `exact` says so; readers apply the
filters to every row as well, so a range only has to hold every match.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cairn.client.scans import KEYS_END
from cairn.common.keyorder import KeyOrder

_SURROGATES = range(0xD800, 0xE000)
_MAX_CHAR = 0x10FFFF

KeyRange = tuple[str, str]


def next_prefix(text: str) -> str | None:
    """The smallest string above every string that starts with `text` (its last
    character incremented; UTF-8 keeps code point order), or None if none is
    representable (empty, or only U+10FFFF)."""
    while text:
        code = ord(text[-1]) + 1
        if code in _SURROGATES:
            code = _SURROGATES.stop
        if code <= _MAX_CHAR:
            return text[:-1] + chr(code)
        text = text[:-1]
    return None


def prefix_ranges(prefix: str, order: KeyOrder) -> tuple[list[KeyRange], bool]:
    """Ranges, in key order and disjoint, holding every key that starts with
    `prefix`; and whether they hold nothing else."""
    if not prefix:
        return [("", KEYS_END)], True
    if order is KeyOrder.NATURAL:
        end = next_prefix(prefix)
        return [(prefix, end if end is not None else KEYS_END)], end is not None
    slash = prefix.rfind("/")
    head, last = prefix[: slash + 1], prefix[slash + 1 :]
    if not last:
        # Every key under `head`: its leaves, then every deeper key. The first key
        # after the subtree is the one whose segment at head's depth is head's last
        # segment followed by NUL (NUL sorts right after a segment's end).
        return [(head, head + "/"), (head + "/", head[:-1] + "\x00/")], True
    following = next_prefix(last)
    if following is None:
        return [(prefix, head + "/"), (prefix + "/", head[:-1] + "\x00/")], False
    # Leaves at this depth sort below every deeper key at it, so the two ranges
    # are in order and disjoint.
    return [(prefix, head + following), (prefix + "/", head + following + "/")], True


def point_range(key: str) -> KeyRange:
    """The range holding exactly `key` (NUL is the smallest continuation, and it
    keeps the key's depth in the hierarchical order)."""
    return key, key + "\x00"


@dataclass(frozen=True, slots=True)
class KeyFilter:
    """The conjunction of the filters on `key` that were pushed down (Spark's
    string order: bytewise UTF-8, which is the natural key order)."""

    # Exactly these keys (EqualTo, In); None: no such filter.
    keys: frozenset[str] | None = None
    prefixes: tuple[str, ...] = ()
    low: str | None = None
    low_inclusive: bool = True
    high: str | None = None
    high_inclusive: bool = False

    def accepts(self, key: str) -> bool:
        if self.keys is not None and key not in self.keys:
            return False
        if not all(key.startswith(prefix) for prefix in self.prefixes):
            return False
        if self.low is not None:
            raw, low = key.encode(), self.low.encode()
            if raw < low or (raw == low and not self.low_inclusive):
                return False
        if self.high is not None:
            raw, high = key.encode(), self.high.encode()
            if raw > high or (raw == high and not self.high_inclusive):
                return False
        return True

    def ranges(self, order: KeyOrder) -> list[KeyRange]:
        """Ranges of the shard to scan, in key order and disjoint, holding every key
        this filter accepts (rows are filtered again as they are read)."""
        if self.keys is not None:
            encode = order.encoder
            wanted = sorted((k for k in self.keys if self.accepts(k)), key=encode)
            return [point_range(key) for key in wanted]
        prefix = max(self.prefixes, key=len, default="")
        if order is KeyOrder.NATURAL:
            low = self.low if self.low is not None else ""
            high = self.high
            if high is not None and self.high_inclusive:
                high += "\x00"  # the smallest key above it
            ranges, _ = prefix_ranges(prefix, order)
            start = max(ranges[0][0], low, key=str.encode)
            end = ranges[0][1] if high is None else min(ranges[0][1], high, key=str.encode)
            return [(start, end)] if start.encode() < end.encode() else []
        if self.low is not None and self.high is not None:
            # A bytewise range holds only keys starting with its bounds' common
            # prefix: a prefix, which the hierarchical order can scan.
            common = _common_prefix(self.low, self.high)
            if len(common) > len(prefix):
                prefix = common
        ranges, _ = prefix_ranges(prefix, order)
        return ranges


def _common_prefix(a: str, b: str) -> str:
    size = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        size += 1
    return a[:size]


def narrowed(shards: Iterable[int], allowed: frozenset[int] | None) -> list[int]:
    """The shards a scan reads: all of them, or those a `shard` filter allows."""
    return [shard for shard in shards if allowed is None or shard in allowed]
