"""The local launcher's start: ports it picked just before that another process
took first, and a start that fails part way (real processes, real ports)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.controller.local import launcher
from cairn.controller.local.launcher import ExitedAtStart, LocalCluster, Ports


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another process holds (listening) for the whole test."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def small_cluster(directory: Path) -> LocalCluster:
    return LocalCluster(
        directory,
        pods=1,
        shards=1,
        replication_factor=1,
        preferred_ports=False,
        gateway=False,
        tls=False,
    )


@pytest.mark.e2e
def test_a_picked_port_taken_before_the_child_binds_it_is_picked_again(
    tmp_path: Path, taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_free_port = launcher.free_port
    handed_out: list[int] = []

    def free_port_then_lose_the_race(host: str, preferred: int = 0) -> int:
        # The first port handed out (the controller's) is bound by another process
        # before the controller starts: free_port cannot hold what it found free.
        port = taken_port if not handed_out else real_free_port(host, preferred)
        handed_out.append(port)
        return port

    monkeypatch.setattr(launcher, "free_port", free_port_then_lose_the_race)
    cluster = small_cluster(tmp_path / "cluster")
    try:
        cluster.start()
        assert cluster.controller is not None and cluster.controller.exited() is None
        assert handed_out[0] == taken_port
        assert cluster.ports.controller not in (0, taken_port)
        saved = Ports.load(tmp_path / "cluster" / "ports.json")
        assert saved is not None and saved.controller == cluster.ports.controller
        assert [name for name in cluster.pods] == ["storage-0"]
        pod, sidecar = cluster.pods["storage-0"]
        assert pod.exited() is None and sidecar.exited() is None
    finally:
        cluster.stop()


@pytest.mark.e2e
def test_a_start_that_fails_stops_what_it_started(tmp_path: Path, taken_port: int) -> None:
    directory = tmp_path / "cluster"
    directory.mkdir()
    # Ports from an earlier run are the pod's address: never changed, so a pod whose
    # port is taken fails the start, which must not leave the controller running.
    controller_port = launcher.free_port("127.0.0.1")
    spare_ports = [launcher.free_port("127.0.0.1") for _ in range(2)]
    (directory / "ports.json").write_text(
        json.dumps(
            {
                "controller": controller_port,
                "pods": {
                    "storage-0": {
                        "public": taken_port,
                        "internal": spare_ports[0],
                        "health": spare_ports[1],
                    }
                },
            }
        )
    )
    cluster = small_cluster(directory)
    with pytest.raises(ExitedAtStart, match="storage-0 exited at start"):
        cluster.start()
    controller = cluster.controller
    assert controller is not None
    assert controller.process is None  # stopped (and its log closed) by the failed start
    assert cluster.ports.pods["storage-0"].public == taken_port  # kept: not picked here
    assert cluster.pods == {}


def test_metrics_ports_are_picked_once_and_kept(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    directory.mkdir()
    cluster = LocalCluster(directory, preferred_ports=True, tls=False)
    conventional = launcher.POD_METRICS_PORTS[0] + launcher.POD_PORT_STRIDE
    assert cluster._pod_metrics_port("storage-1", 0) == conventional
    port = cluster.metrics_port("storage-1", 0)  # 0: any free port
    assert cluster.metrics_port("storage-1", 0) == port
    saved = Ports.load(directory / "ports.json")
    assert saved is not None and saved.metrics == {"storage-1": port}
    # A ports.json written before metrics ports existed still loads.
    (directory / "ports.json").write_text(json.dumps({"controller": 1, "pods": {}}))
    older = Ports.load(directory / "ports.json")
    assert older is not None and older.metrics == {}
