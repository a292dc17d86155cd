"""`cairn-health`: the health sidecar of a storage pod.

cairn-health --node-name storage-0 --storage-internal 127.0.0.1:6649 \
    --controller http://cairn-controller:8080 --label zone=eu-1a
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

from cairn.common.logs import setup_logging
from cairn.health.service import LISTENING_PREFIX, run
from cairn.health.settings import Settings, parse_settings

log = logging.getLogger("cairn.health")


def _announce(address: str) -> None:
    # Tests and scripts read the chosen port from this line.
    print(f"{LISTENING_PREFIX}{address}", flush=True)


def _announce_metrics(address: str, scheme: str = "http") -> None:
    print(f"cairn-health: metrics on {scheme}://{address}/metrics", flush=True)


async def _main(settings: Settings) -> int:
    # Handlers first: a SIGTERM right after start must still stop cleanly.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    log.info(
        "node %s: probing %s, heartbeats to %s",
        settings.node_name,
        settings.storage_internal,
        settings.heartbeat_url or "nobody",
    )
    try:
        scheme = "https" if settings.tls_dir and not settings.metrics_plaintext else "http"
        await run(
            settings,
            stop,
            on_listening=_announce,
            on_metrics=lambda address: _announce_metrics(address, scheme),
        )
    except OSError as error:
        where = f"{settings.host}:{settings.port}"
        print(f"cairn-health: cannot serve on {where}: {error}", file=sys.stderr)
        return 1
    log.info("stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_settings(argv)
    setup_logging("cairn-health", settings.log_level, settings.log_format, node=settings.node_name)
    # httpx logs every request at INFO: a line per heartbeat. The pusher logs what
    # matters (failures, recovery).
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
    return asyncio.run(_main(settings))


if __name__ == "__main__":
    sys.exit(main())
