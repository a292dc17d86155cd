"""The replication rules a reader most needs, as scenarios over the pure cores:
each file under rules/ is commands and what the cores answer (rules/harness.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .rules.harness import run_file

SCENARIOS = sorted((Path(__file__).parent / "rules").glob("*.txt"))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda path: path.stem)
def test_rule_scenario(path: Path) -> None:
    run_file(path)
