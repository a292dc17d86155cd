"""What the README test runs: the README's blocks (and those of the documents it
links) turned into clusters to launch and programs to run against them (issue 47).

A `run` block takes these options:

- `cluster=NAME`: the local cluster its commands need, named by the flags of the
  README's `./dev run` line that starts it (`default` for no flags, `insecure` for
  `./dev run --insecure`, ...). A block without one needs the cluster of the block
  before it (`default` at the start).
- `not-run=TEXT`: commands starting with TEXT are not run; the annotation's reason
  says why (e.g. `./dev test`, the suite this test belongs to).
- `background=TEXT`: commands starting with TEXT run until they have printed
  something (e.g. `curl -N` on a change feed), then are stopped.
- `placeholder=CODE` (Python): a line that is only `...` becomes CODE.

Every `./dev run` command in a block is a launch: the test starts those its blocks
need, once each, as written, and compares an `output` block right after the
launching block with the launch's banner.
"""

from __future__ import annotations

import ast
import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

from readme.markdown_blocks import Block

LAUNCH = "./dev run"
DEFAULT_CLUSTER = "default"
SHELL_LANGUAGES = ("", "sh", "bash", "shell")
PYTHON_LANGUAGES = ("python", "py")
RUN_OPTIONS = ("cluster", "not-run", "background", "placeholder")
# The README names the local state directory by its default path; the test runs each
# cluster in a directory of its own and points the commands there instead.
STATE_DIR = re.compile(r"(?<![\w/.])\.cairn/cluster")

# curl exits 0 on an HTTP error answer, which would let a broken example pass: the
# README's curl commands run with --fail-with-body (the answer is still printed).
SHELL_PRELUDE = """\
set -Eeuo pipefail
readme_command=""
trap 'echo "README command failed (exit status $?): $readme_command" >&2' ERR
curl() { command curl --fail-with-body --no-progress-meter "$@"; }
readme_background() {
  local out pid i
  out=$(mktemp)
  eval "$1" >"$out" 2>&1 &
  pid=$!
  # Until the command prints or ends, at most 10 s.
  for i in $(seq 200); do
    [ -s "$out" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 "$pid" 2>/dev/null; then
    pkill -P "$pid" || true
    kill "$pid" 2>/dev/null || true
    wait "$pid" || true
  elif ! wait "$pid"; then
    cat "$out"; echo "background command failed: $1" >&2; return 1
  fi
  [ -s "$out" ] || { echo "background command printed nothing in 10 s: $1" >&2; return 1; }
  cat "$out"
  rm -f "$out"
}
"""
_CONTINUATIONS = ("then", "do", "done", "else", "elif", "fi", "esac", ";;", "}", ")")


class PlanError(ValueError):
    """A block the test cannot account for."""


@dataclass(frozen=True)
class Launch:
    name: str
    command: str  # as the README writes it, comment removed
    where: str


@dataclass(frozen=True)
class Step:
    block: Block
    cluster: str
    argv: tuple[str, ...]  # run from the repository's root
    stdin: str  # the program, for Python; "" for the shell (its script is in argv)
    launch: Launch | None  # the block's launch of its own cluster
    shows: Block | None  # an output block showing this step's output (or banner)


def launch_name(command: str) -> str:
    flags = shlex.split(command)[2:]
    return "+".join(flag.lstrip("-") for flag in flags) or DEFAULT_CLUSTER


def commands(text: str) -> list[str]:
    """The block's lines, continuation lines joined, without comment-only lines."""
    joined: list[str] = []
    pending = ""
    for line in text.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    if pending:
        joined.append(pending)
    return [line for line in joined if line.strip() and not line.lstrip().startswith("#")]


def _without_comment(command: str) -> str:
    # Only the README's trailing `# ...` remarks, after at least two spaces.
    return re.split(r"\s{2,}#", command, maxsplit=1)[0].strip()


def _is_launch(command: str) -> bool:
    return _without_comment(command) == LAUNCH or _without_comment(command).startswith(LAUNCH + " ")


