"""Issue 38, hole 1: a wiped follower is re-added in place and must not keep its
vote. The planner, the election (choose_leader through the executor's steps)
and the leaders of the model cluster, with incarnations modelled: a wipe taints
nothing, so the model's check that no committed entry is lost applies.

RF=3: leader A, followers B and C. B has acknowledged everything (committed with
A); C lags behind. B loses its disk and comes back empty; the ensemble change
re-creates its replica (NewTerm) and hands it to the leader (AddFollower, a
no-op for a member the leader tracks). A crashes before B has caught up.
"""

from __future__ import annotations

from dataclasses import replace

from cairn.controller.actions import Action, ChangeEnsemble, Elect, FinishEnsembleChange
from cairn.controller.model import ClusterSpec, NamespaceSpec
from cairn.controller.observed import LeaderReports
from cairn.controller.planner import PlannerSettings, election_blocked
from support.model_cluster import ModelCluster

SETTINGS = PlannerSettings(replace_after_ms=5_000, rebalance_after_ms=3_000)
NODES = ["pod-0", "pod-1", "pod-2"]


def of_type(actions: list[Action], kind: type) -> list[Action]:
    return [action for action in actions if isinstance(action, kind)]


def wiped_follower_readded_while_the_other_lags() -> tuple[ModelCluster, str, str, str]:
    """The state just after B's replica was re-created in place; B has not
    caught up. Returns (model, A, B, C)."""
    spec = ClusterSpec((NamespaceSpec("default", 1, 3),), storage_pods=3)
    model = ModelCluster(spec, NODES, instant_catch_up=False, incarnations=True)
    model.run_until_quiet(SETTINGS)
    record = model.record(0)
    a = record.leader
    assert a is not None
    b, c = (name for name in record.ensemble if name != a)
    # C lags: it is cut off while A and B commit 20 more entries.
    model.kill(c, noticed=False)
    assert model.write(0, 20)
    model.replicate()
    committed = model.committed[0]
    leader = model.replica(a, 0)
    assert leader is not None and leader.commit_offset == len(committed) - 1
    c_replica = model.replica(c, 0)
    assert c_replica is not None and len(c_replica.log) < len(committed)
    model.revive(c, restarted=False, noticed=False)
    # B loses its disk and restarts empty.
    model.kill(b)
    model.wipe(b)
    model.revive(b)
    model.poll()
    actions = model.plan(SETTINGS)
    assert of_type(actions, FinishEnsembleChange) == [FinishEnsembleChange(0)]
    assert model.apply(FinishEnsembleChange(0))
    b_replica = model.replica(b, 0)
    assert b_replica is not None and b_replica.log == ()
    return model, a, b, c


def test_a_wiped_follower_readded_in_place_keeps_no_vote_and_no_old_acknowledgement() -> None:
    model, a, b, c = wiped_follower_readded_while_the_other_lags()
    # A crashes before B caught up.
    model.kill(a)
    model.poll()
    # Only C holds what it is recorded to hold; B's replica exists but is not
    # the data it was recorded with: no majority of intact members, no
    # election (it could only elect a leader without entries 21..).
    for _ in range(5):
        actions = model.plan(SETTINGS)
        assert of_type(actions, Elect) == [], actions
        model.apply_all(actions)
        model.poll()
        model.advance(1_000)
    reason = election_blocked(model.record(0), model.observe(), model.status)
    assert reason is not None
    assert reason.startswith("only 1 of 3 members can answer for their data, 2 needed")
    assert f"{a} unreachable" in reason and f"{b} lost its data" in reason and c not in reason
    # An election forced anyway (an older plan, a retry) elects no one: B's
    # answer does not count, and the model saw no committed entry lost.
    assert not model.apply(Elect(0, "forced"))


def test_a_wiped_follower_counts_again_once_its_leader_caught_it_up() -> None:
    model, a, b, c = wiped_follower_readded_while_the_other_lags()
    record = model.record(0)
    recorded_b = record.incarnation_of(b)
    model.replicate()  # B catches up (and votes again at A)
    model.poll()
    assert model.plan(SETTINGS) == [FinishEnsembleChange(0)]  # record B's new data
    model.step(SETTINGS)
    b_replica = model.replica(b, 0)
    assert b_replica is not None
    assert model.record(0).incarnation_of(b) == b_replica.incarnation != recorded_b
    assert model.plan(SETTINGS) == []
    model.kill(a)
    model.poll()
    assert of_type(model.plan(SETTINGS), Elect) == [Elect(0, f"leader {a} is unreachable")]
    model.step(SETTINGS)  # elects B or C; the model checks nothing committed is lost
    new_leader = model.record(0).leader
    assert new_leader in (b, c)
    replica = model.replica(new_leader, 0)
    assert replica is not None and replica.log[: len(model.committed[0])] == model.committed[0]


