"""Combining per-shard answers. Pure, apart from `merge_sorted`'s awaiting.

Each shard streams its keys already sorted in the namespace's key order; the
union is merged with the same order (the encodings of cairn.common.keyorder sort
bytewise exactly as the keys do). A get with a comparison other than EQUAL asks
every shard and keeps the nearest answer.
"""

from __future__ import annotations

import heapq
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

from cairn.client.records import Comparison, Record

T = TypeVar("T")


async def merge_sorted(
    streams: Sequence[AsyncIterator[T]], sort_key: Callable[[T], Any]
) -> AsyncGenerator[T]:
    """The items of already-sorted streams, in order. Holds one item per stream."""
    heap: list[tuple[Any, int, T]] = []
    for index, stream in enumerate(streams):
        first = await anext(stream, None)
        if first is not None:
            heap.append((sort_key(first), index, first))
    heapq.heapify(heap)
    while heap:
        _, index, item = heap[0]
        yield item
        following = await anext(streams[index], None)
        if following is None:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (sort_key(following), index, following))


def nearest(
    found: Sequence[Record], comparison: Comparison, sort_key: Callable[[str], bytes]
) -> Record | None:
    """The one answer of a get asked of several shards: for FLOOR and LOWER the
    highest key found, for CEILING and HIGHER the lowest; by the secondary key when
    the get went through an index. EQUAL answers are all the same key (or, through
    an index, the lowest primary key)."""
    if not found:
        return None

    def order(record: Record) -> tuple[bytes, bytes]:
        secondary = record.secondary_index_key
        primary = sort_key(record.key)
        return (sort_key(secondary) if secondary is not None else primary, primary)

    if comparison in (Comparison.FLOOR, Comparison.LOWER):
        return max(found, key=order)
    return min(found, key=order)
