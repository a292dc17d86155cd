"""The client library installed alone: its wheel and cairn-kv-common's, built from
the workspace, in a fresh virtual environment on the newest Python this machine
has (not the workspace's), then `cairn put` and `cairn get` against a standalone
server. Third-party dependencies come from the package index (uv's cache)."""

from __future__ import annotations

import glob
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.processes import StandaloneProcess

ROOT = Path(__file__).resolve().parents[2]
UV_TIMEOUT_S = 300.0
CLI_TIMEOUT_S = 60.0


def _uv() -> str:
    found = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
    assert Path(found).exists(), "uv is needed to build the wheels"
    return found


def _version_of(python: str) -> tuple[int, int]:
    output = subprocess.run(
        [python, "-c", "import sys; print(*sys.version_info[:2])"],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=True,
    ).stdout.split()
    return int(output[0]), int(output[1])


def newest_python() -> str:
    """The newest CPython 3 interpreter on this machine: the workspace's own, or a
    newer one installed beside it (Debian's python3.X, pyenv's, uv's)."""
    candidates = {sys.executable}
    for pattern in (
        "/usr/bin/python3.[0-9]*",
        "/usr/local/bin/python3.[0-9]*",
        str(Path.home() / ".pyenv/versions/3.*/bin/python3.[0-9]*"),
        str(Path.home() / ".local/share/uv/python/cpython-3.*/bin/python3.[0-9]*"),
    ):
        candidates |= {p for p in glob.glob(pattern) if re.search(r"python3\.\d+$", p)}
    versions = {}
    for python in candidates:
        try:
            versions[python] = _version_of(python)
        except (OSError, subprocess.SubprocessError):
            continue  # a broken shim or leftover link
    return max(versions, key=lambda python: versions[python])


def _run(*command: str, timeout_s: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.args, result.stdout, result.stderr)
    return result.stdout


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment holding the client's wheel, its dependencies and
    nothing of the workspace's."""
    wheels = tmp_path_factory.mktemp("wheels")
    venv = tmp_path_factory.mktemp("client-venv") / "venv"
    uv = _uv()
    for package in ("cairn-kv-client", "cairn-kv-common"):
        _ok(_run(uv, "build", "--package", package, "--wheel", "--out-dir", str(wheels),
                 "--directory", str(ROOT), "--quiet", timeout_s=UV_TIMEOUT_S))  # fmt: skip
    assert sorted(p.name.split("-")[0] for p in wheels.glob("*.whl")) == [
        "cairn_kv_client",
        "cairn_kv_common",
    ]
    _ok(_run(uv, "venv", "--quiet", "--python", newest_python(), str(venv)))
    # Only the two wheels may come from the local directory; everything else is a
    # published package.
    _ok(_run(uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
             "--find-links", str(wheels), "cairn-kv-client", timeout_s=UV_TIMEOUT_S))  # fmt: skip
    return venv


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    process = StandaloneProcess(tmp_path_factory.mktemp("wheel-server"), shards=2)
    address = process.start()
    try:
        yield address
    finally:
        process.stop()


def test_the_client_wheel_alone_puts_and_gets(client_venv: Path, standalone: str) -> None:
    python, cairn = str(client_venv / "bin" / "python"), str(client_venv / "bin" / "cairn")
    version = _ok(_run(python, "-c", "import sys; print(*sys.version_info[:2])")).split()
    # The environment's Python is the newest found, whatever the workspace runs on.
    assert tuple(int(part) for part in version) == _version_of(newest_python())
    installed = _ok(_run(python, "-c", "import cairn.client, sys; print(cairn.client.__file__)"))
    assert installed.startswith(str(client_venv)), installed
    # Nothing of the services came along.
    refused = _run(python, "-c", "import cairn.storage")
    assert refused.returncode != 0 and "No module named 'cairn.storage'" in refused.stderr
    assert re.fullmatch(r"cairn \S+ \(cairn-kv-client\)\n", _ok(_run(cairn, "--version")))
    _ok(_run(cairn, "--address", standalone, "put", "/wheel/greeting", "hello from a wheel"))
    assert _ok(_run(cairn, "--address", standalone, "get", "/wheel/greeting")) == (
        "hello from a wheel"
    )
    missing = _run(cairn, "--address", standalone, "get", "/wheel/absent")
    assert missing.returncode == 1, missing


def test_the_client_wheel_alone_names_what_cairn_perf_needs(client_venv: Path) -> None:
    """The load generator ships in cairn-kv-bench: without it `cairn perf` is still
    listed, and running it is a usage error (exit 2) that says what to install."""
    python, cairn = str(client_venv / "bin" / "python"), str(client_venv / "bin" / "cairn")
    refused = _run(python, "-c", "import cairn.bench")
    assert refused.returncode != 0 and "No module named 'cairn.bench'" in refused.stderr
    assert re.search(r"^\s+perf\s", _ok(_run(cairn, "--help")), re.MULTILINE)
    perf = _run(cairn, "--address", "127.0.0.1:9", "perf", "--concurrency", "8")
    assert perf.returncode == 2, perf
    assert "pip install cairn-kv-bench" in perf.stderr and not perf.stdout, perf
