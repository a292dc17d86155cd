import itertools

import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.common.hashing import (
    HASH_SPACE_MAX,
    MAX_SHARDS_PER_NAMESPACE,
    HashRange,
    KeyHash,
    find_range,
    key_hash,
    split_hash_space,
)


def test_key_hash_is_low_32_bits_of_xxh3_64_seed_0() -> None:
    # Known vector: XXH3-64 of the empty input with seed 0.
    assert xxhash.xxh3_64_intdigest(b"") == 0x2D06800538D394C2
    assert key_hash("") == 0x38D394C2
    assert key_hash("/a/b") == xxhash.xxh3_64_intdigest(b"/a/b") & 0xFFFFFFFF


def test_reference_split_of_three_shards() -> None:
    ranges = split_hash_space(3)
    bucket = 0xFFFFFFFF // 3 + 1
    assert ranges == [
        HashRange(0, bucket - 1),
        HashRange(bucket, 2 * bucket - 1),
        HashRange(2 * bucket, 0xFFFFFFFF),
    ]


# Large shard counts build tens of thousands of ranges: no per-example deadline.
@settings(deadline=None, max_examples=60)
@given(st.integers(min_value=1, max_value=MAX_SHARDS_PER_NAMESPACE))
def test_ranges_cover_the_space_exactly_once(shard_count: int) -> None:
    ranges = split_hash_space(shard_count)
    assert len(ranges) == shard_count
    assert ranges[0].min_inclusive == 0
    assert ranges[-1].max_inclusive == HASH_SPACE_MAX
    for previous, current in itertools.pairwise(ranges):
        assert current.min_inclusive == previous.max_inclusive + 1
    assert sum(r.max_inclusive - r.min_inclusive + 1 for r in ranges) == HASH_SPACE_MAX + 1


@settings(deadline=None, max_examples=60)
@given(
    st.integers(min_value=1, max_value=MAX_SHARDS_PER_NAMESPACE),
    st.integers(min_value=0, max_value=HASH_SPACE_MAX),
)
def test_every_hash_lands_in_exactly_one_range(shard_count: int, value: int) -> None:
    ranges = split_hash_space(shard_count)
    index = find_range(ranges, value)
    assert [i for i, r in enumerate(ranges) if r.contains(value)] == [index]


def test_invalid_shard_counts_are_rejected() -> None:
    for bad in (0, -1, MAX_SHARDS_PER_NAMESPACE + 1):
        try:
            split_hash_space(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad} accepted")


def test_the_xxh64_mode_hashes_as_the_oxia_python_client_does() -> None:
    # oxia 0.2.1 (internal/service_discovery.py): xxhash.xxh64(key).intdigest() & 0xFFFFFFFF
    for key in ("/a", "/pulsar/brokers/b1", "é/ü", ""):
        expected = xxhash.xxh64(key.encode()).intdigest() & 0xFFFFFFFF
        assert KeyHash.XXH64(key) == expected
        assert KeyHash.XXH3(key) == key_hash(key)
    assert KeyHash("xxh64") is KeyHash.XXH64
