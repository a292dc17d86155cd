"""The health sidecar as deployed: a child process (`python -m cairn.health`)
beside a real storage pod, heartbeating to a fake controller."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from cairn.common.heartbeat import Heartbeat, ReplicaReport
from cairn.proto import replication_pb2 as rpb
from health.helpers import FAST_TIMINGS, FakeController, SidecarProcess, wait_until
from support.driver import Driver
from support.processes import NodeProcess

pytestmark = pytest.mark.e2e

SHARD = 0
LIVENESS_FAILURE_MS = 1500
# Probe timeout + probe interval + heartbeat interval, with room for a busy machine.
UNREACHABLE_REPORTED_WITHIN_S = 3.0


def shard_report(heartbeat: Heartbeat, shard: int = SHARD) -> ReplicaReport | None:
    return next((r for r in heartbeat.replicas if r.shard == shard), None)


def has_role(role: str) -> Callable[[Heartbeat], bool]:
    def check(heartbeat: Heartbeat) -> bool:
        report = shard_report(heartbeat)
        return heartbeat.storage_reachable and report is not None and report.role == role

    return check


def test_sidecar_reports_its_pod_through_election_hang_and_crash(
    nodes: Callable[[int], list[NodeProcess]],
    controllers: Callable[..., FakeController],
    sidecars: Callable[..., SidecarProcess],
) -> None:
    pods = nodes(3)
    controller = controllers()
    watched = pods[:2]
    cars = [
        sidecars(
            f"storage-{i}", pod.internal_address,
            "--controller", controller.url, "--label", f"zone=z{i}",
            "--liveness-failure-ms", str(LIVENESS_FAILURE_MS), *FAST_TIMINGS,
        )
        for i, pod in enumerate(watched)
    ]  # fmt: skip

    # A pod with no replica is ready, and says who it is.
    for i, (pod, car) in enumerate(zip(watched, cars, strict=True)):
        heartbeat = controller.wait_for(car.node_name, lambda h: h.storage_reachable)
        assert (heartbeat.public_address, heartbeat.internal_address) == (
            pod.address,
            pod.internal_address,
        )
        assert heartbeat.labels == {"zone": f"z{i}"}
        assert heartbeat.replicas == ()
        assert car.get("/readyz").status_code == 200

    driver = Driver()
    try:
        # Fenced (NewTerm, no leader yet): not ready, and why.
        driver.stub(pods[0]).NewTerm(
            rpb.NewTermRequest(shard=SHARD, term=1, spec=rpb.ShardSpec(namespace="default")),
            timeout=5.0,
        )
        controller.wait_for(cars[0].node_name, has_role("fenced"))
        answer = cars[0].get("/readyz")
        assert answer.status_code == 503
        assert answer.json() == {
            "ready": False,
            "reasons": [f"shard {SHARD}: fenced, not leader or follower"],
        }

        leader = driver.elect(SHARD, pods)
        caught_up_offset = driver.wait_caught_up(SHARD)
    finally:
        driver.close()
    leader_name = f"storage-{pods.index(leader)}"
    assert leader in watched, "the driver elects the first of equal heads"
    (follower_car,) = (car for car in cars if car.node_name != leader_name)
    (leader_car,) = (car for car in cars if car.node_name == leader_name)

    def caught_up(heartbeat: Heartbeat) -> bool:
        # Earlier heartbeats may show the term's start, before the first commit.
        report = shard_report(heartbeat)
        return (
            has_role("leader")(heartbeat)
            and report is not None
            and report.commit_offset >= caught_up_offset
            and all(f.voting and f.acked_offset >= caught_up_offset for f in report.followers)
        )

    report = shard_report(controller.wait_for(leader_name, caught_up))
    assert report is not None
    assert report.namespace == "default"
    assert report.leader_internal_address == leader.internal_address
    assert report.term >= 1
    assert report.head_term == report.term
    assert report.head_offset == report.commit_offset == caught_up_offset
    assert sorted(f.internal_address for f in report.followers) == sorted(
        p.internal_address for p in pods if p is not leader
    )
    follower_beat = controller.wait_for(follower_car.node_name, has_role("follower"))
    follower_report = shard_report(follower_beat)
    assert follower_report is not None
    assert follower_report.leader_internal_address == leader.internal_address
    for car in cars:
        wait_until(f"{car.node_name} ready", lambda car=car: car.get("/readyz").status_code == 200)

    def leader_status() -> dict[str, Any] | None:
        status: dict[str, Any] = leader_car.get("/status").json()
        shards = status["shards"]
        caught_up = shards and shards[0]["commitOffset"] >= caught_up_offset
        return status if caught_up else None

    status = wait_until("the leader's status after catching up", leader_status)
    assert status["node"] == leader_name and status["storageReachable"] is True
    (shard,) = status["shards"]
    assert shard["role"] == "leader"
    assert [f["lag"] for f in shard["followers"]] == [0, 0]

    # A hung pod: its sidecar still beats, and says the pod is unreachable.
    stopped_pod, stopped_car = watched[0], cars[0]
    stopped_pod.signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        unreachable = controller.wait_for(
            stopped_car.node_name, lambda h: not h.storage_reachable, since_s=stopped_at
        )
        assert time.monotonic() - stopped_at < UNREACHABLE_REPORTED_WITHIN_S
        assert unreachable.internal_address == stopped_pod.internal_address
        assert unreachable.replicas == ()
        answer = stopped_car.get("/readyz")
        assert answer.status_code == 503
        assert answer.json()["reasons"][0].startswith("storage unreachable: ")
        assert stopped_car.get("/livez").status_code == 200
    finally:
        stopped_pod.signal(signal.SIGCONT)
    resumed_at = time.monotonic()
    controller.wait_for(stopped_car.node_name, lambda h: h.storage_reachable, since_s=resumed_at)
    wait_until("ready again", lambda: stopped_car.get("/readyz").status_code == 200)

    # A dead pod: live for liveness-failure-ms more (the kubelet would then restart it).
    stopped_pod.kill()
    killed_at = time.monotonic()
    assert stopped_car.get("/livez").status_code == 200
    wait_until("livez failing", lambda: stopped_car.get("/livez").status_code == 503)
    assert time.monotonic() - killed_at >= LIVENESS_FAILURE_MS / 1000 - 0.2
    reasons = stopped_car.get("/livez").json()["reasons"]
    assert reasons[0].startswith("no successful probe for ")
    controller.wait_for(stopped_car.node_name, lambda h: not h.storage_reachable, since_s=killed_at)

    # The other sidecar was never disturbed, and both stop cleanly.
    assert cars[1].get("/livez").status_code == 200
    for car in cars:
        assert car.stop() == 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_sidecar_outlives_its_controller_and_an_absent_pod(
    controllers: Callable[..., FakeController],
    sidecars: Callable[..., SidecarProcess],
) -> None:
    # Nothing listens on either port: no storage pod, no controller yet.
    storage_port, controller_port = free_port(), free_port()
    car = sidecars(
        "storage-9", f"127.0.0.1:{storage_port}",
        "--controller", f"http://127.0.0.1:{controller_port}", *FAST_TIMINGS,
    )  # fmt: skip
    time.sleep(0.5)
    assert car.get("/livez").status_code == 200
    answer = car.get("/readyz")
    assert answer.status_code == 503
    assert answer.json()["reasons"][0].startswith("no successful probe yet: UNAVAILABLE")
    status = car.get("/status").json()
    assert status["storageReachable"] is False and status["lastProbeAgeMs"] is not None

    # The controller comes up: heartbeats arrive, saying the pod is unreachable.
    controller = controllers(controller_port)
    heartbeat = controller.wait_for("storage-9")
    assert not heartbeat.storage_reachable
    assert (heartbeat.public_address, heartbeat.internal_address) == ("", "")

    # It answers errors for a while: heartbeats keep coming.
    controller.answer = 503
    failing_since = time.monotonic()
    wait_until("refused heartbeats", lambda: len(controller.heartbeats(since_s=failing_since)) > 4)
    controller.answer = 200

    # It goes down and comes back: the sidecar resumes.
    controller.stop()
    time.sleep(0.5)
    assert car.get("/livez").status_code == 200
    back = controllers(controller_port)
    back.wait_for("storage-9")
    assert car.stop() == 0
    assert "Traceback" not in car.log_text()
