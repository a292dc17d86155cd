"""Issue 38: a new term's leader may start from a commit offset lower than
what the earlier term committed. The planner must not take "holds the commit
offset" for "holds every committed entry" until the term has committed its
first entry (see the planner's module docstring); these plan one shard from a
hand-made view of that moment."""

from __future__ import annotations

from cairn.common.hashing import HashRange
from cairn.common.heartbeat import FollowerReport, ReplicaReport
from cairn.controller.actions import ChangeEnsemble
from cairn.controller.election import CountedVoters
from cairn.controller.model import (
    ClusterSpec,
    ClusterStatus,
    NamespaceSpec,
    ShardRecord,
    ShardState,
)
from cairn.controller.observed import NodeView, Observed
from cairn.controller.planner import PlannerSettings, counted_voters, plan

SETTINGS = PlannerSettings(replace_after_ms=1_000)
NOW_MS = 60_000
SPEC = ClusterSpec(namespaces=(NamespaceSpec("ns", 1, 3),), storage_pods=4)
# s-1 leads term 2, elected holding entry (1, 1) that term 1 committed on s-0
# and s-1; it knew the commit offset only up to 0. Its term's first entry is
# offset 2. s-0 has been dead for long, s-3 is a spare.
RECORD = ShardRecord(
    "ns", 0, HashRange(0, 2**32 - 1), 2, ShardState.STEADY, "s-1", ("s-0", "s-1", "s-2")
)


def leader_report(s2_acked: int, commit: int, head: int = 2) -> ReplicaReport:
    return ReplicaReport(
        shard=0,
        namespace="ns",
        role="leader",
        term=2,
        head_term=2,
        head_offset=head,
        commit_offset=commit,
        durable_offset=head,
        applied_offset=commit,
        leader_internal_address="s-1",
        followers=(
            FollowerReport("s-0", 1, voting=True, state="connecting"),
            FollowerReport("s-2", s2_acked, voting=True, state="streaming"),
        ),
        term_start_offset=2,
    )


def observed(report: ReplicaReport) -> Observed:
    nodes = {
        name: NodeView(
            name,
            name,
            name,
            alive=name != "s-0",
            replicas={0: report} if name == "s-1" else ({} if name == "s-3" else None),
        )
        for name in ("s-0", "s-1", "s-2", "s-3")
    }
    return Observed(now_ms=NOW_MS, nodes=nodes)


def changes(report: ReplicaReport) -> list[ChangeEnsemble]:
    actions = plan(SPEC, ClusterStatus(shards=(RECORD,)), 0, observed(report), SETTINGS)
    return [action for action in actions if isinstance(action, ChangeEnsemble)]


def test_a_dead_member_holding_an_earlier_commit_stays_until_the_rest_hold_the_term_start() -> None:
    # s-2 holds offset 0, the commit offset s-1 knows, but not (1, 1): without
    # s-0, s-1 would be its only holder among two members.
    assert changes(leader_report(s2_acked=0, commit=0)) == []
    assert changes(leader_report(s2_acked=1, commit=0)) == []


def test_once_the_rest_hold_the_term_start_the_dead_member_is_replaced() -> None:
    assert changes(leader_report(s2_acked=2, commit=2)) == [
        ChangeEnsemble(0, "replace unreachable s-0", remove="s-0")
    ]


def test_only_a_commit_at_or_past_the_term_start_counts_as_committed_in_the_term() -> None:
    status = ClusterStatus(shards=(RECORD,))

    def counted(report: ReplicaReport) -> CountedVoters:
        return counted_voters(RECORD, observed(report), status)

    # Client writes follow the term's first entry: the commit offset need
    # not be at the head for the term to have committed.
    assert not counted(leader_report(s2_acked=1, commit=1, head=3)).committed_in_term
    assert counted(leader_report(s2_acked=2, commit=2, head=3)).committed_in_term
