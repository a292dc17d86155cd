"""`python -m cairn.common.monitoring [--check] [--root DIR]`: write (or check) the
dashboards, alert rules and kustomize component from the code."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cairn.common.monitoring.files import differences, write


def _default_root() -> Path:
    # The repository this source file sits in (an editable install), else here.
    for parent in Path(__file__).resolve().parents:
        if (parent / "kustomize").is_dir() and (parent / "pyproject.toml").is_file():
            return parent
    return Path.cwd()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cairn.common.monitoring")
    parser.add_argument("--root", type=Path, default=None, help="repository root")
    parser.add_argument(
        "--check", action="store_true", help="fail if a committed file differs from the code"
    )
    args = parser.parse_args(argv)
    root: Path = args.root or _default_root()
    if args.check:
        problems = differences(root)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print("run: python -m cairn.common.monitoring", file=sys.stderr)
        return 1 if problems else 0
    for path in write(root):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
