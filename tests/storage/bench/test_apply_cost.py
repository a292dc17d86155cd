"""`python -m cairn.storage.bench.apply_cost`: measures what it says, on a tiny run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cairn.storage.bench.apply_cost import ApplySpec, main, measure


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
            rf"apply {name} b=4 fold=1 group=8: us/put median=[0-9.]+ min=[0-9.]+ rounds=2", line
        )


def test_refuses_zero_counts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--rounds", "0"]) == 2
    assert "at least 1" in capsys.readouterr().err
