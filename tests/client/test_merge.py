"""Merging per-shard answers in key order, and choosing a comparison get's answer."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator

from hypothesis import given
from hypothesis import strategies as st

from cairn.client.merge import merge_sorted, nearest
from cairn.client.records import Comparison, Record, Version
from cairn.common.keyorder import KeyOrder

segment = st.text(alphabet="ab/", max_size=6)


async def _stream(items: list[str]) -> AsyncIterator[str]:
    for item in items:
        await asyncio.sleep(0)
        yield item


async def _collect(streams: list[list[str]], order: KeyOrder) -> list[str]:
    merged = merge_sorted([_stream(items) for items in streams], order.encoder)
    return [item async for item in merged]


@given(
    keys=st.sets(segment, max_size=40),
    shards=st.integers(1, 5),
    order=st.sampled_from(list(KeyOrder)),
)
def test_merging_sorted_shard_streams_gives_every_key_once_in_key_order(
    keys: set[str], shards: int, order: KeyOrder
) -> None:
    by_shard: list[list[str]] = [[] for _ in range(shards)]
    for key in keys:
        by_shard[hash(key) % shards].append(key)
    streams = [sorted(items, key=order.encoder) for items in by_shard]
    merged = asyncio.run(_collect(streams, order))
    expected = sorted(keys, key=functools.cmp_to_key(order.compare))
    assert merged == expected


def _record(key: str, secondary: str | None = None) -> Record:
    return Record(key, None, Version(1, 0, 0, 0), secondary)


@given(
    found=st.sets(segment, min_size=1, max_size=10),
    asked=segment,
    comparison=st.sampled_from([Comparison.FLOOR, Comparison.LOWER]),
)
def test_floor_and_lower_keep_the_highest_answer_ceiling_and_higher_the_lowest(
    found: set[str], asked: str, comparison: Comparison
) -> None:
    encode = KeyOrder.HIERARCHICAL.encoder
    records = [_record(key) for key in found]
    highest = max(found, key=encode)
    lowest = min(found, key=encode)
    chosen_high = nearest(records, comparison, encode)
    assert chosen_high is not None and chosen_high.key == highest
    opposite = Comparison.CEILING if comparison is Comparison.FLOOR else Comparison.HIGHER
    chosen_low = nearest(records, opposite, encode)
    assert chosen_low is not None and chosen_low.key == lowest


def test_through_an_index_the_secondary_key_decides() -> None:
    encode = KeyOrder.NATURAL.encoder
    records = [_record("/z", "a"), _record("/a", "c"), _record("/m", "b")]
    floor = nearest(records, Comparison.FLOOR, encode)
    ceiling = nearest(records, Comparison.CEILING, encode)
    assert floor is not None and floor.key == "/a"
    assert ceiling is not None and ceiling.key == "/z"
    assert nearest([], Comparison.FLOOR, encode) is None
