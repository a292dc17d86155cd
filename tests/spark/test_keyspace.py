"""Key sets as range scans, and Spark's filters as key sets (pure; no Spark
session): every key a filter accepts lies in its ranges, exactly when said so."""

from __future__ import annotations

import itertools

import pytest
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    LessThanOrEqual,
    StringEndsWith,
    StringStartsWith,
)

from cairn.common.keyorder import KeyOrder
from cairn.spark.keyspace import KeyFilter, next_prefix, prefix_ranges
from cairn.spark.pushdown import push

# Every string of up to 4 of these parts: slashes, NUL, multi-byte characters.
PARTS = ["a", "b", "/", "\x00", "ab", "é", "\U0010ffff"]
KEYS = sorted({"".join(t) for n in range(1, 5) for t in itertools.product(PARTS, repeat=n)})
ORDERS = [KeyOrder.HIERARCHICAL, KeyOrder.NATURAL]


def in_ranges(ranges: list[tuple[str, str]], order: KeyOrder) -> set[str]:
    encode = order.encoder
    return {k for k in KEYS for s, e in ranges if encode(s) <= encode(k) < encode(e)}


def ordered_and_disjoint(ranges: list[tuple[str, str]], order: KeyOrder) -> bool:
    encode = order.encoder
    return all(encode(e1) <= encode(s2) for (_, e1), (s2, _) in itertools.pairwise(ranges))


def test_next_prefix() -> None:
    assert next_prefix("/a") == "/b"
    assert next_prefix("a" + chr(0xD7FF)) == "a" + chr(0xE000)  # past the surrogates
    assert next_prefix("x\U0010ffff") == "y"
    assert next_prefix("\U0010ffff") is None and next_prefix("") is None


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: o.value)
@pytest.mark.parametrize("prefix", ["", "/", "/a", "/a/", "a", "/a/b", "//", "é", "a/é", "ab/"])
def test_prefix_ranges_hold_every_key_with_the_prefix(prefix: str, order: KeyOrder) -> None:
    ranges, exact = prefix_ranges(prefix, order)
    wanted = {k for k in KEYS if k.startswith(prefix) and not k.startswith("\U0010ffff")}
    found = in_ranges(ranges, order)
    assert wanted <= found
    if exact:
        assert found - wanted <= {k for k in KEYS if k.startswith("\U0010ffff")}
    assert ordered_and_disjoint(ranges, order)


FILTERS = [
    KeyFilter(prefixes=("/a",)),
    KeyFilter(prefixes=("/a/", "/")),
    KeyFilter(low="/a", high="/b"),
    KeyFilter(low="/a/", low_inclusive=False, high="/a/b", high_inclusive=True),
    KeyFilter(low="a"),
    KeyFilter(high="/é", high_inclusive=True, prefixes=("/",)),
    KeyFilter(keys=frozenset({"/a", "/b/a", "zz"})),
    KeyFilter(keys=frozenset({"/a", "/b/a"}), prefixes=("/b",)),
]


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: o.value)
@pytest.mark.parametrize("key_filter", FILTERS, ids=repr)
def test_filter_ranges_hold_every_accepted_key(key_filter: KeyFilter, order: KeyOrder) -> None:
    ranges = key_filter.ranges(order)
    accepted = {k for k in KEYS if key_filter.accepts(k) and not k.startswith("\U0010ffff")}
    assert accepted <= in_ranges(ranges, order)
    assert ordered_and_disjoint(ranges, order)


def test_point_ranges_hold_exactly_their_keys() -> None:
    key_filter = KeyFilter(keys=frozenset({"/a", "/a/b", "ab"}))
    for order in ORDERS:
        assert in_ranges(key_filter.ranges(order), order) == {"/a", "/a/b", "ab"}


def test_spark_filters_that_are_pushed_and_those_left_to_spark() -> None:
    taken = [
        StringStartsWith(("key",), "/a/"),
        GreaterThanOrEqual(("key",), "/a/b"),
        GreaterThan(("key",), "/a/a"),
        LessThan(("key",), "/a/z"),
        LessThanOrEqual(("key",), "/a/y"),
        In(("key",), ("/a/c", "/a/d", "/q")),
        EqualTo(("shard",), 2),
        In(("shard",), (1, 2)),
    ]
    left = [
        StringEndsWith(("key",), "x"),
        IsNull(("key",)),
        EqualTo(("value",), b"x"),
        EqualTo(("key",), 3),
        GreaterThan(("shard",), 1),
    ]
    pushed, rejected = push(taken + left)
    assert rejected == left
    assert pushed.shards == frozenset({2})
    keys = pushed.keys
    assert keys.keys == frozenset({"/a/c", "/a/d", "/q"})
    assert (keys.low, keys.low_inclusive, keys.high, keys.high_inclusive) == (
        "/a/b",
        True,
        "/a/y",
        True,
    )
    assert [k for k in ["/a/c", "/a/d", "/q", "/a/b"] if keys.accepts(k)] == ["/a/c", "/a/d"]
