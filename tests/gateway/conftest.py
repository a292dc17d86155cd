"""Fixtures of the gateway's tests: a standalone storage server with three
namespaces and two gateway processes in front of it (one address, as far as
the tests care: they alternate between them), started once per test session;
a whole local cluster (`cairn-local`) for the admin endpoints."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.helpers import GatewayProcess, LocalClusterProcess
from support.processes import StandaloneProcess

NAMESPACE_SPECS = (
    "--namespace-spec", "default:3",
    "--namespace-spec", "natural:2:natural",
    "--namespace-spec", "quiet:1:hierarchical:notifications=off",
)  # fmt: skip
# Short, so the keep-alive comments show within a test.
FEED_KEEPALIVE_S = 0.5


@pytest.fixture(scope="session")
def storage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    server = StandaloneProcess(tmp_path_factory.mktemp("gateway-storage"), None, NAMESPACE_SPECS)
    server.start()
    yield server
    server.kill()


@pytest.fixture(scope="session")
def gateways(storage: StandaloneProcess) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    started = []
    try:
        for _ in range(2):
            gateway = GatewayProcess(
                [storage.address], extra_args=["--feed-keepalive-s", str(FEED_KEEPALIVE_S)]
            )
            gateway.start()
            started.append(gateway)
        yield started[0], started[1]
    finally:
        for gateway in started:
            gateway.stop()
    for gateway in started:
        assert_no_errors_logged("".join(gateway.output))


@pytest.fixture
def g1(gateways: tuple[GatewayProcess, GatewayProcess]) -> Iterator[httpx.Client]:
    with gateways[0].client() as client:
        yield client


@pytest.fixture
def g2(gateways: tuple[GatewayProcess, GatewayProcess]) -> Iterator[httpx.Client]:
    with gateways[1].client() as client:
        yield client


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test writes under (the storage is shared)."""
    return f"/t{uuid.uuid4().hex[:12]}/"


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusterProcess]:
    directory: Path = tmp_path_factory.mktemp("gateway-cluster")
    launcher = LocalClusterProcess(directory / "cluster")
    try:
        launcher.start()
        yield launcher
    finally:
        # cairn-local stops its children in order on SIGTERM.
        launcher.stop(timeout_s=60)
    log = launcher.directory / "logs" / "gateway.log"
    assert_no_errors_logged(log.read_text(errors="replace"))


def assert_no_errors_logged(output: str) -> None:
    """A gateway logs an error only for a bug (an unexpected exception, answered
    as a 500 problem): none may have happened during the tests."""
    bad = [line for line in output.splitlines() if "ERROR" in line or "Traceback" in line]
    assert not bad, output[-5000:]
