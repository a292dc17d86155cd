"""The README runs as written (issue 47): every block of it and of the documents it
links is run against a local cluster started by the README's own `./dev run` line,
shown output is compared, or, for what needs Kubernetes or Docker, checked as far as
this machine allows. Annotations (readme.markdown_blocks, readme.readme_plan) say how
each block is treated; a block without one is run."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from readme.markdown_blocks import Block, linked_documents, output_matches, parse_blocks
from readme.readme_plan import (
    PYTHON_LANGUAGES,
    SHELL_LANGUAGES,
    Launch,
    Step,
    launches,
    plan,
)
from readme.static_checks import CHECKS

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TOOLS = Path(sys.executable).parent  # the workspace's programs: kubectl, cairn, ...
BANNER_END = "Ctrl-C stops it"
# The README's examples dial the conventional ports; a cluster on other ones (they
# were taken) cannot show whether the examples work.
CONVENTIONAL = ("127.0.0.1:6648", "127.0.0.1:6650", "127.0.0.1:8080")
START_TIMEOUT_S = 120
STEP_TIMEOUT_S = 120


def documents() -> list[Path]:
    return [README, *linked_documents(README)]


def all_blocks() -> list[Block]:
    blocks: list[Block] = []
    for path in documents():
        blocks += parse_blocks(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    return blocks


def fresh_shell_env(state_dir: Path) -> dict[str, str]:
    """A new user's shell: the system PATH (with the Python running the tests, which
    has uv) but no virtual environment, so that `./dev` is what makes commands work."""
    venv = Path(sys.prefix)
    path = [
        entry
        for entry in os.environ.get("PATH", "").split(os.pathsep)
        if entry and not Path(entry).resolve().is_relative_to(venv.resolve())
    ]
    path.append(str(Path(sys.base_prefix) / "bin"))
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CAIRN_", "VIRTUAL_ENV", "PYTHON", "OTEL_"))
    }
    env["PATH"] = os.pathsep.join(path)
    env["CAIRN_DIR"] = str(state_dir)
    return env


@contextmanager
def running(launch: Launch, state_dir: Path) -> Iterator[str]:
    """The cluster started by the README's command, until its banner is printed;
    yields the banner. Stopped as with Ctrl-C."""
    state_dir.parent.mkdir(parents=True)
    log = (state_dir.parent / "launch.log").open("w")
    process = subprocess.Popen(
        shlex.split(launch.command),
        cwd=ROOT,
        env=fresh_shell_env(state_dir),
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        start_new_session=True,  # its own process group, to send it Ctrl-C's SIGINT
    )
    lines: list[str] = []
    printed = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if line.startswith(BANNER_END):
                printed.set()
        printed.set()  # ended: no banner will come

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        printed.wait(START_TIMEOUT_S)
        banner = "".join(lines)
        assert BANNER_END in banner, (
            f"{launch.where}: `{launch.command}` printed no banner in {START_TIMEOUT_S} s "
            f"(exit status {process.poll()}):\n{banner}\nlog:\n"
            + (state_dir.parent / "launch.log").read_text()[-3000:]
        )
        busy = [address for address in CONVENTIONAL if address not in banner]
        assert not busy, f"ports of {busy} were taken (another cluster running?):\n{banner}"
        yield banner
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        reader.join(10)
        assert process.stdout is not None
        process.stdout.close()
        log.close()


def run_step(step: Step, state_dir: Path) -> str:
    env = fresh_shell_env(state_dir)
    if "import oxia" in step.stdin:
        # The released oxia client's start-up race, worked around outside it
        # (support/readme_site/sitecustomize.py).
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT / "tests" / "support" / "readme_site"), str(ROOT / "tests")]
        )
    try:
        result = subprocess.run(
            step.argv,
            input=step.stdin,
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        raise AssertionError(
            f"{step.block.where}: the example did not finish in {STEP_TIMEOUT_S} s against "
            f"the {step.cluster!r} cluster:\n{step.block.text}\nstdout: {expired.stdout!r}\n"
            f"stderr: {expired.stderr!r}"
        ) from None
    assert result.returncode == 0, (
        f"{step.block.where}: the example failed (exit status {result.returncode}) "
        f"against the {step.cluster!r} cluster:\n{step.block.text}\n"
        f"stderr:\n{result.stderr[-3000:]}\nstdout (its end):\n{result.stdout[-1000:]}"
    )
    return result.stdout


def check_output(step: Step, output: str) -> None:
    assert step.shows is not None
    assert output_matches(step.shows.text, output), (
        f"{step.shows.where}: the README shows\n{step.shows.text}\n"
        f"but {step.block.where} printed\n{output}"
    )


def test_every_block_is_accounted_for() -> None:
    """Each block runs, shows the output of the one before, or names a check for what
    needs another platform; planning refuses anything else."""
    blocks = all_blocks()
    steps = plan(blocks, {name: ROOT for name in launches(blocks)})
    ran = {id(step.block) for step in steps}
    shown = {id(step.shows) for step in steps if step.shows is not None}
    for block in blocks:
        kind = block.annotation.kind
        if kind == "skip":
            assert block.annotation.words[0] in CHECKS, f"{block.where}: no check for it"
        else:
            assert id(block) in (ran if kind == "run" else shown), block.where
    runnable = SHELL_LANGUAGES + PYTHON_LANGUAGES
    assert all(step.block.language in runnable for step in steps)


@pytest.mark.parametrize(
    "block",
    [block for block in all_blocks() if block.annotation.kind == "skip"],
    ids=lambda block: block.where,
)
def test_blocks_for_other_platforms_hold_here(block: Block) -> None:
    problems = CHECKS[block.annotation.words[0]](block, ROOT, TOOLS)
    assert not problems, f"{block.where}:\n" + "\n".join(problems)


def test_every_launch_uses_the_launchers_options() -> None:
    """Launches no block needs (e.g. `--public-plaintext`) are not started: their
    options at least exist."""
    usage = subprocess.run(
        [str(TOOLS / "cairn-local"), "--help"], capture_output=True, text=True, check=True
    ).stdout
    for launch in launches(all_blocks()).values():
        for flag in shlex.split(launch.command)[2:]:
            assert flag.split("=")[0] in usage, f"{launch.where}: cairn-local has no {flag}"


@pytest.mark.e2e
def test_readme_examples_run(tmp_path: Path) -> None:
    blocks = all_blocks()
    found = launches(blocks)
    # .cairn/cluster under a directory per cluster: the README's `/path/to/.cairn/cluster`
    # matches, and the user's own state is not touched.
    state_dirs = {name: tmp_path / name / ".cairn" / "cluster" for name in found}
    steps = plan(blocks, state_dirs)
    # One start per cluster, its blocks in README order.
    for cluster in dict.fromkeys(step.cluster for step in steps):
        with running(found[cluster], state_dirs[cluster]) as banner:
            for step in (step for step in steps if step.cluster == cluster):
                if step.launch is not None and step.shows is not None:
                    check_output(step, banner)
                output = run_step(step, state_dirs[cluster])
                if step.launch is None and step.shows is not None:
                    check_output(step, output)
