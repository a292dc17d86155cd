"""Key orders and their order-preserving byte encodings for RocksDB.

RocksDB sorts keys bytewise, so each key order comes with an encoding whose
bytewise order is the key order, and which decodes back to the key.

HIERARCHICAL (the default) is the order every released Oxia client merges
shard results with (`compare_with_slash`): walk both keys one `/`-separated
segment at a time; a key on its last segment sorts before a key that still has
more segments (whatever the bytes); two last segments compare bytewise; two
inner segments compare bytewise and, if equal, the walk goes on. This is what
makes the range `/a/` .. `/a//` hold exactly the children of `/a`.

Encoding: each inner segment becomes `0x02 + escaped(segment) + 0x00 0x01`
(NUL bytes inside escaped as `0x00 0xFF`, so the terminator sorts below any
continuation and a shorter segment sorts before a longer one it prefixes);
the last segment becomes `0x01 + segment` (raw: nothing follows it). The
markers make a last segment sort before an inner one.

NATURAL is plain bytewise order of the UTF-8 key.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

_LEAF = b"\x01"
_INNER = b"\x02"
_TERMINATOR = b"\x00\x01"
_NUL = b"\x00"
_ESCAPED_NUL = b"\x00\xff"
_SLASH = b"/"
_SEPARATOR = _TERMINATOR + _INNER


class KeyOrder(enum.Enum):
    HIERARCHICAL = "hierarchical"
    NATURAL = "natural"

    def encode(self, key: str) -> bytes:
        return self.encoder(key)

    @property
    def encoder(self) -> Callable[[str], bytes]:
        """The encoding as a plain function, for hot loops (no enum dispatch per key)."""
        return _encode_natural_key if self is KeyOrder.NATURAL else _encode_hierarchical_key

    def decode(self, encoded: bytes) -> str:
        if self is KeyOrder.NATURAL:
            return encoded.decode("utf-8")
        return decode_hierarchical(encoded).decode("utf-8")

    def prefix_ranges(self, prefix: str) -> tuple[tuple[bytes, bytes | None], ...]:
        """Encoded ranges [start, end) (end None: unbounded) that hold exactly the
        keys starting with `prefix`. In natural order they are one range. In
        hierarchical order they are two: the keys whose last segment starts with
        the prefix's last part, and the keys with more segments whose segment at
        that depth starts with it (between the two sort other keys, of other
        depths)."""
        raw = prefix.encode("utf-8")
        if self is KeyOrder.NATURAL:
            return ((raw, _after_all_with_prefix(raw)),)
        last = raw[raw.rfind(_SLASH) + 1 :]
        # The encoding of the segments before the last one: what precedes the
        # leaf marker and the last segment in the prefix's own encoding.
        inner = encode_hierarchical(raw)[: -(len(_LEAF) + len(last))]
        leaves = inner + _LEAF + last
        deeper = inner + _INNER + last.replace(_NUL, _ESCAPED_NUL)
        return (
            (leaves, _after_all_with_prefix(leaves)),
            (deeper, _after_all_with_prefix(deeper)),
        )

    def compare(self, a: str, b: str) -> int:
        if self is KeyOrder.NATURAL:
            ab, bb = a.encode("utf-8"), b.encode("utf-8")
            return (ab > bb) - (ab < bb)
        return compare_hierarchical(a.encode("utf-8"), b.encode("utf-8"))


def encode_hierarchical(raw: bytes) -> bytes:
    last_slash = raw.rfind(_SLASH)
    if last_slash < 0:
        return _LEAF + raw
    # Inner segments: escape NULs, then turn each separator into
    # "end of segment, next inner segment" with one C-level replace.
    inner = raw[:last_slash]
    if _NUL in inner:
        inner = inner.replace(_NUL, _ESCAPED_NUL)
    return b"".join(
        (_INNER, inner.replace(_SLASH, _SEPARATOR), _TERMINATOR, _LEAF, raw[last_slash + 1 :])
    )


def _after_all_with_prefix(prefix: bytes) -> bytes | None:
    """The smallest byte string above every one that starts with `prefix`; None
    when there is none (the prefix is empty or all 0xFF)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes((stripped[-1] + 1,))


def _encode_natural_key(key: str) -> bytes:
    return key.encode("utf-8")


# The separator's str form, for the str route below (an f-string's expression part
# cannot hold a backslash escape in Python 3.11).
_SEPARATOR_STR = _SEPARATOR.decode()


def _encode_hierarchical_key(key: str) -> bytes:
    # The same encoding built on the str: "/" and the marker bytes are ASCII, and no
    # UTF-8 sequence of another character holds their bytes, so the encoding of the
    # assembled str equals the assembled encodings. It is much faster than
    # the bytes route (this runs for every put a server applies); an f-string (one
    # allocation) and encode() with its default UTF-8 (no codec name to look up) are
    # faster than concatenation and encode("utf-8") (measurements:
    # docs/performance.md, "Hierarchical key encoding").
    # Keys holding NUL need escaping to a byte that is not UTF-8: the bytes route.
    if "\x00" in key:
        return encode_hierarchical(key.encode())
    inner, slash, leaf = key.rpartition("/")
    if not slash:
        return ("\x01" + key).encode()
    return f"\x02{inner.replace('/', _SEPARATOR_STR)}\x00\x01\x01{leaf}".encode()


def decode_hierarchical(encoded: bytes) -> bytes:
    segments: list[bytes] = []
    position = 0
    while True:
        marker = encoded[position : position + 1]
        if marker == _LEAF:
            segments.append(encoded[position + 1 :])
            return _SLASH.join(segments)
        if marker != _INNER:
            raise ValueError(f"not a hierarchical key encoding: {encoded!r}")
        end = encoded.find(_TERMINATOR, position + 1)
        if end < 0:
            raise ValueError(f"unterminated segment in key encoding: {encoded!r}")
        segments.append(encoded[position + 1 : end].replace(_ESCAPED_NUL, _NUL))
        position = end + len(_TERMINATOR)


def compare_hierarchical(a: bytes, b: bytes) -> int:
    """Reference comparator (slow; the encoding is what the store uses)."""
    while a and b:
        slash_a = a.find(_SLASH)
        slash_b = b.find(_SLASH)
        if slash_a < 0 and slash_b < 0:
            return (a > b) - (a < b)
        if slash_a < 0:
            return -1
        if slash_b < 0:
            return 1
        span_a, span_b = a[:slash_a], b[:slash_b]
        if span_a != span_b:
            return (span_a > span_b) - (span_a < span_b)
        a, b = a[slash_a + 1 :], b[slash_b + 1 :]
    return (len(a) > len(b)) - (len(a) < len(b))
