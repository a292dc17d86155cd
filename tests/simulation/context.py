"""What every simulated node shares: the seed's random source, the network, the
clock (in steps), the observer the checkers read, and the runtime's rules."""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass, field

from cairn.storage.core.entry_apply import ShardRules
from cairn.storage.core.replication.leader import LeaderCore
from simulation.messages import Body
from simulation.network import Network
from simulation.observer import Observer

# Entry timestamps: the simulated clock advances this much per step.
STEP_MS = 10


@dataclass(frozen=True, slots=True)
class RuntimeRules:
    """How the runtime drives the pure core. The defaults are the rules a correct
    runtime follows; mutants.py flips some to show that the checkers notice."""

    max_in_flight_entries: int = 8
    # A stream with no answer for this long is taken as broken (gRPC deadline,
    # keepalive): the leader starts over with Truncate.
    stream_timeout_steps: int = 12
    # A streaming leader sends at least this often (entries or just its commit
    # offset), so a follower learns the commit offset even when a message was lost.
    heartbeat_steps: int = 4
    # RemoveFollower waits this long for the other members to catch up with what
    # was committed with the leaving one, then calls the removal off (under the
    # controller's call deadline, controller.py).
    removal_wait_steps: int = 20
    # Entries logged but not applied yet; past it client writes are refused
    # (backpressure: ShardCore.has_room).
    max_pending_entries: int = 64
    # Committed entries applied in one KV batch, at most (drawn at random up to it).
    max_apply_group: int = 16
    # A follower acts on a Truncate only if it is newer than the stream it follows;
    # a late one would cut entries it already acknowledged in this term.
    ignore_stale_truncates: bool = True
    # A follower stops acknowledging a stream once a newer term began here
    # (fenced, or leading it): its log at those offsets may then hold another
    # leader's entries, which the stream's leader would count as its own.
    end_streams_on_new_term: bool = True
    # Faults at chosen points: a replica crashes right after answering NewTerm or
    # Truncate (before its WAL syncs on its own).
    crash_after_answer_probability: float = 0.03
    # A follower acknowledges only what it synced (and learns commits only that far).
    ack_only_durable: bool = True
    # The leader commits nothing before its term's first entry is on a majority.
    term_start_rule: bool = True
    # The leader's lease (core/replication/lease.py), in ms of the simulated clock:
    # it answers reads only while a majority of its voters echoed a message it
    # sent within this long; heartbeats (heartbeat_steps) renew it when idle.
    lease_ms: int = 200
    reads_need_lease: bool = True
    # A new leader with followers serves nothing (no read, no write taken in)
    # until any older leader's lease has run out (the simulated clocks agree, so
    # the wait is the lease itself).
    takeover_waits_for_old_leases: bool = True


@dataclass
class Env:
    rng: random.Random
    net: Network
    observer: Observer
    rules: RuntimeRules
    shard_rules: ShardRules
    # The leader's core: the real one, or a mutant (mutants.py).
    leader_core_class: type[LeaderCore] = LeaderCore
    now: int = 0
    trace: deque[str] = field(default_factory=lambda: deque(maxlen=80))
    # How often each interesting thing happened: shows what a run exercised.
    counts: Counter[str] = field(default_factory=Counter)
    # The last incarnation of replica data handed out (a counter, not the random
    # source: drawing one must not change what a seed does otherwise).
    last_data_incarnation: int = 0

    def new_data_incarnation(self) -> int:
        self.last_data_incarnation += 1
        return self.last_data_incarnation

    @property
    def now_ms(self) -> int:
        return self.now * STEP_MS

    def send(self, src: str, dst: str, body: Body) -> None:
        self.net.send(src, dst, body, self.now)

    def log(self, text: str, count: str | None = None) -> None:
        self.trace.append(f"{self.now:>6} {text}")
        if count is not None:
            self.counts[count] += 1

    def count(self, what: str, times: int = 1) -> None:
        self.counts[what] += times

    def buggify(self, what: str, probability: float) -> bool:
        """A fault at a chosen point of the code (as in FoundationDB): true with
        `probability`, counted when it fires."""
        if probability > 0 and self.rng.random() < probability:
            self.count(what)
            return True
        return False
