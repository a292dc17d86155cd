"""Found by the managed-cluster simulation (wipe-while-lagging, seed 310): a
stall. Of a leader's two followers, one (a) had been cut off long enough to be
replaced, and the other (b) had just lost its disk. The leader had not heard
from b since, so its report still showed b voting and holding everything
committed; the planner replaced a on that word, leaving the leader the only
member with its data. The leader then crashed: b (a new incarnation, not
recorded) and the member added (not created yet) could not elect, even once
the leader was back. A follower whose own report shows it lost its data (no
replica, or another incarnation) now holds nothing for the planner, whatever
its leader last heard from it.
"""

from __future__ import annotations

from cairn.controller.actions import Action, ChangeEnsemble
from cairn.controller.model import ClusterSpec, NamespaceSpec
from cairn.controller.planner import PlannerSettings
from support.model_cluster import ModelCluster

SETTINGS = PlannerSettings(replace_after_ms=5_000, rebalance_after_ms=3_000)
NODES = ["pod-0", "pod-1", "pod-2", "pod-3"]


def removals(actions: list[Action]) -> list[str | None]:
    return [action.remove for action in actions if isinstance(action, ChangeEnsemble)]


def test_a_dead_member_is_kept_while_the_other_follower_lost_its_disk() -> None:
    spec = ClusterSpec((NamespaceSpec("default", 1, 3),), storage_pods=4)
    model = ModelCluster(spec, NODES, instant_catch_up=False, incarnations=True)
    model.run_until_quiet(SETTINGS)
    record = model.record(0)
    cut_off, wiped = [name for name in record.ensemble if name != record.leader]
    model.kill(cut_off)
    model.advance(SETTINGS.replace_after_ms + 1)
    # Its replacement would be planned now...
    assert cut_off in removals(model.plan(SETTINGS))
    # ... but the other follower loses its disk, is back, and its replica is
    # created again (a new incarnation, which its leader has not heard of).
    model.wipe(wiped)
    model.revive(wiped)
    model.poll()
    model.apply_all(model.plan(SETTINGS))
    model.poll()
    assert model.replica(wiped, 0) is not None
    assert cut_off not in removals(model.plan(SETTINGS))
