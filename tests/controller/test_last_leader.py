"""Issue 38, the liveness stalls of the wipes simulation (seeds 105 and 135 of
a 5000-step campaign, 3 replicas): at an even replication factor, half of the
members answering elects only when the controller knows the last leader
counted them (election.enough_answers). That knowledge lived in the leader's
reports, kept in memory, and was dropped whenever an election failed (the
record named no leader); a controller restarted, or one after a failed
election, waited for a majority that never came (a member wiped, another
added but never created).

The record now keeps the last leader chosen, in its term, through failed
elections, and the members added since that it has not been seen to count
(`ShardRecord.last_leader`, planner.counted_voters). The scenarios run the
planner, the election and the executor's steps on the model cluster, which
checks that no committed entry is lost.
"""

from __future__ import annotations

from dataclasses import replace

from cairn.controller.actions import Action, ChangeEnsemble, Elect, RecordVoting
from cairn.controller.model import ClusterSpec, LastLeader, NamespaceSpec
from cairn.controller.observed import LeaderReports, Observed
from cairn.controller.planner import PlannerSettings, counted_voters, election_blocked
from support.model_cluster import ModelCluster

SETTINGS = PlannerSettings(replace_after_ms=5_000, rebalance_after_ms=3_000)
NODES = ["pod-0", "pod-1", "pod-2", "pod-3"]


def of_type(actions: list[Action], kind: type) -> list[Action]:
    return [action for action in actions if isinstance(action, kind)]


def grown_to_four(*, d_up: bool) -> tuple[ModelCluster, str, str, str, str]:
    """RF 3 settled on three of four pods: leader A, followers B and C voting,
    entries committed in A's term. The replication factor becomes 4 and the
    fourth pod, D, is added: recorded as a member and as A's learner; with
    `d_up` False it is down and never created (the addition fails), else it
    is created and handed to A, and has not caught up yet. Returns (model, A,
    B, C, D)."""
    spec = ClusterSpec((NamespaceSpec("default", 1, 3),), storage_pods=4)
    model = ModelCluster(spec, NODES, instant_catch_up=False, incarnations=True)
    model.run_until_quiet(SETTINGS)
    record = model.record(0)
    a = record.leader
    assert a is not None
    b, c = (name for name in record.ensemble if name != a)
    (d,) = (name for name in NODES if name not in record.ensemble)
    assert model.write(0, 5)
    model.replicate()
    model.poll()
    model.set_replication_factor("default", 4)
    [change] = of_type(model.plan(SETTINGS), ChangeEnsemble)
    assert change == ChangeEnsemble(0, "grow to replication factor 4", add=d)
    if not d_up:
        model.kill(d)
    assert model.apply(change) == d_up
    record = model.record(0)
    assert record.last_leader == LastLeader(record.term, a, (d,), committed=True)
    return model, a, b, c, d


def restart_controller(model: ModelCluster) -> None:
    """The controller restarts: the leaders' reports it kept in memory are gone."""
    model.leader_reports = LeaderReports()


def test_a_restarted_controller_counts_the_members_it_handed_the_last_leader() -> None:
    # Seed 135: C lost its data and D was never created; the leader A
    # restarted (fenced), and so did the controller, which then knew only
    # that A counted itself: A and B, half of four, never elected. A was
    # handed B and C as followers, which vote from the start of its term,
    # so A and B meet every commit quorum of its term (two of A, B, C).
    model, a, b, c, _ = grown_to_four(d_up=False)
    model.kill(c)
    model.kill(a)
    model.revive(a)
    restart_controller(model)
    model.poll()
    assert counted_voters(model.record(0), model.observe(), model.status).members == {a, b, c}
    assert election_blocked(model.record(0), model.observe(), model.status) is None
    [elect] = of_type(model.plan(SETTINGS), Elect)
    assert model.apply(elect)  # the model checks that nothing committed is lost
    assert model.record(0).leader == a


def test_a_failed_election_keeps_whom_the_last_leader_counted() -> None:
    # Seed 105: an election after the leader's restart chose no one (B did
    # not answer); the new term it opened named no leader, and with it went
    # all the controller knew of who counted. B answers again, with C and D
    # still out: A and B elect, whether this controller kept A's report or
    # restarted since.
    for restarted in (False, True):
        model, a, b, c, _ = grown_to_four(d_up=False)
        term = model.record(0).term
        model.kill(c)
        model.kill(b)
        model.kill(a)
        model.revive(a)
        model.poll()
        assert not model.apply(Elect(0, "forced"))  # A alone: no one chosen
        record = model.record(0)
        assert (record.term, record.leader) == (term + 1, None)
        model.revive(b)
        if restarted:
            restart_controller(model)
        model.poll()
        counted = counted_voters(model.record(0), model.observe(), model.status)
        assert (counted.term, counted.leader, counted.members) == (term, a, {a, b, c})
        [elect] = of_type(model.plan(SETTINGS), Elect)
        assert model.apply(elect)  # the model checks that nothing committed is lost
        assert model.record(0).leader == a


