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


def test_a_port_in_time_wait_is_free_for_the_servers() -> None:
    # A server stopped seconds ago leaves its accepted connections in TIME_WAIT;
    # the servers bind with SO_REUSEADDR, so the launcher's probe must too, or
    # it moves a restarted cluster off its conventional ports.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()  # the server side closes first: its end waits in TIME_WAIT
        client.close()
    assert launcher.free_port("127.0.0.1", port) == port


def test_ports_picked_instead_of_busy_conventional_ones_are_given_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "cluster"
    directory.mkdir()
    # An earlier run found the conventional ports busy and saved others; now
    # the conventional ones are free (the probe says so for every port).
    free = set()

    def probe(host: str, preferred: int = 0) -> int:
        free.add(preferred)
        return preferred

    fallback = {
        "controller": 40001,
        "gateway": 40002,
        "pods": {"storage-1": {"public": 40003, "internal": 6749, "health": 40005}},
        "metrics": {"storage-1-health": 40006, "controller": 9091},
    }
    (directory / "ports.json").write_text(json.dumps(fallback))
    monkeypatch.setattr(launcher, "free_port", probe)
    cluster = LocalCluster(directory, preferred_ports=True, tls=False)
    loaded = Ports.load(directory / "ports.json")
    assert loaded is not None
    cluster.ports = loaded
    cluster._reclaim_conventional_ports()
    saved = Ports.load(directory / "ports.json")
    assert saved is not None
    assert (saved.controller, saved.gateway) == (launcher.CONTROLLER_PORT, launcher.GATEWAY_PORT)
    assert vars(saved.pods["storage-1"]) == {"public": 6748, "internal": 6749, "health": 8181}
    assert saved.metrics == {"storage-1-health": 9193, "controller": 9091}
    assert 6749 not in free  # a port already conventional is not probed


def test_a_conventional_port_still_busy_keeps_the_saved_one(
    tmp_path: Path, taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "cluster"
    directory.mkdir()
    monkeypatch.setattr(launcher, "CONTROLLER_PORT", taken_port)
    (directory / "ports.json").write_text(json.dumps({"controller": 40001, "pods": {}}))
    cluster = LocalCluster(directory, preferred_ports=True, tls=False)
    loaded = Ports.load(directory / "ports.json")
    assert loaded is not None
    cluster.ports = loaded
    cluster._reclaim_conventional_ports()
    assert cluster.ports.controller == 40001


def test_a_port_already_handed_to_one_process_is_never_handed_to_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A port found free stays free until its process binds it: found again
    # for the next process, two of the cluster's processes would share it and
    # the second would never start (a health sidecar restarting on a port
    # another process of its cluster held, seen in a suite run).
    found = iter([20001, 20001, 20001, 20002])
    monkeypatch.setattr(launcher, "free_port", lambda host, preferred=0: next(found))
    cluster = small_cluster(tmp_path / "cluster")
    first = cluster.metrics_port("storage-0", 9090)
    second = cluster.metrics_port("storage-0-health", 9093)
    assert (first, second) == (20001, 20002)
