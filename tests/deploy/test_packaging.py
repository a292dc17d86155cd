"""Every distribution of the workspace: its metadata (license, readme, Python
range, names), the versions it exposes, and `--version` on each console script."""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import re
import sys
import tomllib
from contextlib import redirect_stdout
from importlib.metadata import (
    PackageNotFoundError,
    distribution,
    entry_points,
    packages_distributions,
)
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


# cairn.common's modules behind an extra, by extra: a web framework and server for
# the programs that serve HTTP (the client library and the storage pod go without),
# and matplotlib for the monitoring test's plots.
COMMON_EXTRAS = {
    "http": ("cairn.common.problems_http", "cairn.common.api_docs", "cairn.common.tls_asgi"),
    "plots": ("cairn.common.monitoring.plots",),
}


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement(text: str) -> tuple[str, set[str]]:
    """A requirement's distribution name and the extras it asks for."""
    match = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(?:\[([^\]]*)\])?", text)
    assert match, text
    extras = {e.strip() for e in (match.group(2) or "").split(",") if e.strip()}
    return _normalized(match.group(1)), extras


def _imports_by_module(member: str) -> dict[str, set[str]]:
    """Each source module of the member and the modules it imports (absolute)."""
    found: dict[str, set[str]] = {}
    source = ROOT / member / "src"
    for path in source.rglob("*.py"):
        if "_pb2" in path.name:
            continue
        module = ".".join(path.relative_to(source).with_suffix("").parts).removesuffix(".__init__")
        imported = found.setdefault(module, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.add(node.module)
    return found


def _brought_in(name: str, extras: set[str], seen: set[str]) -> set[str]:
    """The installed distributions a requirement brings in, transitively, honouring
    extras (requirements whose markers exclude this platform are not installed)."""
    if name in seen:
        return set()
    seen.add(name)
    try:
        requirements = distribution(name).requires or []
    except PackageNotFoundError:
        return set()
    closure = {name}
    for text in requirements:
        requirement_name, requested = _requirement(text)
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", text.partition(";")[2])
        if extra and extra.group(1) not in extras:
            continue
        closure |= _brought_in(requirement_name, requested, seen)
    return closure


def _extra_of(module: str) -> str | None:
    for extra, modules in COMMON_EXTRAS.items():
        if module.startswith(modules):
            return extra
    return None


@pytest.mark.parametrize("member", MEMBERS)
def test_every_import_is_declared(member: str) -> None:
    """A distribution installed alone has what its code imports: each third-party
    module comes from a distribution its requirements bring in (cairn.common's modules
    behind an extra may use that extra's), and a member that imports one of those
    modules asks cairn-kv-common for the extra."""
    project = _project(member)
    name = _normalized(str(project["name"]))
    requirements = dict(_requirement(t) for t in project.get("dependencies", []))  # type: ignore[attr-defined]
    base = {name}.union(*(_brought_in(r, e, set()) for r, e in requirements.items()))
    optional = dict(project.get("optional-dependencies", {}))  # type: ignore[call-overload]
    providers = {m: {_normalized(d) for d in ds} for m, ds in packages_distributions().items()}
    problems = []
    for module, imported in sorted(_imports_by_module(member).items()):
        available = set(base)
        extra = _extra_of(module) if name == "cairn-kv-common" else None
        for text in optional.get(extra, []):
            available |= _brought_in(*_requirement(text), set())
        for target in sorted(imported):
            top = target.partition(".")[0]
            if top in ("cairn", "__future__") or top in sys.stdlib_module_names:
                needed = _extra_of(target)
                asked = requirements.get("cairn-kv-common", set())
                if needed and name != "cairn-kv-common" and needed not in asked:
                    problems.append(f"{module} imports {target}: ask for cairn-kv-common[{needed}]")
            elif not providers.get(top, set()) & available:
                problems.append(f"{module} imports {target}, which no requirement brings in")
    assert not problems, "\n".join(problems)
