from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

# Imported before any Cairn service package: the test process then runs gRPC the
# way a program outside Cairn does (grpcio's defaults, EventEngine I/O), whatever
# order the tests are collected in. The pods and other Cairn processes the tests
# start choose poller I/O themselves (cairn.common.grpc_runtime, tested there).
import grpc  # noqa: F401
import pytest

from support import oxia_startup
from support.processes import StandaloneProcess

oxia_startup.install()


@pytest.fixture
def standalone_factory(tmp_path: Path) -> Iterator[Callable[..., StandaloneProcess]]:
    started: list[StandaloneProcess] = []

    def start(
        shards: int | None = 1, data_dir: Path | None = None, *extra: str
    ) -> StandaloneProcess:
        server = StandaloneProcess(data_dir or tmp_path / f"data-{len(started)}", shards, extra)
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill()