def launches(blocks: list[Block]) -> dict[str, Launch]:
    found: dict[str, Launch] = {}
    for block in blocks:
        if block.annotation.kind != "run" or block.language not in SHELL_LANGUAGES:
            continue
        for command in commands(block.text):
            if _is_launch(command):
                text = _without_comment(command)
                found.setdefault(launch_name(text), Launch(launch_name(text), text, block.where))
    return found


def shell_script(block: Block, state_dir: Path) -> str:
    options = block.annotation.options
    not_run = options.get("not-run")
    background = options.get("background")
    lines = [SHELL_PRELUDE]
    for command in commands(block.text):
        if _is_launch(command):
            lines.append(f"# launched by the test: {command.strip()}")
        elif not_run and command.strip().startswith(not_run):
            lines.append(f"# not run ({block.annotation.reason}): {command.strip()}")
        else:
            command = STATE_DIR.sub(str(state_dir), command)
            # Named for the failure message; not before a keyword that continues a
            # compound command, where a line of its own would change its meaning.
            if command.split()[0] not in _CONTINUATIONS:
                lines.append(f"readme_command={shlex.quote(command.strip())}")
            if background and command.strip().startswith(background):
                lines.append(f"readme_background {shlex.quote(command.strip())}")
            else:
                lines.append(command)
    return "\n".join(lines) + "\n"


def python_program(block: Block, state_dir: Path) -> str:
    placeholder = block.annotation.options.get("placeholder")
    source_lines = []
    for line in block.text.splitlines():
        if placeholder is not None and line.strip() == "...":
            line = line[: len(line) - len(line.lstrip())] + placeholder
        source_lines.append(STATE_DIR.sub(str(state_dir), line))
    source = "\n".join(source_lines) + "\n"
    try:
        compile(source, block.where, "exec")
    except SyntaxError:
        # Top-level `await`/`async with`, as at an asyncio REPL: run it in a coroutine.
        compile(source, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        body = textwrap.indent(source, "    ")
        return (
            f"import asyncio\n\n\nasync def readme_main():\n{body}\n\nasyncio.run(readme_main())\n"
        )
    return source


def plan(blocks: list[Block], state_dirs: dict[str, Path]) -> list[Step]:
    """The steps in document order, each block accounted for: every block is a run
    step, an output shown by the step before it, or a skip (checked elsewhere)."""
    steps: list[Step] = []
    found = launches(blocks)
    cluster = DEFAULT_CLUSTER
    previous: Block | None = None
    for block in blocks:
        annotation = block.annotation
        if annotation.kind == "output":
            if previous is None or not steps or steps[-1].block is not previous:
                raise PlanError(f"{block.where}: an output block follows no run block")
            steps[-1] = Step(**{**steps[-1].__dict__, "shows": block})
        elif annotation.kind == "run":
            unknown = set(annotation.options) - set(RUN_OPTIONS)
            if unknown:
                raise PlanError(f"{block.where}: unknown options {sorted(unknown)}")
            cluster = annotation.options.get("cluster", cluster)
            if cluster not in found:
                raise PlanError(f"{block.where}: no `./dev run` line starts cluster {cluster!r}")
            state_dir = state_dirs[cluster]
            if block.language in SHELL_LANGUAGES:
                argv: tuple[str, ...] = ("bash", "-c", shell_script(block, state_dir))
                stdin = ""
            elif block.language in PYTHON_LANGUAGES:
                argv, stdin = ("./dev", "exec", "python", "-"), python_program(block, state_dir)
            else:
                raise PlanError(f"{block.where}: no way to run {block.language!r}: annotate it")
            own = [
                found[launch_name(_without_comment(c))]
                for c in commands(block.text)
                if _is_launch(c) and launch_name(_without_comment(c)) == cluster
            ]
            steps.append(Step(block, cluster, argv, stdin, own[0] if own else None, None))
        previous = block
    return steps