def test_a_learner_counts_once_its_leader_reported_it_voting() -> None:
    # D caught up and votes at A: the record says so, and an election after a
    # restart of both A and the controller counts D too. A and D answer, B
    # and C are out: half of four, all of them counted by A.
    model, a, b, c, d = grown_to_four(d_up=True)
    model.replicate()
    model.poll()
    # (That A's term committed was recorded before D was added.)
    assert of_type(model.plan(SETTINGS), RecordVoting) == [RecordVoting(0, (d,), False)]
    model.step(SETTINGS)
    record = model.record(0)
    assert record.last_leader == LastLeader(record.term, a, committed=True)
    assert model.plan(SETTINGS) == []
    model.kill(b)
    model.kill(c)
    model.kill(a)
    model.revive(a)
    restart_controller(model)
    model.poll()
    assert election_blocked(model.record(0), model.observe(), model.status) is None
    [elect] = of_type(model.plan(SETTINGS), Elect)
    assert model.apply(elect)
    assert model.record(0).leader == a
    assert model.record(0).last_leader == LastLeader(model.record(0).term, a)


def test_a_learner_not_seen_voting_does_not_count_after_a_restart() -> None:
    # Safety: D was created and answers for the data it is recorded with, but
    # A may not count it yet (it has not caught up). Counting it, A and D
    # would be half of four and elect; A's term may have committed with B and
    # C alone, which A, restarted, need not hold. So a restarted controller
    # waits for a majority.
    model, a, b, c, d = grown_to_four(d_up=True)
    model.kill(b)
    model.kill(c)
    model.kill(a)
    model.revive(a)
    restart_controller(model)
    model.poll()
    counted = counted_voters(model.record(0), model.observe(), model.status)
    assert d not in counted.members and counted.members == {a, b, c}
    reason = election_blocked(model.record(0), model.observe(), model.status)
    assert reason is not None and reason.startswith("only 2 of 4 members can answer")
    assert of_type(model.plan(SETTINGS), Elect) == []
    assert not model.apply(Elect(0, "forced"))


def test_a_record_written_before_last_leaders_were_kept_counts_as_before() -> None:
    # No learners are known of a steady shard recorded by an older
    # controller: only its leader is known to count, and a shard whose
    # election chose no one knows of no leader.
    model, a, b, c, _ = grown_to_four(d_up=False)
    record = replace(model.record(0), last_leader=None)
    nothing_seen = Observed(now_ms=0)
    assert counted_voters(record, nothing_seen, model.status).members == {a}
    chose_no_one = replace(record, term=record.term + 1, leader=None)
    assert counted_voters(chose_no_one, nothing_seen, model.status).members == frozenset()
    # The record's own last leader, kept through the failed election.
    kept = replace(chose_no_one, last_leader=model.record(0).last_leader)
    assert counted_voters(kept, nothing_seen, model.status).members == {a, b, c}


def test_a_learner_voting_in_an_odd_ensemble_stays_recorded_as_a_learner() -> None:
    # RF 2 -> 3: D caught up and votes at A. Of three voters, answers from
    # fewer than two never elect, whoever counted, so recording D's vote would
    # change no election: nothing is planned, and D stays A's learner (an
    # election without A's report counts A, B only: more careful, still safe).
    # The ensemble change recorded what its report showed: A's term committed.
    spec = ClusterSpec((NamespaceSpec("default", 1, 2),), storage_pods=3)
    model = ModelCluster(spec, NODES[:3], instant_catch_up=False, incarnations=True)
    model.run_until_quiet(SETTINGS)
    a = model.record(0).leader
    assert a is not None
    (b,) = (name for name in model.record(0).ensemble if name != a)
    (d,) = (name for name in NODES[:3] if name not in model.record(0).ensemble)
    model.set_replication_factor("default", 3)
    assert model.run_until_quiet(SETTINGS)
    model.replicate()
    model.poll()
    record = model.record(0)
    assert sorted(record.ensemble) == sorted([a, b, d])
    assert model.plan(SETTINGS) == []
    assert record.last_leader == LastLeader(record.term, a, (d,), committed=True)
    assert counted_voters(record, model.observe(), model.status).members == {a, b, d}  # its report
    model.kill(a)
    restart_controller(model)
    model.poll()
    assert counted_voters(model.record(0), model.observe(), model.status).members == {a, b}
