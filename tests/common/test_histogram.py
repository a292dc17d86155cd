from __future__ import annotations

import json
import math
import random

import pytest

from cairn.common.histogram import (
    MAX_VALUE_NS,
    Histogram,
    bucket_bounds,
    bucket_index,
)

PERCENTS = (1.0, 10.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0)
RELATIVE_ERROR_BOUND = 0.01


def exact_percentile(sorted_values: list[int], percent: float) -> int:
    rank = max(1, math.ceil(percent / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def assert_within_bound(histogram: Histogram, values: list[int]) -> None:
    ordered = sorted(values)
    for percent in PERCENTS:
        exact = exact_percentile(ordered, percent)
        approx = histogram.percentile_ns(percent)
        assert abs(approx - exact) <= RELATIVE_ERROR_BOUND * exact, (percent, exact, approx)


def test_bucket_index_and_bounds_agree() -> None:
    previous_high = -1
    for index in range(5000):
        low, high = bucket_bounds(index)
        assert low == previous_high + 1, "buckets must tile the value space without gaps"
        assert bucket_index(low) == index
        assert bucket_index(high) == index
        if low < 256:
            assert low == high == index  # the linear range is exact
        else:
            assert (high - low + 1) / low <= 1 / 128
        previous_high = high


def test_huge_values_are_bounded() -> None:
    index = bucket_index(MAX_VALUE_NS)
    assert index < 8000
    low, high = bucket_bounds(index)
    assert low <= MAX_VALUE_NS <= high
    histogram = Histogram()
    histogram.record_ns(MAX_VALUE_NS * 4)
    assert histogram.clamped_count == 1
    assert histogram.max_ns == MAX_VALUE_NS


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_percentiles_match_exact_within_one_percent(seed: int) -> None:
    rng = random.Random(seed)
    # Latency-like: a lognormal body around 300 us with a heavy tail up to seconds.
    values = [int(rng.lognormvariate(math.log(300_000), 1.2)) for _ in range(50_000)]
    values += [rng.randrange(0, 300) for _ in range(500)]  # exact linear range too
    histogram = Histogram()
    for value in values:
        histogram.record_ns(value)
    assert histogram.count == len(values)
    assert histogram.min_ns == min(values)
    assert histogram.max_ns == max(values)
    assert histogram.sum_ns == sum(values)
    assert_within_bound(histogram, values)


def test_microsecond_api() -> None:
    histogram = Histogram()
    for value_us in (100.0, 200.0, 300.0, 400.0):
        histogram.record_us(value_us)
    assert histogram.percentile_us(50) == pytest.approx(200.0, rel=0.01)
    assert histogram.percentile_ms(100) == pytest.approx(0.4)
    assert histogram.mean_ns == pytest.approx(250_000)


def test_small_values_are_exact() -> None:
    histogram = Histogram()
    for value in range(256):
        histogram.record_ns(value)
    assert histogram.percentile_ns(50) == 127
    assert histogram.percentile_ns(100) == 255


def test_merge_equals_recording_everything_in_one() -> None:
    rng = random.Random(7)
    parts = [[rng.randrange(1, 10**9) for _ in range(3000)] for _ in range(4)]
    merged = Histogram()
    whole = Histogram()
    for part in parts:
        histogram = Histogram()
        for value in part:
            histogram.record_ns(value)
            whole.record_ns(value)
        merged.merge(histogram)
    merged.merge(Histogram())  # merging an empty histogram changes nothing
    assert merged.to_dict() == whole.to_dict()
    assert_within_bound(merged, [v for part in parts for v in part])


def test_merge_into_empty_takes_min_and_max() -> None:
    source = Histogram()
    source.record_ns(5_000)
    source.record_ns(9_000)
    target = Histogram()
    target.merge(source)
    assert (target.min_ns, target.max_ns, target.count) == (5_000, 9_000, 2)


def test_roundtrip_through_json() -> None:
    histogram = Histogram()
    for value in (1, 1000, 123_456, 10**10):
        histogram.record_ns(value)
    restored = Histogram.from_dict(json.loads(json.dumps(histogram.to_dict())))
    assert restored.to_dict() == histogram.to_dict()
    for percent in PERCENTS:
        assert restored.percentile_ns(percent) == histogram.percentile_ns(percent)


def test_from_dict_rejects_inconsistent_data() -> None:
    data = Histogram().to_dict()
    data["count"] = 3
    with pytest.raises(ValueError, match="add up"):
        Histogram.from_dict(data)
    data = Histogram().to_dict()
    data["precision_bits"] = 5
    with pytest.raises(ValueError, match="precision"):
        Histogram.from_dict(data)


def test_empty_histogram() -> None:
    histogram = Histogram()
    assert histogram.count == 0
    assert histogram.percentile_ns(50) == 0.0
    assert histogram.percentile_ms(99.9) == 0.0
    assert histogram.mean_ns == 0.0
    assert histogram.bucket_count == 0
    assert Histogram.from_dict(histogram.to_dict()).count == 0


def test_negative_values_count_as_zero_and_bad_percentiles_raise() -> None:
    histogram = Histogram()
    histogram.record_ns(-5)
    assert histogram.min_ns == 0
    with pytest.raises(ValueError, match="percentile"):
        histogram.percentile_ns(101)
