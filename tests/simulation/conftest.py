"""Options for longer simulation runs, e.g.

    uv run --frozen pytest tests/simulation --sim-seeds 500 --sim-steps 5000

runs 500 seeds (from --sim-first-seed, default 0) of 5000 faulty steps (simulated
milliseconds) for each profile. A failure names its seed: rerun just it with
--sim-first-seed SEED --sim-seeds 1 (and the same --sim-steps).
"""

from __future__ import annotations

import pytest

from simulation import summary

# The CI set: seeds x steps for each profile of the managed cluster (and for 3 and
# 5 pods of real_cluster.py). 15 seeds: the mutants show what the checks catch
# and how soon; longer campaigns are --sim-seeds N.
DEFAULT_SEEDS = 15
DEFAULT_STEPS = 2000


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("simulation")
    group.addoption("--sim-seeds", type=int, default=DEFAULT_SEEDS, help="seeds per case")
    group.addoption("--sim-steps", type=int, default=DEFAULT_STEPS, help="faulty steps per seed")
    group.addoption("--sim-first-seed", type=int, default=0, help="the first seed")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "sim_seed" in metafunc.fixturenames:
        first = metafunc.config.getoption("--sim-first-seed")
        count = metafunc.config.getoption("--sim-seeds")
        seeds = range(first, first + count)
        metafunc.parametrize("sim_seed", seeds, ids=[f"seed{seed}" for seed in seeds])


@pytest.fixture
def sim_steps(request: pytest.FixtureRequest) -> int:
    steps: int = request.config.getoption("--sim-steps")
    return steps


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = summary.lines()
    if lines:
        terminalreporter.section("simulation")
        for line in lines:
            terminalreporter.write_line(line)