def rf2_whose_follower_lost_its_disk() -> tuple[ModelCluster, str, str]:
    """RF=2, leader A and follower B voting, entries committed in A's term;
    B loses its disk and comes back empty, then A restarts (fenced, its data
    intact). Returns (model, A, B)."""
    spec = ClusterSpec((NamespaceSpec("default", 1, 2),), storage_pods=2)
    model = ModelCluster(spec, NODES[:2], instant_catch_up=False, incarnations=True)
    model.run_until_quiet(SETTINGS)
    record = model.record(0)
    a = record.leader
    assert a is not None
    (b,) = (name for name in record.ensemble if name != a)
    assert model.write(0, 5)
    model.replicate()
    model.poll()  # the controller sees A lead, B voting, the commit in A's term
    model.kill(b)
    model.wipe(b)
    model.revive(b)
    model.kill(a)
    model.revive(a)
    model.poll()
    return model, a, b


def test_rf2_the_intact_member_alone_elects_when_its_term_had_committed() -> None:
    # Every commit of A's term needed both A and B, so A holds all of it: A's
    # answer alone meets every commit quorum (election.enough_answers).
    model, a, _ = rf2_whose_follower_lost_its_disk()
    assert election_blocked(model.record(0), model.observe(), model.status) is None
    actions = model.plan(SETTINGS)
    assert of_type(actions, Elect) != []
    # The model checks that the new leader keeps every committed entry.
    assert model.apply(of_type(actions, Elect)[0])
    assert model.record(0).leader == a


def test_rf2_a_restarted_controller_elects_without_the_leader_once_its_commit_is_recorded() -> None:
    # RF 2, A led and committed in its term with B voting, then A died. The
    # controller that saw A's report knows B counted and A's term committed:
    # B alone elects. One restarted since knows it from the record (A was
    # handed B; RecordVoting recorded the commit), or from B, whose commit
    # offset is at an entry of A's term (planner.commit_seen_in_term). With
    # neither, A's own answer would be needed too.
    spec = ClusterSpec((NamespaceSpec("default", 1, 2),), storage_pods=2)
    model = ModelCluster(spec, NODES[:2], instant_catch_up=False, incarnations=True)
    model.run_until_quiet(SETTINGS)
    a = model.record(0).leader
    assert a is not None
    (b,) = (name for name in model.record(0).ensemble if name != a)
    assert model.write(0, 5)
    model.replicate()
    model.poll()
    model.kill(a)
    assert election_blocked(model.record(0), model.observe(), model.status) is None
    model.leader_reports = LeaderReports()
    last = model.record(0).last_leader
    assert last is not None and last.committed
    assert election_blocked(model.record(0), model.observe(), model.status) is None
    unrecorded = replace(model.record(0), last_leader=replace(last, committed=False))
    assert election_blocked(unrecorded, model.observe(), model.status) is None
    observed = model.observe()
    unpolled = replace(
        observed,
        nodes={name: replace(view, replicas=None) for name, view in observed.nodes.items()},
    )
    reason = election_blocked(unrecorded, unpolled, model.status)
    assert reason is not None and f"{a} unreachable" in reason
    [elect] = of_type(model.plan(SETTINGS), Elect)
    assert model.apply(elect)  # the model checks that nothing committed is lost
    assert model.record(0).leader == b


def test_leader_reports_keep_the_highest_term_and_only_recorded_shards() -> None:
    model, _, _ = rf2_whose_follower_lost_its_disk()
    remembered = model.leader_reports.snapshot()[0]
    assert remembered.role == "leader" and remembered.term == model.record(0).term
    reports = LeaderReports()
    older = replace(remembered, term=remembered.term - 1)
    reports.note([remembered, older, replace(remembered, role="follower", term=99)])
    assert reports.snapshot() == {0: remembered}
    reports.note([replace(remembered, shard=7)])
    reports.retain([7])
    assert list(reports.snapshot()) == [7]


