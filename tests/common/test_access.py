"""The internal authorization table (cairn.common.access): pure decisions."""

from __future__ import annotations

import pytest

from cairn.common.access import (
    COORDINATION,
    HEALTH,
    INTERNAL_GRPC_RULES,
    REPLICATION,
    Verdict,
    allowed_roles,
    decide_heartbeat,
    decide_internal_call,
)
from cairn.common.identity import Principal, Role

CONTROLLER = Principal(Role.CONTROLLER, "controller")
POD = Principal(Role.STORAGE, "storage-1")
SIDECAR = Principal(Role.SIDECAR, "storage-0")
GATEWAY = Principal(Role.GATEWAY, "gateway")
USER = Principal(Role.USER, "alice")

CHANGING = ["NewTerm", "BecomeLeader", "AddFollower", "RemoveFollower", "DeleteShard",
            "PushAssignments"]  # fmt: skip


@pytest.mark.parametrize("method", CHANGING)
def test_only_the_controller_coordinates(method: str) -> None:
    full = COORDINATION + method
    assert decide_internal_call(full, CONTROLLER) is Verdict.ALLOW
    for other in (POD, SIDECAR, GATEWAY, USER):
        assert decide_internal_call(full, other) is Verdict.DENIED, other


@pytest.mark.parametrize("method", ["Replicate", "Truncate", "SendSnapshot"])
def test_only_storage_pods_replicate(method: str) -> None:
    full = REPLICATION + method
    assert decide_internal_call(full, POD) is Verdict.ALLOW
    for other in (CONTROLLER, SIDECAR, GATEWAY, USER):
        assert decide_internal_call(full, other) is Verdict.DENIED, other


def test_status_and_health_are_for_the_watchers() -> None:
    status = COORDINATION + "GetStatus"
    assert {
        p.role for p in (CONTROLLER, SIDECAR) if decide_internal_call(status, p) is Verdict.ALLOW
    } == {
        Role.CONTROLLER,
        Role.SIDECAR,
    }
    assert decide_internal_call(status, POD) is Verdict.DENIED
    assert decide_internal_call(status, USER) is Verdict.DENIED
    for method in ("Check", "Watch", "List"):
        assert decide_internal_call(HEALTH + method, SIDECAR) is Verdict.ALLOW
        assert decide_internal_call(HEALTH + method, USER) is Verdict.DENIED


def test_no_identity_is_unauthenticated_whatever_the_method() -> None:
    for method in (COORDINATION + "NewTerm", REPLICATION + "Replicate", "/x.Y/Z"):
        assert decide_internal_call(method, None) is Verdict.UNAUTHENTICATED


def test_a_method_the_table_does_not_name_is_closed() -> None:
    assert allowed_roles("/cairn.replication.v1.Unknown/Call") == frozenset()
    assert allowed_roles("/io.oxia.proto.v1.OxiaClient/Write") == frozenset()
    assert decide_internal_call("/cairn.admin.v1.New/Thing", CONTROLLER) is Verdict.DENIED


def test_an_exact_rule_wins_over_its_service() -> None:
    rules = {**INTERNAL_GRPC_RULES, COORDINATION + "NewTerm": frozenset({Role.GATEWAY})}
    assert decide_internal_call(COORDINATION + "NewTerm", GATEWAY, rules) is Verdict.ALLOW
    assert decide_internal_call(COORDINATION + "NewTerm", CONTROLLER, rules) is Verdict.DENIED
    assert decide_internal_call(COORDINATION + "DeleteShard", CONTROLLER, rules) is Verdict.ALLOW


def test_heartbeats_only_from_the_pods_own_sidecar() -> None:
    assert decide_heartbeat(SIDECAR, "storage-0") is Verdict.ALLOW
    assert decide_heartbeat(SIDECAR, "storage-1") is Verdict.DENIED
    assert decide_heartbeat(Principal(Role.STORAGE, "storage-0"), "storage-0") is Verdict.DENIED
    assert decide_heartbeat(CONTROLLER, "storage-0") is Verdict.DENIED
    assert decide_heartbeat(None, "storage-0") is Verdict.UNAUTHENTICATED
