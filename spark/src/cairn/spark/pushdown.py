"""Spark's pushed filters -> a KeyFilter and the shards to read. Pure.

A filter is taken only when the reader applies it exactly (every row is checked
against the KeyFilter as it is read), so the results are the same with pushdown
on and off; everything else goes back to Spark."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)

from cairn.spark.keyspace import KeyFilter


@dataclass(frozen=True, slots=True)
class Pushed:
    keys: KeyFilter = field(default_factory=KeyFilter)
    # Only these shards (EqualTo/In on `shard`); None: every shard.
    shards: frozenset[int] | None = None


def _intersect(known: frozenset[str] | frozenset[int] | None, new: Iterable[object]) -> frozenset:  # type: ignore[type-arg]
    found = frozenset(new)
    return found if known is None else known & found


def push(filters: Sequence[Filter]) -> tuple[Pushed, list[Filter]]:
    """What the reader takes over, and the filters Spark must still apply."""
    pushed = Pushed()
    rejected: list[Filter] = []
    for item in filters:
        taken = _take(pushed, item)
        if taken is None:
            rejected.append(item)
        else:
            pushed = taken
    return pushed, rejected


def _take(pushed: Pushed, item: Filter) -> Pushed | None:
    attribute = getattr(item, "attribute", None)
    value = getattr(item, "value", None)
    keys = pushed.keys
    if attribute == ("shard",):
        if isinstance(item, EqualTo) and _is_int(value):
            return replace(pushed, shards=_intersect(pushed.shards, [value]))
        if isinstance(item, In) and all(_is_int(v) for v in item.value):
            return replace(pushed, shards=_intersect(pushed.shards, item.value))
        return None
    if attribute != ("key",):
        return None
    if isinstance(item, EqualTo) and isinstance(value, str):
        return replace(pushed, keys=replace(keys, keys=_intersect(keys.keys, [value])))
    if isinstance(item, In) and all(isinstance(v, str) for v in item.value):
        return replace(pushed, keys=replace(keys, keys=_intersect(keys.keys, item.value)))
    if isinstance(item, StringStartsWith) and isinstance(value, str):
        return replace(pushed, keys=replace(keys, prefixes=(*keys.prefixes, value)))
    if not isinstance(value, str):
        return None
    if isinstance(item, GreaterThan | GreaterThanOrEqual):
        inclusive = isinstance(item, GreaterThanOrEqual)
        if keys.low is not None:
            # Keep the tighter bound of the two.
            raw, old = value.encode(), keys.low.encode()
            if raw < old or (raw == old and inclusive):
                return pushed
        return replace(pushed, keys=replace(keys, low=value, low_inclusive=inclusive))
    if isinstance(item, LessThan | LessThanOrEqual):
        inclusive = isinstance(item, LessThanOrEqual)
        if keys.high is not None:
            raw, old = value.encode(), keys.high.encode()
            if raw > old or (raw == old and inclusive):
                return pushed
        return replace(pushed, keys=replace(keys, high=value, high_inclusive=inclusive))
    return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
