"""The sidecar's pure decisions: heartbeats, liveness, readiness, lag."""

from __future__ import annotations

import dataclasses

import pytest

from cairn.common.heartbeat import (
    FollowerReport,
    ReplicaReport,
    heartbeat_document,
    parse_heartbeat,
    replica_report_of,
    role_name,
)
from cairn.health.core import (
    PodStatus,
    ProbeRecord,
    build_heartbeat,
    follower_lag,
    liveness,
    pod_status_of,
    readiness,
    status_document,
)
from cairn.health.pusher import FailureLog
from cairn.health.settings import parse_settings
from cairn.proto import replication_pb2 as rpb

LEADER_ADDRESS = "10.0.0.1:6649"
FOLLOWER_A = "10.0.0.2:6649"
FOLLOWER_B = "10.0.0.3:6649"


def leader_status(commit_offset: int = 100) -> rpb.ShardStatus:
    return rpb.ShardStatus(
        shard=3,
        spec=rpb.ShardSpec(namespace="ns"),
        role=rpb.LEADER,
        term=7,
        head=rpb.EntryId(term=7, offset=commit_offset + 2),
        commit_offset=commit_offset,
        first_offset=0,
        leader=rpb.Node(public_address="10.0.0.1:6648", internal_address=LEADER_ADDRESS),
        followers=[
            rpb.FollowerStatus(
                node=rpb.Node(public_address="10.0.0.2:6648", internal_address=FOLLOWER_A),
                acked_offset=commit_offset - 5,
                voting=True,
                state="streaming",
            ),
            rpb.FollowerStatus(
                node=rpb.Node(public_address="10.0.0.3:6648", internal_address=FOLLOWER_B),
                acked_offset=-1,
                voting=False,
                state="snapshot",
            ),
        ],
        durable_offset=commit_offset + 1,
        applied_offset=commit_offset - 1,
    )


