"""The installed version of a Cairn distribution, and the `--version` option
every console script has.

Each package states its own distribution (`cairn-kv-client` for `cairn.client`)
and exposes `__version__` read from the installed metadata, so the number lives
in one place: the distribution's pyproject.toml.
"""

from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError, version

# Code run from a source tree that was never installed has no metadata to read.
UNKNOWN_VERSION = "0+unknown"


def distribution_version(distribution: str) -> str:
    """The installed version of `distribution` (e.g. "cairn-kv-client")."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return UNKNOWN_VERSION


def add_version_option(parser: argparse.ArgumentParser, distribution: str) -> None:
    """`--version`: prints `PROG VERSION (DISTRIBUTION)` and exits 0."""
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {distribution_version(distribution)} ({distribution})",
        help="print the version and exit",
    )
