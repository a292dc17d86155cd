"""How Cairn's own processes have gRPC do its socket I/O.

grpcio 1.85 does a channel's and a server's socket I/O on its EventEngine
threads by default. A message then crosses threads twice before our code sees it:
from an EventEngine thread to the completion queue, from the completion queue's
poller thread to the event loop, each crossing a wake-up and a GIL hand-over.
With the EventEngine experiments turned off, gRPC falls back to its epoll
poller, run by the thread that already waits on the completion queue: one
crossing fewer per message.

That cuts the server's CPU per request and raises the throughput of single-op
requests; with many operations a request, per-op work, not messages, bounds it
(measurements: docs/performance.md, "gRPC socket I/O on the poller thread").

The setting must be in the environment before `grpc` is first imported (gRPC
reads it once, when its core starts), so each service package applies it in
its `__init__`, ahead of any of its modules. An operator's own
`GRPC_EXPERIMENTS` wins; child processes inherit the setting.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

GRPC_EXPERIMENTS_ENV = "GRPC_EXPERIMENTS"

# The experiments that move socket I/O onto EventEngine threads: a channel's
# connections, a server's listener and accepted connections, and the rest.
POLLER_IO_EXPERIMENTS = ",".join(
    (
        "-event_engine_client",
        "-event_engine_listener",
        "-event_engine_for_all_other_endpoints",
    )
)


def use_poller_io(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Ask gRPC for poller-thread I/O unless the environment already says otherwise.

    True when the setting is in force for this process: set here or earlier and
    gRPC not yet started. False when gRPC was imported first (this process keeps
    what it started with; its children still get the setting) or when the
    operator chose other experiments.
    """
    chosen = environ.setdefault(GRPC_EXPERIMENTS_ENV, POLLER_IO_EXPERIMENTS)
    return chosen == POLLER_IO_EXPERIMENTS and "grpc" not in sys.modules