def replica(role: str, shard: int = 1, **changes: object) -> ReplicaReport:
    base = ReplicaReport(
        shard=shard,
        namespace="ns",
        role=role,
        term=2,
        head_term=2,
        head_offset=10,
        commit_offset=10,
        durable_offset=10,
        applied_offset=10,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def follower(address: str, acked_offset: int, voting: bool = True) -> FollowerReport:
    return FollowerReport(address, acked_offset, voting, "streaming")


def pod(*replicas: ReplicaReport) -> PodStatus:
    return PodStatus("10.0.0.1:6648", LEADER_ADDRESS, replicas)


def succeeded(*replicas: ReplicaReport, at_s: float = 10.0) -> ProbeRecord:
    return ProbeRecord().after_success(pod(*replicas), at_s)


# -- converting the pod's status ------------------------------------------------------


def test_replica_report_of_a_leader_status() -> None:
    report = replica_report_of(leader_status())
    assert report == ReplicaReport(
        shard=3,
        namespace="ns",
        role="leader",
        term=7,
        head_term=7,
        head_offset=102,
        commit_offset=100,
        durable_offset=101,
        applied_offset=99,
        leader_internal_address=LEADER_ADDRESS,
        followers=(
            FollowerReport(FOLLOWER_A, 95, True, "streaming"),
            FollowerReport(FOLLOWER_B, -1, False, "snapshot"),
        ),
    )


def test_replica_report_of_a_fenced_replica_without_leader() -> None:
    status = rpb.ShardStatus(
        shard=0, role=rpb.FENCED, term=4, head=rpb.EntryId(term=-1, offset=-1), commit_offset=-1
    )
    report = replica_report_of(status)
    assert (report.role, report.leader_internal_address, report.followers) == ("fenced", "", ())
    assert (report.head_term, report.head_offset) == (-1, -1)


@pytest.mark.parametrize(
    ("role", "name"),
    [
        (rpb.NOT_MEMBER, "not_member"),
        (rpb.FENCED, "fenced"),
        (rpb.FOLLOWER, "follower"),
        (rpb.LEADER, "leader"),
        (42, "unknown_42"),
    ],
)
def test_role_names(role: int, name: str) -> None:
    assert role_name(role) == name


def test_pod_status_of_a_response_sorts_shards_and_takes_the_node() -> None:
    response = rpb.GetStatusResponse(
        node=rpb.Node(public_address="p:1", internal_address="i:2"),
        shards=[leader_status(), rpb.ShardStatus(shard=1, role=rpb.FOLLOWER)],
    )
    status = pod_status_of(response)
    assert (status.public_address, status.internal_address) == ("p:1", "i:2")
    assert [r.shard for r in status.replicas] == [1, 3]


# -- lag ---------------------------------------------------------------------------


def test_follower_lag_counts_committed_entries_not_acknowledged() -> None:
    leader = replica("leader", commit_offset=100)
    assert follower_lag(leader, follower(FOLLOWER_A, 90)) == 10
    assert follower_lag(leader, follower(FOLLOWER_A, 100)) == 0
    # Ahead of the commit offset (acked entries the leader has not committed yet).
    assert follower_lag(leader, follower(FOLLOWER_A, 104)) == 0
    # Nothing acknowledged in this term yet.
    assert follower_lag(leader, follower(FOLLOWER_A, -1)) == 101


# -- readiness -----------------------------------------------------------------------


def test_not_ready_before_any_probe() -> None:
    verdict = readiness(ProbeRecord(), max_lag_entries=10)
    assert not verdict.ok
    assert verdict.reasons == ("no successful probe yet",)


def test_not_ready_before_a_successful_probe_says_why_probes_fail() -> None:
    record = ProbeRecord().after_failure("UNAVAILABLE: connection refused", 1.0)
    verdict = readiness(record, max_lag_entries=10)
    assert verdict.reasons == ("no successful probe yet: UNAVAILABLE: connection refused",)


def test_ready_with_no_replicas_and_with_leaders_and_followers() -> None:
    assert readiness(succeeded(), 10).ok
    leader = replica("leader", shard=1, followers=(follower(FOLLOWER_A, 10),))
    following = replica("follower", shard=2, leader_internal_address=FOLLOWER_A)
    assert readiness(succeeded(leader, following), 10).ok


def test_not_ready_when_the_latest_probe_failed() -> None:
    record = succeeded(replica("leader")).after_failure("no answer within 500 ms", 11.0)
    verdict = readiness(record, 10)
    assert not verdict.ok
    assert verdict.reasons == ("storage unreachable: no answer within 500 ms",)


def test_not_ready_while_a_replica_has_no_role() -> None:
    record = succeeded(replica("leader", shard=1), replica("fenced", shard=2))
    verdict = readiness(record, 10)
    assert not verdict.ok
    assert verdict.reasons == ("shard 2: fenced, not leader or follower",)
    assert not readiness(succeeded(replica("not_member", shard=5)), 10).ok


def test_not_ready_when_a_voting_follower_lags_too_far() -> None:
    leader = replica(
        "leader",
        shard=4,
        commit_offset=1000,
        followers=(follower(FOLLOWER_A, 995), follower(FOLLOWER_B, 900)),
    )
    verdict = readiness(succeeded(leader), max_lag_entries=50)
    assert not verdict.ok
    assert verdict.reasons == (
        f"shard 4: follower {FOLLOWER_B} is 100 entries behind commit offset 1000 (max 50)",
    )
    # Exactly at the limit is within it.
    assert readiness(succeeded(leader), max_lag_entries=100).ok


def test_followers_not_voting_yet_do_not_count() -> None:
    leader = replica(
        "leader", commit_offset=1000, followers=(follower(FOLLOWER_A, -1, voting=False),)
    )
    assert readiness(succeeded(leader), max_lag_entries=10).ok


def test_every_reason_is_given() -> None:
    leader = replica("leader", shard=1, commit_offset=500, followers=(follower(FOLLOWER_A, 0),))
    verdict = readiness(succeeded(leader, replica("fenced", shard=2)), max_lag_entries=10)
    assert len(verdict.reasons) == 2


# -- liveness ------------------------------------------------------------------------


def test_live_before_any_success_however_long_probes_fail() -> None:
    record = ProbeRecord().after_failure("UNAVAILABLE", 1000.0)
    assert liveness(record, now_s=1000.0, liveness_failure_ms=1000).ok


def test_live_while_probes_succeed() -> None:
    assert liveness(succeeded(at_s=10.0), now_s=500.0, liveness_failure_ms=1000).ok


def test_not_live_once_probes_failed_longer_than_the_limit() -> None:
    record = succeeded(at_s=10.0).after_failure("no answer within 500 ms", 12.0)
    assert liveness(record, now_s=12.0, liveness_failure_ms=3000).ok
    assert liveness(record, now_s=13.0, liveness_failure_ms=3000).ok
    verdict = liveness(record, now_s=13.5, liveness_failure_ms=3000)
    assert not verdict.ok
    assert verdict.reasons == (
        "no successful probe for 3500 ms (limit 3000 ms): no answer within 500 ms",
    )


def test_a_success_makes_the_pod_live_again() -> None:
    record = succeeded(at_s=10.0).after_failure("x", 20.0).after_success(pod(), 21.0)
    assert liveness(record, now_s=21.0, liveness_failure_ms=1000).ok


# -- heartbeat -----------------------------------------------------------------------


def test_heartbeat_of_a_reachable_pod() -> None:
    replicas = (
        replica(
            "leader",
            followers=(follower(FOLLOWER_A, 9),),
            term_start_offset=7,
            commit_term=2,
        ),
    )
    heartbeat = build_heartbeat("storage-0", {"zone": "a"}, succeeded(*replicas), 1234)
    assert heartbeat.node == "storage-0"
    assert (heartbeat.public_address, heartbeat.internal_address) == (
        "10.0.0.1:6648",
        LEADER_ADDRESS,
    )
    assert heartbeat.storage_reachable
    assert heartbeat.sent_at_ms == 1234
    assert heartbeat.labels == {"zone": "a"}
    assert heartbeat.replicas == replicas
    # What the controller parses is what was built.
    assert parse_heartbeat(heartbeat_document(heartbeat)) == heartbeat


def test_heartbeat_of_an_unreachable_pod_keeps_addresses_but_no_replicas() -> None:
    record = succeeded(replica("leader")).after_failure("no answer within 500 ms", 11.0)
    heartbeat = build_heartbeat("storage-0", {}, record, 1)
    assert not heartbeat.storage_reachable
    assert heartbeat.internal_address == LEADER_ADDRESS
    assert heartbeat.replicas == ()


def test_heartbeat_before_any_success_names_only_the_node() -> None:
    heartbeat = build_heartbeat("storage-2", {}, ProbeRecord().after_failure("x", 1.0), 1)
    assert (heartbeat.node, heartbeat.public_address, heartbeat.internal_address) == (
        "storage-2",
        "",
        "",
    )
    assert not heartbeat.storage_reachable
    assert parse_heartbeat(heartbeat_document(heartbeat)) == heartbeat


# -- status --------------------------------------------------------------------------


def test_status_document() -> None:
    leader = replica("leader", shard=1, commit_offset=50, followers=(follower(FOLLOWER_A, 45),))
    record = succeeded(leader, at_s=10.0).after_failure("UNAVAILABLE: gone", 10.5)
    live = liveness(record, 11.0, 30_000)
    ready = readiness(record, 10)
    document = status_document("storage-0", record, 11.0, live, ready)
    assert document["node"] == "storage-0"
    assert document["internalAddress"] == LEADER_ADDRESS
    assert document["storageReachable"] is False
    assert (document["lastProbeAgeMs"], document["lastSuccessAgeMs"]) == (500, 1000)
    assert (document["live"], document["ready"]) == (True, False)
    assert document["reasons"] == ["storage unreachable: UNAVAILABLE: gone"]
    (shard,) = document["shards"]
    assert (shard["shard"], shard["role"], shard["commitOffset"]) == (1, "leader", 50)
    assert shard["followers"][0]["lag"] == 5


def test_status_document_before_any_probe() -> None:
    record = ProbeRecord()
    document = status_document(
        "storage-0", record, 5.0, liveness(record, 5.0, 1000), readiness(record, 1)
    )
    assert document["lastProbeAgeMs"] is None
    assert document["shards"] == []
    assert (document["live"], document["ready"]) == (True, False)


# -- settings and logging ------------------------------------------------------------


def test_settings_defaults_and_labels() -> None:
    settings = parse_settings(
        [
            "--node-name", "storage-0", "--storage-internal", "127.0.0.1:6649", "--insecure",
            "--label", "zone=eu-1a", "--label", "rack=r1=x",
            "--controller", "http://controller:8080/",
        ]
    )  # fmt: skip
    assert settings.labels == {"zone": "eu-1a", "rack": "r1=x"}
    assert settings.heartbeat_url == "http://controller:8080/v1/heartbeats"
    assert (settings.host, settings.port) == ("127.0.0.1", 8081)
    assert (settings.probe_interval_ms, settings.probe_timeout_ms) == (250, 1000)
    assert (settings.heartbeat_interval_ms, settings.heartbeat_timeout_ms) == (500, 1000)
    assert (settings.liveness_failure_ms, settings.ready_max_lag_entries) == (30_000, 1000)


def test_settings_without_controller_send_no_heartbeats() -> None:
    settings = parse_settings(["--node-name", "s", "--storage-internal", "h:1", "--insecure"])
    assert settings.heartbeat_url is None
    assert settings.tls_dir is None


@pytest.mark.parametrize(
    "extra",
    [
        ("--label", "novalue"),
        ("--label", "a=1", "--label", "a=2"),
        ("--controller", "controller:8080"),
        ("--probe-interval-ms", "0"),
        ("--ready-max-lag", "-1"),
        ("--port", "70000"),
        ("--log-level", "verbose"),
        # Transport security is chosen explicitly: neither, or both, is refused.
        ("--insecure", "--tls-dir", "certs"),
    ],
)
def test_bad_settings_are_refused(
    extra: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    security = () if "--insecure" in extra else ("--insecure",)
    with pytest.raises(SystemExit) as exit_info:
        parse_settings(["--node-name", "s", "--storage-internal", "h:1", *security, *extra])
    assert exit_info.value.code == 2
    capsys.readouterr()


def test_failure_log_is_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    now_s = [0.0]
    failures = FailureLog("heartbeat", interval_s=30.0, clock_s=lambda: now_s[0])
    with caplog.at_level("INFO", logger="cairn.health.pusher"):
        for step in range(100):
            now_s[0] = step * 0.5
            failures.failed("down")
        failures.succeeded()
    messages = [record.getMessage() for record in caplog.records]
    # At 0 s, 30 s (after 59 unlogged) and the recovery.
    assert messages == [
        "heartbeat failed: down",
        "heartbeat failed: down (59 more since the last report)",
        "heartbeat succeeded again after 100 failures",
    ]


def test_failure_log_reports_a_new_kind_of_failure_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures = FailureLog("heartbeat", interval_s=30.0, clock_s=lambda: 0.0)
    with caplog.at_level("INFO", logger="cairn.health.pusher"):
        failures.failed("ConnectError", "refused")
        failures.failed("ConnectError", "refused")
        failures.failed("HTTP 500", "oops")
        failures.failed("HTTP 500", "oops")
    assert [record.getMessage() for record in caplog.records] == [
        "heartbeat failed: ConnectError: refused",
        "heartbeat failed: HTTP 500: oops (1 more since the last report)",
    ]
