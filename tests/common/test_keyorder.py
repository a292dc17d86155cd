import functools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.common.keyorder import KeyOrder, compare_hierarchical, encode_hierarchical

# Keys built from a small alphabet with many slashes and NULs, so that the
# interesting cases (shared prefixes, empty segments, trailing slashes) are common.
keys = st.text(alphabet=st.sampled_from(["a", "b", "/", "\x00", "\x01", "é", "~"]), max_size=12)


def _client_compare(a: str, b: str) -> int:
    """The comparator of the `oxia` Python client (compare_with_slash), restated."""
    while a and b:
        ia, ib = a.find("/"), b.find("/")
        if ia < 0 and ib < 0:
            return (a > b) - (a < b)
        if ia < 0:
            return -1
        if ib < 0:
            return 1
        sa, sb = a[:ia], b[:ib]
        if sa != sb:
            return (sa > sb) - (sa < sb)
        a, b = a[ia + 1 :], b[ib + 1 :]
    return (len(a) > len(b)) - (len(a) < len(b))


@pytest.mark.parametrize("order", list(KeyOrder))
@given(key=keys)
def test_encoding_round_trips(order: KeyOrder, key: str) -> None:
    assert order.decode(order.encode(key)) == key


@given(key=st.one_of(keys, st.text()))
def test_key_encoder_equals_the_bytes_encoding(key: str) -> None:
    assert KeyOrder.HIERARCHICAL.encode(key) == encode_hierarchical(key.encode("utf-8"))


@given(a=keys, b=keys)
def test_hierarchical_encoding_preserves_the_client_order(a: str, b: str) -> None:
    expected = _client_compare(a, b)
    ea, eb = KeyOrder.HIERARCHICAL.encode(a), KeyOrder.HIERARCHICAL.encode(b)
    assert ((ea > eb) - (ea < eb)) == expected
    assert compare_hierarchical(a.encode(), b.encode()) == expected


@given(st.lists(keys, max_size=30))
def test_sorting_by_encoding_equals_sorting_by_comparator(items: list[str]) -> None:
    by_encoding = sorted(items, key=KeyOrder.HIERARCHICAL.encode)
    by_comparator = sorted(items, key=functools.cmp_to_key(_client_compare))
    assert by_encoding == by_comparator


def test_children_range_holds_exactly_the_children() -> None:
    stored = ["/a", "/a/x", "/a/y", "/a/x/deep", "/b/c", "/a/", "/ab/x", "/a//z", "z"]
    order = KeyOrder.HIERARCHICAL
    low, high = order.encode("/a/"), order.encode("/a//")
    inside = sorted(k for k in stored if low <= order.encode(k) < high)
    assert inside == ["/a/", "/a/x", "/a/y"]


def test_natural_order_is_bytewise() -> None:
    order = KeyOrder.NATURAL
    assert sorted(["b", "a/z", "a", "/"], key=order.encode) == ["/", "a", "a/z", "b"]


def _in_ranges(encoded: bytes, ranges: tuple[tuple[bytes, bytes | None], ...]) -> bool:
    return any(start <= encoded and (end is None or encoded < end) for start, end in ranges)


@pytest.mark.parametrize("order", list(KeyOrder))
@given(prefix=keys, key=keys)
def test_prefix_ranges_hold_exactly_the_keys_with_the_prefix(
    order: KeyOrder, prefix: str, key: str
) -> None:
    ranges = order.prefix_ranges(prefix)
    assert _in_ranges(order.encode(key), ranges) == key.startswith(prefix)
    assert _in_ranges(order.encode(prefix + key), ranges)


def test_prefix_ranges_of_a_directory() -> None:
    order = KeyOrder.HIERARCHICAL
    ranges = order.prefix_ranges("/a/")
    inside = ["/a/", "/a/b", "/a/b/c", "/a//x"]
    outside = ["/a", "/ab", "/b/a/", "a/", "/"]
    assert all(_in_ranges(order.encode(k), ranges) for k in inside)
    assert not any(_in_ranges(order.encode(k), ranges) for k in outside)
    assert KeyOrder.NATURAL.prefix_ranges("") == ((b"", None),)
