"""What each public request needs from the rules (core/access.py), and the caps
(core/quotas.py). Pure: no server."""

from __future__ import annotations

from cairn.common.auth.rules import ANONYMOUS, Access, Policy, parse_rule
from cairn.common.identity import Principal, Role
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core.access import (
    Caller,
    ScanFilter,
    read_problem,
    session_problem,
    write_problem,
)
from cairn.storage.core.quotas import Quota, session_cap_problem

POLICY = Policy(
    (
        parse_rule(
            {
                "principals": ["*"],
                "namespaces": ["ns"],
                "prefixes": ["/u/{name}/"],
                "access": "write",
            }
        ),
        parse_rule({"principals": ["root"], "namespaces": ["ns"], "access": "write"}),
    )
)
ALICE = Caller(Principal(Role.USER, "alice"), POLICY)
ROOT = Caller(Principal(Role.USER, "root"), POLICY)


def owners(session_id: int) -> str | None:
    return {1: "user:alice", 2: "user:bob"}.get(session_id)


def write(*puts: pb.PutRequest, deletes: tuple[str, ...] = (), ranges: int = 0) -> pb.WriteRequest:
    return pb.WriteRequest(
        puts=list(puts),
        deletes=[pb.DeleteRequest(key=k) for k in deletes],
        delete_ranges=[pb.DeleteRangeRequest(start_inclusive="/u/", end_exclusive="/v")] * ranges,
    )


def test_writes_need_their_keys_and_their_sessions() -> None:
    assert write_problem(ALICE, "ns", write(pb.PutRequest(key="/u/alice/x")), owners) is None
    assert write_problem(ALICE, "ns", write(pb.PutRequest(key="/u/bob/x")), owners)
    assert write_problem(ALICE, "other", write(pb.PutRequest(key="/u/alice/x")), owners)
    assert write_problem(ALICE, "ns", write(deletes=("/u/bob/x",)), owners)
    # A range may reach any key in hierarchical order: the whole namespace only.
    assert write_problem(ALICE, "ns", write(ranges=1), owners)
    assert write_problem(ROOT, "ns", write(ranges=1), owners) is None
    # Sessions: the owner only; an unknown one is left to the apply step.
    mine = pb.PutRequest(key="/u/alice/lock", session_id=1)
    theirs = pb.PutRequest(key="/u/alice/lock", session_id=2)
    unknown = pb.PutRequest(key="/u/alice/lock", session_id=3)
    assert write_problem(ALICE, "ns", write(mine), owners) is None
    assert "another principal" in (write_problem(ALICE, "ns", write(theirs), owners) or "")
    assert write_problem(ALICE, "ns", write(unknown), owners) is None


def test_reads_other_than_exact_need_the_namespace() -> None:
    exact = pb.ReadRequest(gets=[pb.GetRequest(key="/u/alice/x")])
    floor = pb.ReadRequest(
        gets=[pb.GetRequest(key="/u/alice/x", comparison_type=pb.KeyComparisonType.FLOOR)]
    )
    by_index = pb.ReadRequest(gets=[pb.GetRequest(key="/u/alice/x", secondary_index_name="i")])
    assert read_problem(ALICE, "ns", exact) is None
    assert read_problem(ALICE, "ns", floor)
    assert read_problem(ALICE, "ns", by_index)
    assert read_problem(ROOT, "ns", floor) is None


def test_scans_answer_only_readable_keys() -> None:
    mine = ScanFilter(ALICE, "ns")
    assert mine.refusal is None
    assert mine.allows("/u/alice/a") and not mine.allows("/u/bob/a")
    assert ScanFilter(ROOT, "ns").prefixes is None
    assert ScanFilter(ALICE, "other").refusal
    assert ScanFilter(Caller(ANONYMOUS, POLICY), "ns").refusal


def test_sessions_and_a_disabled_policy() -> None:
    assert session_problem(ALICE, "user:alice") is None
    assert session_problem(ALICE, "user:bob")
    assert session_problem(ALICE, None) is None
    anyone = Caller(ANONYMOUS, Policy(enabled=False))
    assert session_problem(anyone, "user:bob") is None
    assert write_problem(anyone, "ns", write(ranges=1), owners) is None
    assert ScanFilter(anyone, "ns").prefixes is None
    assert POLICY.allows_some(ALICE.principal, Access.WRITE, "ns")


def test_quotas_per_principal_and_per_pod() -> None:
    quota = Quota("streams", per_principal=2, per_pod=3)
    assert quota.acquire("a") is None and quota.acquire("a") is None
    assert "a holds 2 streams" in (quota.acquire("a") or "")
    assert quota.acquire("b") is None
    assert "this pod serves 3 streams" in (quota.acquire("c") or "")
    quota.release("a")
    assert quota.acquire("c") is None
    assert quota.total == 3
    assert session_cap_problem("a", 5, 5, 5, 100)
    assert session_cap_problem("a", 1, 100, 5, 100)
    assert session_cap_problem("a", 1, 5, 5, 100) is None
