from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from support.processes import StandaloneProcess


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
