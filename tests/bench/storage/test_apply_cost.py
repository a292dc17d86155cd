"""`python -m cairn.bench.storage.apply_cost`: measures what it says, on a tiny run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cairn.bench.storage.apply_cost import ApplySpec, main, measure
from cairn.storage.core.indexes import HAS_INDEXES, INDEX_PREFIX
from cairn.storage.core.meta import prefix_end
from cairn.storage.core.sessions import owning_session
from cairn.storage.kv import Column, RocksKv
from cairn.storage.records import FLAGS_OFFSET, HAS_PARTITION_KEY, HAS_SESSION


def test_every_round_of_both_replicas_is_measured(tmp_path: Path) -> None:
    spec = ApplySpec(requests=12, batch=5, keys=20, group=3, fold=2, rounds=3)
    rounds = measure(spec, tmp_path)
    assert set(rounds) == {"leader", "follower"}
    for figures in rounds.values():
        assert len(figures) == 3
        assert all(figure > 0 for figure in figures)


def test_prints_a_line_per_replica(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--requests", "6", "--batch", "4", "--keys", "10", "--rounds", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    for line, name in zip(lines, ("leader", "follower"), strict=True):
        assert re.fullmatch(
            rf"apply {name} plain b=4 fold=1 group=8: us/put median=[0-9.]+ min=[0-9.]+ rounds=2",
            line,
        )


def test_refuses_zero_counts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--rounds", "0"]) == 2
    assert "at least 1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("shape", "flag"),
    [
        ("plain", 0),
        ("partition-key", HAS_PARTITION_KEY),
        ("index", HAS_INDEXES),
        ("ephemeral", HAS_SESSION),
    ],
)
def test_each_shape_stores_what_it_says(tmp_path: Path, shape: str, flag: int) -> None:
    measure(ApplySpec(requests=4, batch=5, keys=10, rounds=1, shape=shape), tmp_path)
    kv = RocksKv(tmp_path / "leader")
    try:
        records = [record for _, record in kv.scan(Column.RECORDS, b"", None)]
        entries = list(kv.scan(Column.META, INDEX_PREFIX, prefix_end(INDEX_PREFIX)))
    finally:
        kv.close()
    assert records
    for record in records:
        assert record[FLAGS_OFFSET] == flag
        # Ephemeral records belong to the session the replica opened first.
        assert owning_session(record) == (0 if shape == "ephemeral" else None)
    # One entry per indexed record (each put names one index).
    assert len(entries) == (len(records) if shape == "index" else 0)
