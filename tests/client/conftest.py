"""A standalone server shared by a module's client tests (each test writes under
its own key prefix), and a way to run a coroutine test against it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.processes import StandaloneProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data_dir: Path = tmp_path_factory.mktemp("client-server")
    process = StandaloneProcess(
        data_dir,
        shards=None,
        extra_args=(
            "--namespace-spec",
            "default:3",
            "--namespace-spec",
            "natural:2:natural",
        ),
    )
    address = process.start()
    try:
        yield address
    finally:
        process.stop()


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    """A key prefix of this test's own: `/<test name>/`."""
    return "/" + re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-") + "/"
