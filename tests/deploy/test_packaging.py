"""Every distribution of the workspace: its metadata (license, readme, Python
range, names), the versions it exposes, and `--version` on each console script."""

from __future__ import annotations

import importlib
import inspect
import io
import re
import tomllib
from contextlib import redirect_stdout
from importlib.metadata import distribution, entry_points
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROOT_PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
MEMBERS = ROOT_PROJECT["tool"]["uv"]["workspace"]["members"]
PREFIX = "cairn-kv-"


def _project(member: str) -> dict[str, object]:
    document = tomllib.loads((ROOT / member / "pyproject.toml").read_text(encoding="utf-8"))
    project = document["project"]
    assert isinstance(project, dict)
    return project


def _module(member: str) -> str:
    """The member's import package: its only directory under src/cairn."""
    (package,) = [p.name for p in (ROOT / member / "src" / "cairn").iterdir() if p.is_dir()
                  and (p / "__init__.py").exists() and p.name != "proto"]  # fmt: skip
    return f"cairn.{package}"


SCRIPTS = sorted(
    (script, member)
    for member in MEMBERS
    for script in dict(_project(member).get("scripts", {}))  # type: ignore[call-overload]
)


def test_every_member_has_license_and_project_metadata() -> None:
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    notice = (ROOT / "NOTICE").read_text(encoding="utf-8")
    assert license_text.lstrip().startswith("Apache License")
    assert "Version 2.0, January 2004" in license_text
    assert "Oxia" in notice and "StreamNative" in notice
    for member in MEMBERS:
        project = _project(member)
        name = project["name"]
        assert isinstance(name, str) and name.startswith(PREFIX), member
        assert project["license"] == "Apache-2.0", member
        assert project["license-files"] == ["LICENSE", "NOTICE"], member
        # Hatchling takes no files from outside the member: each has its copies.
        assert (ROOT / member / "LICENSE").read_text(encoding="utf-8") == license_text, member
        assert (ROOT / member / "NOTICE").read_text(encoding="utf-8") == notice, member
        assert project["readme"] == "README.md"
        assert (ROOT / member / "README.md").read_text(encoding="utf-8").startswith(f"# {name}")
        assert project["description"] and project["classifiers"], member
        assert "Typing :: Typed" in project["classifiers"]  # type: ignore[operator]
        assert (ROOT / member / "src" / Path(*_module(member).split(".")) / "py.typed").exists()
        # No upper cap: the client runs on newer Pythons than the services are tested on.
        assert project["requires-python"] == ">=3.11", member
        for requirement in project.get("dependencies", []):  # type: ignore[attr-defined]
            if requirement.startswith("cairn"):
                assert requirement.startswith(PREFIX), (member, requirement)
    assert ROOT_PROJECT["project"]["requires-python"] == ">=3.11"
    assert sorted(ROOT_PROJECT["tool"]["uv"]["sources"]) == sorted(
        str(_project(member)["name"]) for member in MEMBERS
    )


@pytest.mark.parametrize("member", MEMBERS)
def test_installed_metadata_and_version(member: str) -> None:
    project = _project(member)
    installed = distribution(str(project["name"]))
    assert installed.version == project["version"]
    assert installed.metadata["License-Expression"] == "Apache-2.0"
    module = importlib.import_module(_module(member))
    assert project["name"] == module.DISTRIBUTION
    assert module.__version__ == project["version"]


@pytest.mark.parametrize(("script", "member"), SCRIPTS)
def test_every_console_script_prints_its_version(script: str, member: str) -> None:
    project = _project(member)
    (entry,) = [e for e in entry_points(group="console_scripts") if e.name == script]
    assert entry.dist is not None and entry.dist.name == project["name"]
    main = entry.load()
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, redirect_stdout(out):
        patch.setattr("sys.argv", [script, "--version"])
        with pytest.raises(SystemExit) as exit_info:
            # A main() without parameters reads sys.argv, like the script does.
            main(["--version"]) if inspect.signature(main).parameters else main()
    assert exit_info.value.code in (0, None)
    version = re.escape(str(project["version"]))
    assert re.fullmatch(rf"{re.escape(script)} {version} \({project['name']}\)\n", out.getvalue())
