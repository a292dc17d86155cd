"""A log-linear latency histogram, in the manner of HdrHistogram.

Values are recorded in integer nanoseconds (the API speaks microseconds). Below
`2**PRECISION_BITS` ns every value has its own bucket (exact). Above, each
power-of-two range `[2**b, 2**(b+1))` is split into `2**(PRECISION_BITS - 1)`
equal buckets, so a bucket is at most `1/2**(PRECISION_BITS-1)` of its lower
bound wide. A percentile is reported as the midpoint of the bucket holding the
nearest-rank sample, clamped to the exact recorded min and max: relative error
at most `1/2**PRECISION_BITS` (0.4% with 8 bits), well under the 1% asked for.

Memory is bounded: the bucket index of any 64-bit value is below
`(64 - PRECISION_BITS + 2) * 2**(PRECISION_BITS-1)` (about 7,400 buckets), and
buckets are allocated only up to the largest value seen. Histograms of equal
precision merge by adding bucket counts, and travel between processes as a
small JSON-able dict of the non-empty buckets.
"""

from __future__ import annotations

import math
from typing import Any

PRECISION_BITS = 8
_LINEAR_LIMIT = 1 << PRECISION_BITS  # values below this are exact
_HALF = 1 << (PRECISION_BITS - 1)  # sub-buckets per power of two above the linear range
MAX_VALUE_NS = (1 << 63) - 1  # larger values are clamped (and counted as clamped)
NS_PER_US = 1000.0


def bucket_index(value_ns: int) -> int:
    """The bucket holding `value_ns` (0 <= value_ns <= MAX_VALUE_NS)."""
    if value_ns < _LINEAR_LIMIT:
        return value_ns
    shift = value_ns.bit_length() - PRECISION_BITS
    return shift * _HALF + (value_ns >> shift)


def bucket_bounds(index: int) -> tuple[int, int]:
    """The inclusive range of nanosecond values that `bucket_index` maps to `index`."""
    if index < _LINEAR_LIMIT:
        return index, index
    shift = index // _HALF - 1
    top = index - shift * _HALF  # the value's top PRECISION_BITS bits, in [_HALF, _LINEAR_LIMIT)
    low = top << shift
    return low, low + (1 << shift) - 1


class Histogram:
    """Latency samples in log-linear buckets; mergeable, bounded, percentiles within 0.4%."""

    __slots__ = ("_counts", "clamped_count", "count", "max_ns", "min_ns", "sum_ns")

    def __init__(self) -> None:
        self._counts: list[int] = []
        self.count = 0
        self.sum_ns = 0
        self.min_ns = 0
        self.max_ns = 0
        self.clamped_count = 0

    def record_ns(self, value_ns: int) -> None:
        """Record one sample; negative values count as 0, huge ones as MAX_VALUE_NS."""
        if value_ns < 0:
            value_ns = 0
        elif value_ns > MAX_VALUE_NS:
            value_ns = MAX_VALUE_NS
            self.clamped_count += 1
        index = bucket_index(value_ns)
        counts = self._counts
        if index >= len(counts):
            counts.extend([0] * (index + 1 - len(counts)))
        counts[index] += 1
        if self.count == 0:
            self.min_ns = self.max_ns = value_ns
        elif value_ns < self.min_ns:
            self.min_ns = value_ns
        elif value_ns > self.max_ns:
            self.max_ns = value_ns
        self.count += 1
        self.sum_ns += value_ns

    def record_us(self, value_us: float) -> None:
        self.record_ns(round(value_us * NS_PER_US))

    def record_s(self, value_s: float) -> None:
        self.record_ns(round(value_s * 1e9))

    def merge(self, other: Histogram) -> None:
        """Add every sample of `other` to this histogram."""
        if other.count == 0:
            return
        counts = self._counts
        if len(other._counts) > len(counts):
            counts.extend([0] * (len(other._counts) - len(counts)))
        for index, n in enumerate(other._counts):
            if n:
                counts[index] += n
        if self.count == 0:
            self.min_ns, self.max_ns = other.min_ns, other.max_ns
        else:
            self.min_ns = min(self.min_ns, other.min_ns)
            self.max_ns = max(self.max_ns, other.max_ns)
        self.count += other.count
        self.sum_ns += other.sum_ns
        self.clamped_count += other.clamped_count

    def percentile_ns(self, percent: float) -> float:
        """The nearest-rank percentile (0 < percent <= 100); 0.0 when empty."""
        if not 0.0 <= percent <= 100.0:
            raise ValueError(f"percentile must be within [0, 100], got {percent}")
        if self.count == 0:
            return 0.0
        if percent >= 100.0:
            return float(self.max_ns)
        rank = max(1, math.ceil(percent / 100.0 * self.count))
        seen = 0
        for index, n in enumerate(self._counts):
            seen += n
            if seen >= rank:
                low, high = bucket_bounds(index)
                middle = (low + high) / 2.0
                return min(max(middle, float(self.min_ns)), float(self.max_ns))
        raise AssertionError("bucket counts do not add up to count")

    def percentile_us(self, percent: float) -> float:
        return self.percentile_ns(percent) / NS_PER_US

    def percentile_ms(self, percent: float) -> float:
        return self.percentile_ns(percent) / 1e6

    @property
    def mean_ns(self) -> float:
        return self.sum_ns / self.count if self.count else 0.0

    @property
    def bucket_count(self) -> int:
        """Buckets allocated so far (memory in use is proportional to this)."""
        return len(self._counts)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form holding only the non-empty buckets."""
        return {
            "precision_bits": PRECISION_BITS,
            "count": self.count,
            "sum_ns": self.sum_ns,
            "min_ns": self.min_ns,
            "max_ns": self.max_ns,
            "clamped_count": self.clamped_count,
            "buckets": {str(i): n for i, n in enumerate(self._counts) if n},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Histogram:
        if data["precision_bits"] != PRECISION_BITS:
            raise ValueError(
                f"histogram precision {data['precision_bits']} bits, expected {PRECISION_BITS}"
            )
        histogram = cls()
        buckets = {int(i): int(n) for i, n in data["buckets"].items()}
        if buckets:
            counts = [0] * (max(buckets) + 1)
            for index, n in buckets.items():
                counts[index] = n
            histogram._counts = counts
        histogram.count = int(data["count"])
        histogram.sum_ns = int(data["sum_ns"])
        histogram.min_ns = int(data["min_ns"])
        histogram.max_ns = int(data["max_ns"])
        histogram.clamped_count = int(data["clamped_count"])
        if sum(buckets.values()) != histogram.count:
            raise ValueError("histogram bucket counts do not add up to its count")
        return histogram
