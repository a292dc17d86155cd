"""Found by a 5000-step campaign of the simulation (wipes 2488, 3 replicas): a
stall. RF 3 grew to 4 right after an election: the planner added a learner
once a majority held the new term's first entry, but the record did not say
that the term had committed (an odd ensemble does not record it). The leader
then lost its disk, and so did the member being added, before its replica was
created: two of four members could answer, and without the term's commit on
record an election needs three (`election.enough_answers`). An ensemble change
now waits until the record says its leader committed in its term.
"""

from __future__ import annotations

from cairn.controller.actions import Action, ChangeEnsemble, Elect, RecordVoting
from cairn.controller.model import ClusterSpec, NamespaceSpec
from cairn.controller.planner import PlannerSettings
from support.model_cluster import ModelCluster

SETTINGS = PlannerSettings(replace_after_ms=5_000, rebalance_after_ms=3_000)
NODES = ["pod-0", "pod-1", "pod-2", "pod-3"]


def changes(actions: list[Action]) -> list[ChangeEnsemble]:
    return [action for action in actions if isinstance(action, ChangeEnsemble)]


def test_an_ensemble_change_waits_for_the_terms_commit_on_record() -> None:
    spec = ClusterSpec((NamespaceSpec("default", 1, 3),), storage_pods=4)
    model = ModelCluster(spec, NODES, instant_catch_up=False, incarnations=True)
    model.run_until_quiet(SETTINGS)
    record = model.record(0)
    model.request_leader_move(0, next(name for name in record.ensemble if name != record.leader))
    [move] = [action for action in model.plan(SETTINGS) if isinstance(action, Elect)]
    assert model.apply(move)
    # The new leader's term commits (a follower holds its first entry), and
    # the replication factor grows at once: the commit is recorded first.
    leader = model.record(0).leader
    assert leader is not None
    follower = next(name for name in model.record(0).ensemble if name != leader)
    leader_log = model.replica(leader, 0)
    assert leader_log is not None
    model.catch_up(0, follower, len(leader_log.log) - 1)
    model.poll()
    model.set_replication_factor("default", 4)
    actions = model.plan(SETTINGS)
    assert not changes(actions)
    assert RecordVoting(0, (), term_committed=True) in actions
    model.apply_all(actions)
    last = model.record(0).last_leader
    assert last is not None and last.committed
    [grow] = changes(model.plan(SETTINGS))
    assert grow.add is not None
