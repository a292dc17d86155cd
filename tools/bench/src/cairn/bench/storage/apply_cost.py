"""The apply step's CPU cost per put, in process: no gRPC, no WAL, no event loop.

    python -m cairn.bench.storage.apply_cost [--requests 600] [--batch 100]
        [--keys 100000] [--value-size 100] [--group 8] [--fold 1] [--rounds 9]
        [--shape plain|partition-key|index|ephemeral]

Builds `requests` write requests of `batch` puts on random keys out of `keys`
(plain puts, or each with a partition key, one secondary index, or owned by a
session that each replica opens first), then applies them with the shard's own
apply step (apply_step.py: a RocksDB batch per `group` entries, each entry
holding `fold` requests) into a RocksDB in a temporary directory: as a leader (responses
built) and as a follower (none), alternating, `rounds` times each after one
warm-up round. Prints microseconds per put, the median and the lowest of the
rounds. Single-threaded and CPU-bound, so on a shared machine it moves less
than the end-to-end benchmarks: the figure to compare when changing the apply
path.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import Message

from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import storage_internal_pb2 as internal_pb
from cairn.storage.apply_step import Applied, ApplyStep
from cairn.storage.config import Limits, ReplicationSettings
from cairn.storage.core.entries import (
    CLIENT_WRITE,
    CREATE_SESSION,
    FOLDED_WRITES,
    Folded,
    LogEntry,
)
from cairn.storage.core.entry_apply import ShardRules
from cairn.storage.core.pending import PendingEntry
from cairn.storage.core.replication.replica import Member
from cairn.storage.core.replication.terms import TermHistory
from cairn.storage.core.shard_core import ShardCore
from cairn.storage.kv import RocksKv

TIMESTAMP_MS = 1_700_000_000_000
# What each put carries besides key and value: nothing (the plain-put fast path),
# a partition key (one of PARTITIONS), one secondary index entry, or a session (the
# one each replica opens at offset 0, so its id is 0 on both).
SHAPES = ("plain", "partition-key", "index", "ephemeral")
SESSION_ID = 0
PARTITIONS = 100
ME = Member("bench:6648", "bench:6649")


@dataclass(frozen=True, slots=True)
class ApplySpec:
    requests: int = 600
    batch: int = 100
    keys: int = 100_000
    value_size: int = 100
    group: int = 8
    fold: int = 1
    rounds: int = 9
    seed: int = 1
    shape: str = "plain"


def _requests(spec: ApplySpec) -> list[pb.WriteRequest]:
    rng = random.Random(spec.seed)
    value = b"x" * spec.value_size
    made = []
    for _ in range(spec.requests):
        puts = []
        for _ in range(spec.batch):
            number = rng.randrange(spec.keys)
            put = pb.PutRequest(key=f"/bench/key-{number:08d}", value=value)
            if spec.shape == "partition-key":
                put.partition_key = f"partition-{number % PARTITIONS}"
            elif spec.shape == "index":
                # A secondary key that changes between overwrites, as an owner would.
                put.secondary_indexes.add(
                    index_name="owner", secondary_key=f"{rng.randrange(1000)}"
                )
            elif spec.shape == "ephemeral":
                put.session_id = SESSION_ID
            puts.append(put)
        # Parsed from bytes, as the server holds them.
        raw = pb.WriteRequest(shard=0, puts=puts).SerializeToString()
        made.append(pb.WriteRequest.FromString(raw))
    return made


class _Applier:
    """One replica: the shard's apply step (apply_step.py) over a RocksDB, its
    caches (the read cache enabled on a leader only, as on the server), and a
    shard core whose write buffer holds the entries to apply."""

    def __init__(self, path: Path, spec: ApplySpec, leading: bool) -> None:
        self.kv = RocksKv(path)
        self.leading = leading
        limits = Limits(
            max_entries_per_apply_batch=spec.group,
            max_operations_per_apply_batch=1_000_000,
            max_pending_entries_per_shard=1_000_000,
            max_pending_bytes_per_shard=1 << 40,
        )
        self.rules = ShardRules(0, KeyOrder.HIERARCHICAL, True, 3_600_000, 1000)
        self.core: ShardCore[bool] = ShardCore(0, 0, TermHistory(), limits=limits.pipeline())
        self.step = ApplyStep(self.core, self.kv, self.rules, limits, ReplicationSettings())
        if leading:
            self.core.fence(1)
            self.core.become_leader(1, ME)
            self.step.on_leading()
        session = internal_pb.CreateSessionEntry(timeout_ms=3_600_000)
        self._apply_all([self._pending(0, CREATE_SESSION, session, b"", False)])

    def _pending(
        self, offset: int, kind: int, body: Message | Folded, payload: bytes, plain: bool
    ) -> PendingEntry[bool]:
        # A leader's own entries have a writer waiting: their responses are built.
        waiter = True if self.leading else None
        return PendingEntry(LogEntry(1, offset, TIMESTAMP_MS, payload), kind, body, plain, waiter)

    def _apply_all(self, entries: Sequence[PendingEntry[bool]]) -> None:
        for entry in entries:
            self.core.pending.append(entry)
            self.core.log.append(1, entry.offset)
        self.core.commit_offset = entries[-1].offset
        durable = entries[-1].offset
        while self.step.has_more(durable):
            applied = self.step.next(durable, _read_nothing, self.leading, False)
            assert isinstance(applied, Applied)

    def run(self, requests: Sequence[pb.WriteRequest], spec: ApplySpec) -> float:
        """Apply every request once; seconds of CPU time taken."""
        plain = spec.shape == "plain"
        offset = self.core.applied_offset
        entries = []
        for first in range(0, len(requests), spec.fold):
            folded = requests[first : first + spec.fold]
            kind, body = (
                (CLIENT_WRITE, folded[0]) if len(folded) == 1 else (FOLDED_WRITES, Folded(folded))
            )
            offset += 1
            entries.append(self._pending(offset, kind, body, b"", plain))
        started = time.thread_time()
        self._apply_all(entries)
        return time.thread_time() - started


def _read_nothing(first: int, last: int) -> list[LogEntry]:
    raise AssertionError(f"entries {first}..{last} are all held in memory")


def measure(spec: ApplySpec, directory: Path) -> dict[str, list[float]]:
    """Microseconds per put of each round, for the leader and the follower."""
    requests = _requests(spec)
    puts = spec.requests * spec.batch
    appliers = {
        "leader": _Applier(directory / "leader", spec, leading=True),
        "follower": _Applier(directory / "follower", spec, leading=False),
    }
    try:
        for applier in appliers.values():
            applier.run(requests, spec)  # warm-up
        rounds: dict[str, list[float]] = {name: [] for name in appliers}
        for _ in range(spec.rounds):
            for applier_name, applier in appliers.items():
                took_s = applier.run(requests, spec)
                rounds[applier_name].append(took_s / puts * 1e6)
        return rounds
    finally:
        for applier in appliers.values():
            applier.kv.close()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cairn.bench.storage.apply_cost",
        description=(__doc__ or "").split("\n")[0],
    )
    defaults = ApplySpec()
    for name, help_text in (
        ("requests", "write requests per round"),
        ("batch", "puts per request"),
        ("keys", "key cardinality"),
        ("value-size", "value bytes"),
        ("group", "entries per RocksDB batch"),
        ("fold", "requests per entry (1: plain client writes)"),
        ("rounds", "measured rounds"),
        ("seed", "random seed of the keys"),
    ):
        default = getattr(defaults, name.replace("-", "_"))
        parser.add_argument(f"--{name}", type=int, default=default, help=help_text)
    parser.add_argument(
        "--shape", choices=SHAPES, default=defaults.shape, help="what each put carries"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    spec = ApplySpec(
        args.requests, args.batch, args.keys, args.value_size, args.group, args.fold,
        args.rounds, args.seed, args.shape,
    )  # fmt: skip
    if min(spec.requests, spec.batch, spec.keys, spec.group, spec.fold, spec.rounds) < 1:
        print("apply_cost: counts must be at least 1", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="cairn-apply-cost-") as directory:
        rounds = measure(spec, Path(directory))
    for name, figures in rounds.items():
        print(
            f"apply {name} {spec.shape} b={spec.batch} fold={spec.fold} group={spec.group}: "
            f"us/put median={statistics.median(figures):.2f} min={min(figures):.2f} "
            f"rounds={len(figures)}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
