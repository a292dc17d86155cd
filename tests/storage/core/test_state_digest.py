"""The state digest the audit compares replicas by: equal for equal records, and
different for any one key or value changed, removed or added, including changes
that would cancel out in a sum or collide without length framing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.storage.core.state_digest import DigestBuilder, digest_of

items = st.dictionaries(st.binary(min_size=1, max_size=8), st.binary(max_size=8), max_size=20)


def ordered(records: dict[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    return sorted(records.items())


@given(items)
def test_equal_records_give_equal_digests(records: dict[bytes, bytes]) -> None:
    assert digest_of(ordered(records)) == digest_of(ordered(dict(records)))
    assert digest_of(ordered(records)).records == len(records)


@given(items, st.binary(min_size=1, max_size=8), st.binary(max_size=8))
def test_any_one_change_changes_the_digest(
    records: dict[bytes, bytes], key: bytes, value: bytes
) -> None:
    changed = {**records, key: value}
    if changed != records:
        assert digest_of(ordered(changed)) != digest_of(ordered(records))
    if records:
        first = next(iter(records))
        removed = {k: v for k, v in records.items() if k != first}
        assert digest_of(ordered(removed)) != digest_of(ordered(records))


def test_framing_tells_key_and_value_bytes_apart() -> None:
    assert digest_of([(b"ab", b"c")]) != digest_of([(b"a", b"bc")])
    assert digest_of([(b"a", b""), (b"b", b"")]) != digest_of([(b"a", b"\x00"), (b"b", b"")])


def test_items_out_of_key_order_are_a_programmer_error() -> None:
    builder = DigestBuilder()
    builder.add(b"b", b"")
    with pytest.raises(AssertionError, match="order"):
        builder.add(b"a", b"")
