"""What each operation is: read or write, which key, when (open loop). Pure: the
randomness comes in as a `random.Random`, time as plain floats."""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass


class Kind(enum.Enum):
    PUT = "put"
    GET = "get"


@dataclass(frozen=True, slots=True)
class KeySpace:
    """`count` keys: `prefix` + a number zero-padded to one width, so that their
    order as strings (natural or hierarchical, within one segment) is numeric."""

    prefix: str
    count: int

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError("a key space needs at least one key")

    @property
    def width(self) -> int:
        return len(str(self.count - 1))

    def key(self, index: int) -> str:
        if not 0 <= index < self.count:
            raise IndexError(f"key index {index} outside [0, {self.count})")
        return f"{self.prefix}{index:0{self.width}d}"

    def keys(self) -> Iterator[str]:
        for index in range(self.count):
            yield self.key(index)


class Workload:
    """One caller's stream of operations: a get with probability `read_ratio`,
    else a put, on a key chosen uniformly from the key space."""

    __slots__ = ("_format", "_keys", "_random", "count", "read_ratio")

    def __init__(
        self,
        keys: KeySpace,
        read_ratio: float,
        rng: random.Random,
        formatted: list[str] | None = None,
    ) -> None:
        """`formatted`: the key space's keys, formatted already (formatted_keys)."""
        if not 0.0 <= read_ratio <= 1.0:
            raise ValueError("read_ratio must be within [0, 1]")
        self.read_ratio = read_ratio
        self.count = keys.count
        # Looked up once: this runs per operation, in the same process as the client
        # it measures. `random() * count` is one C call where randrange is several
        # Python ones; its bias is below 2**-53 * count, nothing next to 1/count.
        self._random = rng.random
        self._format = f"{keys.prefix}{{:0{keys.width}d}}".format
        if formatted is not None and len(formatted) != keys.count:
            raise ValueError("the formatted keys do not match the key space")
        self._keys = formatted

    def next(self) -> tuple[Kind, str]:
        ratio = self.read_ratio
        if ratio <= 0.0:
            kind = Kind.PUT
        elif ratio >= 1.0:
            kind = Kind.GET
        else:
            kind = Kind.GET if self._random() < ratio else Kind.PUT
        index = int(self._random() * self.count)
        keys = self._keys
        return kind, keys[index] if keys is not None else self._format(index)


# Key spaces up to this many keys are kept formatted in memory (a few MB), which
# saves formatting a key per operation; larger ones are formatted as chosen.
MAX_CACHED_KEYS = 100_000


def formatted_keys(keys: KeySpace) -> list[str] | None:
    """Every key of a small key space (None for a large one), for the callers to share."""
    if keys.count > MAX_CACHED_KEYS:
        return None
    return list(keys.keys())


def caller_random(seed: int, caller: int) -> random.Random:
    """Each caller's own generator: a run is reproducible whatever the interleaving."""
    return random.Random(f"{seed}/{caller}")


class RateSchedule:
    """Fixed-rate start times shared by the callers: slot i starts at
    `first_s + i / rate_ops_s`. A caller takes the next slot when it is free, so
    slots that no caller was free for pile up and their operations start late;
    their latency counts from the slot's time."""

    __slots__ = ("_next_index", "first_s", "interval_s")

    def __init__(self, first_s: float, rate_ops_s: float) -> None:
        if rate_ops_s <= 0:
            raise ValueError("a schedule needs a positive rate")
        self.first_s = first_s
        self.interval_s = 1.0 / rate_ops_s
        self._next_index = 0

    @property
    def taken(self) -> int:
        return self._next_index

    def peek(self) -> float:
        """The next slot's time, without taking it."""
        return self.first_s + self._next_index * self.interval_s

    def take(self) -> float:
        at_s = self.first_s + self._next_index * self.interval_s
        self._next_index += 1
        return at_s

    def count_before(self, end_s: float) -> int:
        """Slots not taken yet that start before `end_s`."""
        total = max(0, math.ceil((end_s - self.first_s) / self.interval_s))
        # The division may round either way at the edge; settle it with the same
        # arithmetic `take` uses, so a slot is before `end_s` here exactly when a
        # caller would have run it.
        while total > 0 and self.first_s + (total - 1) * self.interval_s >= end_s:
            total -= 1
        while self.first_s + total * self.interval_s < end_s:
            total += 1
        return max(0, total - self._next_index)
