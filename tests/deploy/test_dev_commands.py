"""`./dev cairn` and `./dev exec`: the project's commands from a fresh shell, with
nothing on PATH but Python (issue 47), and relative paths taken from where the
user stands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_dev(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # A new user's shell: the system's PATH and the Python that runs the tests
    # (whose folder holds python3), not the workspace's .venv/bin.
    python_dir = Path(os.path.realpath(sys.executable)).parent
    env = {
        "PATH": os.pathsep.join([str(python_dir), "/usr/bin", "/bin"]),
        "HOME": os.environ.get("HOME", str(cwd)),
    }
    return subprocess.run(
        [str(ROOT / "dev"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_exec_runs_in_the_callers_directory_with_the_workspace(tmp_path: Path) -> None:
    script = tmp_path / "where.py"
    script.write_text("import os, cairn.client; print(os.getcwd())\n", encoding="utf-8")
    done = run_dev("exec", "python", "where.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path)


def test_cairn_runs_the_command_line_client(tmp_path: Path) -> None:
    done = run_dev("cairn", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: cairn")


def test_exec_without_a_command_says_how(tmp_path: Path) -> None:
    done = run_dev("exec", cwd=tmp_path)
    assert done.returncode == 2
    assert "usage: ./dev exec COMMAND" in done.stderr
