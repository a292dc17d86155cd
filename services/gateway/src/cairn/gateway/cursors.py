"""Pagination cursors of key and record scans. Pure.

A cursor is opaque and stateless: it holds the query it belongs to and the
position of the last item returned, so any gateway can serve the next page.

Position. A plain scan resumes at `last_key + "\\x00"`: the immediate
successor of `last_key` in both key orders (natural: bytewise; hierarchical:
the same segments, the last one a byte longer), so nothing is skipped and
nothing repeats. A scan through a secondary index is ordered by secondary key,
then primary key, and several records may share a secondary key; it resumes at
the last secondary key itself and skips the records at that secondary key up
to and including the last primary key returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from cairn.common.keyorder import KeyOrder
from cairn.gateway.tokens import TokenError, pack, unpack

ScanKind = Literal["keys", "records"]
KIND = "cursor"


class CursorError(ValueError):
    """A cursor that is malformed or belongs to another query."""


@dataclass(frozen=True, slots=True)
class ScanQuery:
    """What a scan asks for; a cursor is only valid for the same query."""

    namespace: str
    kind: ScanKind
    start: str
    end: str
    partition_key: str | None = None
    index: str | None = None


@dataclass(frozen=True, slots=True)
class Cursor:
    query: ScanQuery
    last_key: str
    # Index scans only: the secondary key of the last record returned.
    last_secondary_key: str | None = None

    def __post_init__(self) -> None:
        if (self.query.index is None) != (self.last_secondary_key is None):
            raise CursorError("an index scan's cursor needs the last secondary key, others none")

    def encode(self) -> str:
        q = self.query
        body: dict[str, Any] = {
            "ns": q.namespace,
            "k": q.kind,
            "s": q.start,
            "e": q.end,
            "p": q.partition_key,
            "i": q.index,
            "l": self.last_key,
            "ls": self.last_secondary_key,
        }
        return pack(KIND, body)

    @classmethod
    def decode(cls, token: str) -> Cursor:
        try:
            document = unpack(KIND, token)
        except TokenError:
            raise CursorError("not a cursor of this API") from None
        kind = document.get("k")
        if kind not in ("keys", "records"):
            raise CursorError("not a cursor of this API")
        query = ScanQuery(
            namespace=_text(document, "ns"),
            kind=kind,
            start=_text(document, "s"),
            end=_text(document, "e"),
            partition_key=_optional_text(document, "p"),
            index=_optional_text(document, "i"),
        )
        return cls(query, _text(document, "l"), _optional_text(document, "ls"))

    def resume_start(self) -> str:
        """The start (inclusive) of the next page's scan."""
        if self.last_secondary_key is not None:
            return self.last_secondary_key
        return self.last_key + "\x00"

    def already_returned(self, key: str, secondary_key: str | None, order: KeyOrder) -> bool:
        """Whether an item the resumed scan yields was on an earlier page (only
        the first items of an index scan, at the last secondary key, can be)."""
        if self.last_secondary_key is None:
            return False
        if secondary_key != self.last_secondary_key:
            return False
        return order.compare(key, self.last_key) <= 0


def _optional_text(document: dict[str, Any], name: str) -> str | None:
    value = document.get(name)
    if value is not None and not isinstance(value, str):
        raise CursorError("not a cursor of this API")
    return value


def _text(document: dict[str, Any], name: str) -> str:
    value = _optional_text(document, name)
    if value is None:
        raise CursorError("not a cursor of this API")
    return value


def resolve_query(
    cursor: Cursor | None,
    namespace: str,
    kind: ScanKind,
    start: str | None,
    end: str | None,
    partition_key: str | None,
    index: str | None,
) -> ScanQuery:
    """The query a page request means: its parameters, or the cursor's. With a
    cursor, parameters may be left out; any given must match the cursor's."""
    if cursor is None:
        if end is None:
            raise CursorError("end is required (exclusive; an empty end is an empty range)")
        return ScanQuery(namespace, kind, start or "", end, partition_key, index)
    query = cursor.query
    given = {
        "namespace": (namespace, query.namespace),
        "scan kind": (kind, query.kind),
        "start": (start, query.start),
        "end": (end, query.end),
        "partition_key": (partition_key, query.partition_key),
        "index": (index, query.index),
    }
    for name, (asked, recorded) in given.items():
        if asked is not None and asked != recorded:
            raise CursorError(f"the cursor belongs to another query ({name} differs)")
    return query
