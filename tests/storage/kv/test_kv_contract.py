"""One contract, every KvStore: the RocksDB store against the in-memory one and a
sorted model, with keys in hierarchical-order encoding."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cairn.common.keyorder import KeyOrder, compare_hierarchical
from cairn.storage.kv import Column, KvStore, MemoryKv, RocksKv
from cairn.storage.kv.encoded_changes import EncodedChangesError, encode_changes

ORDER = KeyOrder.HIERARCHICAL
keys = st.text(alphabet=st.sampled_from(["a", "b", "/", "\x00", "z"]), max_size=8)
values = st.binary(max_size=16)


@pytest.fixture(params=["memory", "rocksdb"])
def store_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[], KvStore]]:
    opened: list[KvStore] = []

    def make() -> KvStore:
        store: KvStore = (
            MemoryKv() if request.param == "memory" else RocksKv(tmp_path / f"db-{len(opened)}")
        )
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def _sorted(items: dict[str, bytes]) -> list[tuple[str, bytes]]:
    cmp = functools.cmp_to_key(lambda a, b: compare_hierarchical(a.encode(), b.encode()))
    return sorted(items.items(), key=lambda item: cmp(item[0]))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    writes=st.lists(st.tuples(keys, st.one_of(st.none(), values)), max_size=40),
    probe=keys,
    bounds=st.tuples(keys, keys),
    probes=st.lists(keys, max_size=8),
)
# Found by this test: rocksdict's iterate_upper_bound ended this scan after "a".
@example(writes=[("a", b""), ("aa", b"")], probe="", bounds=("", "/"), probes=[])
def test_store_matches_sorted_model(
    store_factory: Callable[[], KvStore],
    writes: list[tuple[str, bytes | None]],
    probe: str,
    bounds: tuple[str, str],
    probes: list[str],
) -> None:
    store = store_factory()
    model: dict[str, bytes] = {}
    for key, value in writes:
        store.write([(Column.RECORDS, ORDER.encode(key), value)])
        if value is None:
            model.pop(key, None)
        else:
            model[key] = value
    # internal state never mixes with records
    store.write([(Column.META, ORDER.encode(probe), b"internal")])

    ordered = _sorted(model)
    start, end = bounds
    expected_scan = [
        (k, v)
        for k, v in ordered
        if compare_hierarchical(start.encode(), k.encode())
        <= 0
        < compare_hierarchical(end.encode(), k.encode())
    ]
    scanned = [
        (ORDER.decode(k), v)
        for k, v in store.scan(Column.RECORDS, ORDER.encode(start), ORDER.encode(end))
    ]
    assert scanned == expected_scan
    assert [ORDER.decode(k) for k, _ in store.scan(Column.RECORDS, b"", None)] == [
        k for k, _ in ordered
    ]

    def cmp(a: str, b: str) -> int:
        return compare_hierarchical(a.encode(), b.encode())

    floor = [k for k, _ in ordered if cmp(k, probe) <= 0]
    lower = [k for k, _ in ordered if cmp(k, probe) < 0]
    ceiling = [k for k, _ in ordered if cmp(k, probe) >= 0]
    higher = [k for k, _ in ordered if cmp(k, probe) > 0]
    encoded = ORDER.encode(probe)

    def found(item: tuple[bytes, bytes] | None) -> str | None:
        return None if item is None else ORDER.decode(item[0])

    assert found(store.floor(Column.RECORDS, encoded, inclusive=True)) == (
        floor[-1] if floor else None
    )
    assert found(store.floor(Column.RECORDS, encoded, inclusive=False)) == (
        lower[-1] if lower else None
    )
    assert found(store.ceiling(Column.RECORDS, encoded, inclusive=True)) == (
        ceiling[0] if ceiling else None
    )
    assert found(store.ceiling(Column.RECORDS, encoded, inclusive=False)) == (
        higher[0] if higher else None
    )
    assert store.get(Column.RECORDS, encoded) == model.get(probe)
    # Many at once (the probe's internal entry is in the other column), in order,
    # repeats and absent keys included.
    many = [*probes, probe, probe]
    assert store.get_many(Column.RECORDS, [ORDER.encode(key) for key in many]) == [
        model.get(key) for key in many
    ]
    assert store.get_many(Column.META, [encoded]) == [b"internal"]
    assert store.get_many(Column.RECORDS, []) == []


def test_batches_are_atomic_across_columns_and_survive_reopen(tmp_path: Path) -> None:
    store = RocksKv(tmp_path / "db")
    store.write([(Column.RECORDS, b"\x01k", b"v"), (Column.META, b"commit_offset", b"7")])
    store.close()
    reopened = RocksKv(tmp_path / "db")
    try:
        assert reopened.get(Column.RECORDS, b"\x01k") == b"v"
        assert reopened.get(Column.META, b"commit_offset") == b"7"
        assert reopened.get(Column.RECORDS, b"commit_offset") is None
    finally:
        reopened.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(
        st.tuples(
            st.dictionaries(keys, st.one_of(st.none(), values), max_size=12),
            st.dictionaries(keys, st.one_of(st.none(), values), max_size=4),
        ),
        max_size=8,
    )
)
def test_unlogged_batches_per_column_put_and_delete_like_the_model(
    store_factory: Callable[[], KvStore],
    batches: list[tuple[dict[str, bytes | None], dict[str, bytes | None]]],
) -> None:
    """The apply step's write: one dict per column, None deleting a key; each column
    ends as its own model, and the same key in both columns stays two keys."""
    store = store_factory()
    models: dict[Column, dict[bytes, bytes]] = {Column.RECORDS: {}, Column.META: {}}
    for records, meta in batches:
        changes = {
            Column.RECORDS: {ORDER.encode(key): value for key, value in records.items()},
            Column.META: {ORDER.encode(key): value for key, value in meta.items()},
        }
        store.write_unlogged(changes)
        for column, items in changes.items():
            for key, value in items.items():
                if value is None:
                    models[column].pop(key, None)
                else:
                    models[column][key] = value
    for column, model in models.items():
        assert list(store.scan(column, b"", None)) == sorted(model.items())


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(
        st.tuples(
            st.dictionaries(keys, st.one_of(st.none(), values), max_size=6),
            st.dictionaries(keys, st.one_of(st.none(), values), max_size=6),
        ),
        max_size=6,
    )
)
def test_encoded_batches_write_what_the_same_changes_write_unencoded(
    store_factory: Callable[[], KvStore],
    batches: list[tuple[dict[str, bytes | None], dict[str, bytes | None]]],
) -> None:
    """A follower writes its leader's applied changes in their encoded form: the
    store must end exactly as the leader's, which wrote them as dicts."""
    leader, follower = store_factory(), store_factory()
    for records, meta in batches:
        changes = {
            Column.RECORDS: {ORDER.encode(key): value for key, value in records.items()},
            Column.META: {ORDER.encode(key): value for key, value in meta.items()},
        }
        leader.write_unlogged(changes)
        follower.write_encoded_unlogged(encode_changes(changes))
    for column in Column:
        assert list(follower.scan(column, b"", None)) == list(leader.scan(column, b"", None))


