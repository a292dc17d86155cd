"""Fixtures for the health sidecar's tests: storage pods, fake controllers and
sidecar processes, all ended after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from health.helpers import FakeController, SidecarProcess
from support.processes import NodeProcess

# -- fixtures ------------------------------------------------------------------------


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Callable[[int], list[NodeProcess]]]:
    started: list[NodeProcess] = []

    def start(count: int) -> list[NodeProcess]:
        new = [NodeProcess(tmp_path / f"node-{len(started) + i}") for i in range(count)]
        for node in new:
            node.start()
        started.extend(new)
        return new

    yield start
    for node in started:
        node.kill()


@pytest.fixture
def controllers() -> Iterator[Callable[..., FakeController]]:
    started: list[FakeController] = []

    def start(port: int = 0) -> FakeController:
        controller = FakeController(port)
        started.append(controller)
        return controller

    yield start
    for controller in started:
        controller.stop()


@pytest.fixture
def sidecars() -> Iterator[Callable[..., SidecarProcess]]:
    started: list[SidecarProcess] = []

    def start(node_name: str, storage_internal: str, *extra: str) -> SidecarProcess:
        sidecar = SidecarProcess(node_name, storage_internal, *extra)
        started.append(sidecar)
        sidecar.start()
        return sidecar

    yield start
    for sidecar in started:
        sidecar.kill()
