"""The `cairn` command's entry point (the console script).

The command is a program, not the library: like Cairn's services it has gRPC do
socket I/O on the poller thread (cairn.common.grpc_runtime), which `cairn perf`
needs to measure one-operation requests without its own thread crossings. The
setting must be in place before grpc is first imported, so before the command
line's modules load; the library itself leaves the gRPC settings of the programs
that import it alone.
"""

from cairn.common.grpc_runtime import use_poller_io

use_poller_io()

from cairn.client.cli import main  # noqa: E402  (after the gRPC setting, on purpose)

__all__ = ["main"]
