"""The apply step's CPU cost per put, in process: no gRPC, no WAL, no event loop.

    python -m cairn.bench.storage.apply_cost [--requests 600] [--batch 100]
        [--keys 100000] [--value-size 100] [--group 8] [--fold 1] [--rounds 9]
        [--shape plain|partition-key|index|ephemeral]

Builds `requests` write requests of `batch` puts on random keys out of `keys`
(plain puts, or each with a partition key, one secondary index, or owned by a
session that each replica opens first), then applies them the way a shard's
applier does (a RocksDB batch per `group` entries, each entry holding `fold`
requests) into a RocksDB in a temporary directory: as a leader (responses
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

from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import storage_internal_pb2 as internal_pb
from cairn.storage.config import Limits
from cairn.storage.core.apply import HeaderCache, PendingChanges
from cairn.storage.core.entries import CLIENT_WRITE, CREATE_SESSION, FOLDED_WRITES, Folded
from cairn.storage.core.entry_apply import ShardRules, apply_entry
from cairn.storage.core.read_cache import ReadCache
from cairn.storage.kv import RocksKv

TIMESTAMP_MS = 1_700_000_000_000
# What each put carries besides key and value: nothing (the plain-put fast path),
# a partition key (one of PARTITIONS), one secondary index entry, or a session (the
# one each replica opens at offset 0, so its id is 0 on both).
SHAPES = ("plain", "partition-key", "index", "ephemeral")
SESSION_ID = 0
PARTITIONS = 100


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
    """One replica's state: a RocksDB, its header cache, its record cache (held by a
    leader only, as on the server), the next offset."""

    def __init__(self, path: Path, leading: bool) -> None:
        self.kv = RocksKv(path)
        limits = Limits()
        self.cache = HeaderCache(limits.max_cached_headers_per_shard)
        self.records = ReadCache(
            limits.max_read_cache_entries_per_shard, limits.max_read_cache_bytes_per_shard
        )
        if leading:
            self.records.enable(self.kv)
        self.rules = ShardRules(0, KeyOrder.HIERARCHICAL, True, 3_600_000, 1000)
        opening = PendingChanges(self.kv, self.cache)
        session = internal_pb.CreateSessionEntry(timeout_ms=3_600_000)
        apply_entry(self.rules, opening, CREATE_SESSION, session, 0, TIMESTAMP_MS, False, False)
        self.kv.write(opening.changes())
        opening.written()
        self.offset = 1

    def run(self, requests: Sequence[pb.WriteRequest], spec: ApplySpec, answer: bool) -> float:
        """Apply every request once; seconds of CPU time taken."""
        entries = [requests[i : i + spec.fold] for i in range(0, len(requests), spec.fold)]
        plain = spec.shape == "plain"
        started = time.thread_time()
        for first in range(0, len(entries), spec.group):
            state = PendingChanges(self.kv, self.cache, self.records)
            for entry in entries[first : first + spec.group]:
                kind, body = (
                    (CLIENT_WRITE, entry[0]) if len(entry) == 1 else (FOLDED_WRITES, Folded(entry))
                )
                apply_entry(self.rules, state, kind, body, self.offset, TIMESTAMP_MS, plain, answer)
                self.offset += 1
            state.set_commit_offset(self.offset - 1)
            # Unlogged, as the shard's applier writes (the WAL redoes a lost batch).
            self.kv.write_unlogged(state.column_changes())
            state.written()
        return time.thread_time() - started


def measure(spec: ApplySpec, directory: Path) -> dict[str, list[float]]:
    """Microseconds per put of each round, for the leader and the follower."""
    requests = _requests(spec)
    puts = spec.requests * spec.batch
    appliers = {
        "leader": _Applier(directory / "leader", leading=True),
        "follower": _Applier(directory / "follower", leading=False),
    }
    try:
        for applier_name, applier in appliers.items():
            applier.run(requests, spec, answer=applier_name == "leader")  # warm-up
        rounds: dict[str, list[float]] = {name: [] for name in appliers}
        for _ in range(spec.rounds):
            for applier_name, applier in appliers.items():
                took_s = applier.run(requests, spec, answer=applier_name == "leader")
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
