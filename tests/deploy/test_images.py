"""The images' Dockerfile: hadolint clean, and what issue 41 asks of it, read
from the file (no Docker engine runs here): a pinned slim Python 3.11 base, one
target per component whose entrypoint is that component's console script, the
locked dependencies only, an unprivileged user, and a build context limited by
.dockerignore."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from support.manifests import ROOT, tool

DOCKERFILES = sorted(
    path
    for path in ROOT.rglob("Dockerfile*")
    if ".venv" not in path.parts and path.is_file() and path.suffix != ".dockerignore"
)
# target -> the workspace member whose console script it runs
COMPONENTS = {
    "storage": ("services/storage", "cairn-storage"),
    "controller": ("services/controller", "cairn-controller"),
    "gateway": ("services/gateway", "cairn-gateway"),
    "health": ("sidecars/health", "cairn-health"),
}
FROM = re.compile(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?\s*$", re.IGNORECASE)


def test_there_is_a_dockerfile() -> None:
    assert ROOT / "Dockerfile" in DOCKERFILES


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_hadolint_passes(dockerfile: Path) -> None:
    result = subprocess.run(
        [tool("hadolint"), "--failure-threshold", "info", "--no-color", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _stages(text: str) -> dict[str, list[str]]:
    """Instructions (continuation lines joined) by stage name."""
    joined = re.sub(r"\\\n\s*", " ", text)
    stages: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = FROM.match(line)
        if match is not None:
            current = stages.setdefault(match.group(2) or match.group(1), [line])
        elif current is not None:
            current.append(line)
    return stages


def _chain(stages: dict[str, list[str]], name: str) -> list[str]:
    """A stage's instructions after those of the stages it is built FROM."""
    lines = stages[name]
    parent = FROM.match(lines[0])
    assert parent is not None
    base = parent.group(1)
    return (_chain(stages, base) if base in stages else [lines[0]]) + lines[1:]


def test_the_base_is_slim_python_3_11_pinned_by_tag_and_digest() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    image = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.MULTILINE)
    assert image is not None
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+@sha256:[0-9a-f]{64}", image.group(1))
    for line in text.splitlines():
        match = FROM.match(line)
        if match is not None:
            assert match.group(1) in ("${PYTHON_IMAGE}", *_stages(text)), line


@pytest.mark.parametrize("target", sorted(COMPONENTS))
def test_each_component_has_a_target_running_its_console_script(target: str) -> None:
    stages = _stages((ROOT / "Dockerfile").read_text(encoding="utf-8"))
    member, script = COMPONENTS[target]
    pyproject = tomllib.loads((ROOT / member / "pyproject.toml").read_text(encoding="utf-8"))
    assert script in pyproject["project"]["scripts"]
    chain = _chain(stages, target)
    entrypoints = [line for line in chain if line.upper().startswith("ENTRYPOINT")]
    assert json.loads(entrypoints[-1].split(None, 1)[1]) == [script]
    users = [line.split()[1] for line in chain if line.upper().startswith("USER ")]
    assert users[-1] == "10001:10001"
    # Its environment comes from the lock file, without dev dependencies, and
    # holds its own package.
    build = _chain(stages, f"build-{target}")
    syncs = [line for line in build if line.startswith("RUN uv sync")]
    assert syncs and all(
        "--frozen" in line
        and "--no-dev" in line
        and f"--package {pyproject['project']['name']}" in line
        for line in syncs
    )
    assert f"COPY --from=build-{target} /opt/cairn /opt/cairn" in stages[target]


def test_the_build_context_is_only_the_sources() -> None:
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    patterns = [line for line in ignored if line and not line.startswith("#")]
    # Everything is left out, then the sources are let back in (so .venv, .git,
    # data directories and caches never reach the daemon).
    assert patterns[0] == "*"
    assert {"!pyproject.toml", "!uv.lock"} <= set(patterns)