@pytest.mark.parametrize("cut", [1, 5, 9, 10, 12])
def test_cut_or_unknown_encoded_changes_write_nothing(
    store_factory: Callable[[], KvStore], cut: int
) -> None:
    """Bytes that end inside a change, or carry flags no writer sets, raise and leave
    the store as it was: the follower then applies its entries itself."""
    store = store_factory()
    store.write_unlogged({Column.RECORDS: {b"kept": b"old"}})
    good = encode_changes({Column.RECORDS: {b"kept": b"new", b"other": b"x"}})
    with pytest.raises(EncodedChangesError):
        store.write_encoded_unlogged(good + good[:cut])
    unknown_flags = bytes((0x80,)) + good[1:]
    with pytest.raises(EncodedChangesError):
        store.write_encoded_unlogged(unknown_flags)
    assert list(store.scan(Column.RECORDS, b"", None)) == [(b"kept", b"old")]


def test_scan_reads_the_view_at_its_creation(store_factory: Callable[[], KvStore]) -> None:
    store = store_factory()
    store.write([(Column.RECORDS, bytes([1, i]), b"old") for i in range(10)])
    iterator = store.scan(Column.RECORDS, b"", None)
    store.write([(Column.RECORDS, bytes([1, i]), None) for i in range(10)])
    store.write([(Column.RECORDS, b"\x01\xff", b"new")])
    assert [v for _, v in iterator] == [b"old"] * 10
