"""A simulated network: messages in flight, with faults drawn from the seed.

A message is delivered after a delay of some steps, or dropped, or delivered twice
(except the at-most-once coordination calls), and messages overtake each other.
A partition cuts a set of nodes off from the rest for a while (both ways; also
what is in flight when it starts). A message travels on a connection to one
incarnation of its destination: once that node crashes, what was on its way to
it is gone, as with TCP; a restarted node never sees a message sent to its
previous life. Every queue is bounded.

A replication stream (the messages naming one `session`) is one gRPC stream:
once one of its messages is lost (dropped, cut off, or gone with a crashed
node), it delivers nothing more, as a broken stream would not; the leader then
notices the silence and opens another. (Without this, a lost batch of entries
followed only by heartbeats would leave the stream waiting forever for
acknowledgements of entries that never arrived.)
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from simulation import messages as m
from simulation.messages import AT_MOST_ONCE, Body

STREAM_MESSAGES = (
    m.Replicate,
    m.ReplicateResponse,
    m.SendSnapshot,
    m.SnapshotResponse,
    m.StreamBroken,
    m.TruncateResponse,
)


def stream_of(body: Body) -> int | None:
    return body.session if isinstance(body, STREAM_MESSAGES) else None


@dataclass(frozen=True, slots=True)
class NetworkFaults:
    drop_probability: float = 0.02
    duplicate_probability: float = 0.02
    min_delay_steps: int = 1
    max_delay_steps: int = 3
    # Now and then a message is held much longer (a slow link, a GC pause): the
    # main source of reordering and of stale messages.
    long_delay_probability: float = 0.03
    max_long_delay_steps: int = 40

    @classmethod
    def none(cls) -> NetworkFaults:
        return cls(0.0, 0.0, 1, 1, 0.0, 1)


@dataclass(frozen=True, slots=True)
class Envelope:
    src: str
    dst: str
    dst_incarnation: int
    body: Body
    sent_step: int


@dataclass(frozen=True, slots=True)
class Partition:
    nodes: frozenset[str]
    until_step: int


@dataclass
class NetworkStats:
    sent: int = 0
    delivered: int = 0
    dropped: int = 0
    duplicated: int = 0
    overflowed: int = 0


@dataclass
class Network:
    rng: random.Random
    faults: NetworkFaults
    max_in_flight: int = 4000
    max_deliveries_per_step: int = 400
    stats: NetworkStats = field(default_factory=NetworkStats)
    # node -> its current incarnation, while it is up.
    incarnations: dict[str, int] = field(default_factory=dict)
    partitions: list[Partition] = field(default_factory=list)
    _queue: list[tuple[int, int, Envelope]] = field(default_factory=list)
    _sequence: int = 0
    _last_session: int = 0
    # Streams that lost a message: they deliver nothing more.
    broken_streams: set[int] = field(default_factory=set)

    # -- nodes and partitions ----------------------------------------------------------

    def up(self, node: str, incarnation: int) -> None:
        self.incarnations[node] = incarnation

    def down(self, node: str) -> None:
        self.incarnations.pop(node, None)

    def is_up(self, node: str) -> bool:
        return node in self.incarnations

    def cut(self, a: str, b: str) -> bool:
        return any((a in p.nodes) != (b in p.nodes) for p in self.partitions)

    def partition(self, nodes: frozenset[str], until_step: int) -> None:
        self.partitions.append(Partition(nodes, until_step))

    def heal(self, now: int | None = None) -> None:
        """End every partition (or those over by `now`)."""
        self.partitions = [] if now is None else [p for p in self.partitions if p.until_step > now]

    def new_session(self) -> int:
        self._last_session += 1
        return self._last_session

    # -- messages ----------------------------------------------------------------------

    def send(self, src: str, dst: str, body: Body, now: int) -> None:
        self.stats.sent += 1
        incarnation = self.incarnations.get(dst)
        stream = stream_of(body)
        if (
            incarnation is None
            or self.cut(src, dst)
            or stream in self.broken_streams
            or self._chance(self.faults.drop_probability)
        ):
            self.stats.dropped += 1
            if stream is not None:
                self.broken_streams.add(stream)
            return
        copies = 1
        if not isinstance(body, AT_MOST_ONCE) and self._chance(self.faults.duplicate_probability):
            copies = 2
            self.stats.duplicated += 1
        for _ in range(copies):
            if len(self._queue) >= self.max_in_flight:
                self.stats.overflowed += 1
                if stream is not None:
                    self.broken_streams.add(stream)
                return
            self._sequence += 1
            envelope = Envelope(src, dst, incarnation, body, now)
            heapq.heappush(self._queue, (now + self._delay(), self._sequence, envelope))

    def due(self, now: int) -> Iterator[Envelope]:
        """The messages to deliver at step `now`, in delivery order, one at a time
        (what a delivery changes, e.g. a crash, applies to the next one), at most
        `max_deliveries_per_step` (the rest wait)."""
        for _ in range(self.max_deliveries_per_step):
            if not self._queue or self._queue[0][0] > now:
                return
            _, _, envelope = heapq.heappop(self._queue)
            stream = stream_of(envelope.body)
            if (
                self.incarnations.get(envelope.dst) != envelope.dst_incarnation
                or self.cut(envelope.src, envelope.dst)
                or stream in self.broken_streams
            ):
                self.stats.dropped += 1
                if stream is not None:
                    self.broken_streams.add(stream)
                continue
            self.stats.delivered += 1
            yield envelope

    def in_flight(self) -> int:
        return len(self._queue)

    def _delay(self) -> int:
        faults = self.faults
        if self._chance(faults.long_delay_probability):
            return self.rng.randint(faults.max_delay_steps, faults.max_long_delay_steps)
        return self.rng.randint(faults.min_delay_steps, faults.max_delay_steps)

    def _chance(self, probability: float) -> bool:
        return probability > 0 and self.rng.random() < probability