def test_an_election_keeps_a_leaving_member_the_rest_need_for_an_intact_majority() -> None:
    # Simulation wipes seed 109 (3 replicas, 5000 steps). RF 3 -> 2: the
    # removal of C is recorded (C leaving) when A loses its disk, then the
    # leader B restarts. B and C answer intact and B is elected; had the
    # election dropped C as the removal asked, (A, B) would have one member
    # known to hold its data, and with B restarted again before it caught A
    # up no election could ever be planned: an operator needed although no
    # data was lost. C stays a member, and the shard elects again.
    spec = ClusterSpec((NamespaceSpec("default", 1, 3),), storage_pods=3)
    model = ModelCluster(spec, NODES, instant_catch_up=False, incarnations=True)
    model.run_until_quiet(SETTINGS)
    assert model.write(0, 5)
    model.replicate()
    model.poll()
    model.set_replication_factor("default", 2)
    [change] = [a for a in of_type(model.plan(SETTINGS), ChangeEnsemble)]
    assert isinstance(change, ChangeEnsemble) and change.remove is not None
    c = change.remove
    b = model.record(0).leader
    assert b is not None
    (a,) = (name for name in NODES if name not in (b, c))
    assert not model.apply(change, stop_after=1)  # C recorded as leaving only
    assert model.record(0).leaving == (c,)
    model.kill(a)
    model.wipe(a)
    model.revive(a)
    model.kill(b)
    model.revive(b)
    model.poll()
    [elect] = of_type(model.plan(SETTINGS), Elect)
    assert model.apply(elect)
    record = model.record(0)
    assert record.leader == b
    assert (sorted(record.ensemble), record.leaving) == (sorted(NODES), ())
    # B restarts again before it has caught A up: B and C still elect.
    model.kill(b)
    model.revive(b)
    model.poll()
    assert election_blocked(model.record(0), model.observe(), model.status) is None
    [elect] = of_type(model.plan(SETTINGS), Elect)
    assert model.apply(elect)  # the model checks that nothing committed is lost
    assert model.record(0).leader in (b, c)
    # Once A is caught up, the shrink to RF 2 goes on and settles.
    model.advance(10_000)
    for _ in range(20):
        model.step(SETTINGS)
    assert len(model.record(0).ensemble) == 2
    assert model.plan(SETTINGS) == []


def rf2_left_with_its_leader_intact_alone() -> tuple[ModelCluster, str, str]:
    """Simulation wipes seed 110 (3 replicas, 5000 steps). RF 3 -> 2 with
    leader A: the controller removes C on a report made just before B lost
    its disk, which leaves (A, B) with A the one member holding its data. A
    takes a write it has not committed yet (B cannot acknowledge it), is seen
    so, then restarts before it caught B up. Returns (model, A, B)."""
    spec = ClusterSpec((NamespaceSpec("default", 1, 3),), storage_pods=3)
    model = ModelCluster(spec, NODES, instant_catch_up=False, incarnations=True)
    model.run_until_quiet(SETTINGS)
    assert model.write(0, 5)
    model.replicate()
    model.poll()
    model.set_replication_factor("default", 2)
    [change] = [a for a in of_type(model.plan(SETTINGS), ChangeEnsemble)]
    assert isinstance(change, ChangeEnsemble) and change.remove is not None
    a = model.record(0).leader
    assert a is not None
    (b,) = (name for name in NODES if name not in (a, change.remove))
    model.kill(b, noticed=False)
    model.wipe(b)
    model.revive(b, noticed=False)
    assert model.apply(change)  # planned on the report from before B's wipe
    assert model.write(0, 1)
    model.poll()
    report = model.observe().report(a, 0)
    assert report is not None and report.commit_offset < report.head_offset
    model.kill(a)
    model.revive(a)
    model.poll()
    return model, a, b


def test_rf2_the_last_leader_alone_elects_before_its_term_committed() -> None:
    # A was elected holding everything committed before its term, and every
    # commit of its term needed it: its answer alone is enough, whether this
    # controller saw it lead (its report) or restarted since (A counts itself).
    for restarted in (False, True):
        model, a, b = rf2_left_with_its_leader_intact_alone()
        if restarted:
            model.leader_reports = LeaderReports()
        assert election_blocked(model.record(0), model.observe(), model.status) is None
        [elect] = of_type(model.plan(SETTINGS), Elect)
        assert model.apply(elect)  # the model checks that nothing committed is lost
        assert model.record(0).leader == a
        model.run_until_quiet(SETTINGS)  # B is created again and caught up
        b_replica = model.replica(b, 0)
        assert b_replica is not None and model.record(0).incarnation_of(b) == b_replica.incarnation
