"""Found by a 5000-step campaign of the simulation (lagging 2233, 5 replicas):
an acknowledged write lost. RF 3 grew to 5; the fourth member, a learner, was
cut off before it caught up, and, a non-voting member that is not alive not
holding up "in step", the fifth was added: two learners. The next election
handed every member to the new leader as a voter, whose term never committed,
and the one after was won by a majority of five made of the two learners and
a voter lacking the last entries the first leader had committed with the
other two. With one learner at a time any majority of the members meets
every majority of the voters; the planner now adds nothing while a learner is
a member (it removes a dead one first, as before). The same change ends the
stall of wipes 2083 (3 replicas), where two learners left half of four
unable to elect.
"""

from __future__ import annotations

from cairn.controller.actions import Action, ChangeEnsemble
from cairn.controller.model import ClusterSpec, NamespaceSpec
from cairn.controller.planner import PlannerSettings
from support.model_cluster import ModelCluster

SETTINGS = PlannerSettings(replace_after_ms=5_000, rebalance_after_ms=3_000)
NODES = ["pod-0", "pod-1", "pod-2", "pod-3", "pod-4"]


def changes(actions: list[Action]) -> list[ChangeEnsemble]:
    return [action for action in actions if isinstance(action, ChangeEnsemble)]


def test_nothing_is_added_while_a_learner_is_a_member() -> None:
    spec = ClusterSpec((NamespaceSpec("default", 1, 3),), storage_pods=5)
    model = ModelCluster(spec, NODES, instant_catch_up=False, incarnations=True)
    model.run_until_quiet(SETTINGS)
    assert model.write(0, 5)
    model.replicate()
    model.poll()
    model.set_replication_factor("default", 5)
    [grow] = changes(model.plan(SETTINGS))
    assert grow.add is not None
    # The fourth member is added, then cut off before it caught up: a learner.
    assert model.apply(grow)
    learner = grow.add
    model.kill(learner)
    model.poll()
    report = model.observe().report(model.record(0).leader or "", 0)
    assert report is not None
    assert [f.voting for f in report.followers if learner in f.internal_address] == [False]
    # No fifth member while it is one; once long dead, it is replaced first.
    assert not changes(model.plan(SETTINGS))
    model.advance(SETTINGS.replace_after_ms + 1)
    model.poll()
    [replace] = changes(model.plan(SETTINGS))
    assert replace.remove == learner and replace.add is None
