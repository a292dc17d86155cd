"""`cairn-storage`: run a storage pod.

cairn-storage standalone --port 6648 --shards 3 --data-dir ./data
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

import uvloop

from cairn.common.keyorder import KeyOrder
from cairn.storage.config import NamespaceConfig, StandaloneConfig
from cairn.storage.standalone import LayoutMismatch, StandaloneServer

log = logging.getLogger("cairn.storage")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cairn-storage", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    standalone = commands.add_parser(
        "standalone",
        help="serve every shard of one namespace from this process (replication factor 1)",
    )
    standalone.add_argument("--data-dir", type=Path, required=True, help="where WAL and KV live")
    standalone.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)"
    )
    standalone.add_argument(
        "--port", type=int, default=6648, help="client port; 0 picks a free one"
    )
    standalone.add_argument("--shards", type=int, default=1, help="shard count (fixed at creation)")
    standalone.add_argument("--namespace", default="default")
    standalone.add_argument(
        "--key-order", choices=[o.value for o in KeyOrder], default=KeyOrder.HIERARCHICAL.value
    )
    standalone.add_argument(
        "--advertise", default=None, help="host:port clients should dial (default: bound address)"
    )
    standalone.add_argument("--log-level", default="INFO")
    return parser


async def _run_standalone(config: StandaloneConfig) -> int:
    server = StandaloneServer(config)
    try:
        address = await server.start()
    except LayoutMismatch as error:
        print(f"cairn-storage: {error}", file=sys.stderr)
        return 2
    print(f"cairn-storage listening on {address}", flush=True)
    print(f"cairn-storage data in {config.data_dir.resolve()}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    log.info("shutting down")
    await server.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.shards < 1:
        print("cairn-storage: --shards must be at least 1", file=sys.stderr)
        return 2
    config = StandaloneConfig(
        data_dir=args.data_dir,
        bind_host=args.host,
        port=args.port,
        advertised_address=args.advertise,
        namespaces=(NamespaceConfig(args.namespace, args.shards, KeyOrder(args.key_order)),),
    )
    # uvloop: cheaper per-message event-loop work under grpc.aio (see BASELINES.md).
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_run_standalone(config))


if __name__ == "__main__":
    sys.exit(main())
