"""`cairn perf` as the `cairn` command line runs it: its flags, its settings from the
parsed flags, and the run with its lines and summary printed.

The command is the client's (cairn.client.cli), which imports this module while
building its parser (never when it is itself imported) and, when cairn-kv-bench is
not installed, answers `cairn perf` with what to install: the client library ships
no load generator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import uvloop

from cairn.bench.perf.driver import mode_of, run
from cairn.bench.perf.options import PerfOptions, add_arguments, options_from
from cairn.bench.perf.stats import Summary, format_interval, format_summary, interval_header

__all__ = ["add_arguments", "options_from", "run_command"]


def run_command(
    options: PerfOptions,
    line: Callable[[str], None],
    note: Callable[[str], None],
    emit_json: Callable[[Any], None],
) -> None:
    """Run the load and print it: `line` for answers (stdout), `note` for remarks
    (stderr), `emit_json` for the summary document with --json."""
    # With --json, stdout carries the summary alone; the interval lines go to stderr.
    lines = note if options.json else line
    lines(f"cairn perf: {options.target} ({mode_of(options)})")
    lines(interval_header())
    # On uvloop, like the servers: its event loop costs less per message
    # (docs/performance.md has the figure).
    summary: Summary = uvloop.run(run(options, lambda i: lines(format_interval(i)), note))
    if options.json:
        emit_json(summary.to_dict())
    else:
        line(format_summary(summary))
