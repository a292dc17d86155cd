"""Scripted histories (scenario.py): ones random search reaches too rarely. Each
runs twice: with the runtime's rules (the checkers stay quiet) and with one rule
broken (a checker, or the core's own invariant check, fires).

- Raft's figure 8, in this protocol's terms: an entry of an old term that a new
  leader brought to a majority is not safe until an entry of the new term is on
  a majority too, because a replica holding a newer-term entry at that offset can
  still be elected. QuorumTracker's term-start rule prevents it.
- Truncate must answer a durable head: the leader counts it as an acknowledgement.
- NewTerm must answer a durable head: the controller elects on it, and the
  replica may lose power between answering and BecomeLeader.
- Reads are linearizable: an old leader cut off with a reader, never told of
  the newer term, answers reads only under its lease, and a new leader takes
  no write before that lease has run out; either rule alone broken lets the
  reader see a state older than a write acknowledged before its read.
- A new leader whose followers lag its head by more than the send window must
  still bring its term's first entry to a majority: the window runs from what a
  follower holds durably, never from what it applied (which stops at the commit
  offset, and the new term commits nothing until that entry is on a majority).
"""

from __future__ import annotations

import dataclasses

import pytest

from cairn.storage.core.replication.leader import LeaderCore
from cairn.storage.core.replication.replica import ReplicationInvariantError
from simulation.checkers import Violation, check_liveness, converged
from simulation.context import RuntimeRules
from simulation.mutants import MUTANTS, WindowFromAppliedLeaderCore
from simulation.scenario import Script

MEMBERS = ("r-0", "r-1", "r-2", "r-3", "r-4")


def broken(monkeypatch: pytest.MonkeyPatch, mutant: str) -> None:
    """Run the scenario with a rule of the real code broken (mutants.py)."""
    for target, name, value in MUTANTS[mutant].patches:
        monkeypatch.setattr(target, name, value)


def figure_8(rules: RuntimeRules) -> Script:
    # One entry per message, so a follower can hold an old-term entry without the
    # new term's first entry.
    script = Script(5, dataclasses.replace(rules, max_in_flight_entries=1))
    r0, r4 = script.replica("r-0"), script.replica("r-4")
    assert script.elect("r-0") == "r-0"
    first = script.write("r-0")
    script.run_until(lambda: all(script.replica(n).kv.applied_offset >= first for n in MEMBERS))

    # Term 1: r0 logs an entry that reaches only r1, then crashes.
    script.cut_off("r-2", "r-3", "r-4")
    old = script.write("r-0")
    script.run_until(lambda: script.replica("r-1").log.synced_offset >= old)
    script.crash("r-0")
    script.heal()

    # Term 2: r2, r3 and r4 elect r4, whose first entry (at `old`) reaches no one.
    script.cut_off("r-1")
    script.coordinator.preferred = "r-4"
    script.coordinator.start_election("scripted")
    script.run_until(lambda: r4.leading is not None)
    assert r4.log.head.offset == old
    script.heal()
    script.cut_off("r-4")

    # Term 3: r0 is back and leads; it brings its term-1 entry at `old` to r2 and r3.
    script.restart("r-0")
    script.coordinator.preferred = "r-0"
    script.coordinator.start_election("scripted")
    script.run_until(lambda: r0.leading is not None and r0.leading.core.commit_offset >= old)

    # r0 and r1 are cut off: r2, r3 and r4 elect the highest head among them.
    script.heal()
    script.cut_off("r-0", "r-1")
    script.coordinator.preferred = None
    script.coordinator.start_election("scripted")
    script.run_until(lambda: script.coordinator.leader is not None)
    script.steps(10)
    return script


def test_figure_8_is_safe_with_the_term_start_rule() -> None:
    script = figure_8(RuntimeRules())
    script.heal()
    world = script.world
    world.coordinator.start_election("scripted")
    script.run_until(lambda: converged(world), max_steps=200)
    check_liveness(world)


def test_figure_8_without_the_term_start_rule_loses_a_committed_entry() -> None:
    with pytest.raises((Violation, ReplicationInvariantError), match="committed"):
        figure_8(dataclasses.replace(RuntimeRules(), term_start_rule=False))


def a_follower_answers_truncate_then_loses_power(rules: RuntimeRules) -> Script:
    """r1 holds an entry it has not synced when r0 restarts its stream: r0 counts
    r1's answer to Truncate as an acknowledgement, commits and answers the client;
    then r0 and r1 lose power."""
    script = Script(3, rules)
    r0, r1 = script.replica("r-0"), script.replica("r-1")
    assert script.elect("r-0") == "r-0"
    first = script.write("r-0")
    script.run_until(lambda: r1.kv.applied_offset >= first)
    script.cut_off("r-2")
    script.world.held_syncs.add("r-1")
    entry = script.write("r-0")
    script.run_until(lambda: r1.log.last_offset >= entry)
    assert r1.log.synced_offset < entry
    # r1 goes quiet long enough for r0 to take the stream as broken and start over.
    script.cut_off("r-1")
    script.steps(rules.stream_timeout_steps + 2)
    script.heal()
    script.cut_off("r-2")
    script.run_until(lambda: r0.kv.applied_offset >= entry)
    assert script.world.observer.acked[-1].offset == entry
    script.crash("r-0")
    script.crash("r-1")
    script.heal()
    script.restart("r-1")
    script.world.held_syncs.clear()
    script.elect()
    script.steps(10)
    return script


def test_truncate_answers_a_durable_head() -> None:
    a_follower_answers_truncate_then_loses_power(RuntimeRules())


def test_truncate_answering_an_unsynced_head_loses_an_acknowledged_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken(monkeypatch, "Truncate answers an unsynced head")
    with pytest.raises(Violation, match=r"\(b\) the write acknowledged"):
        a_follower_answers_truncate_then_loses_power(RuntimeRules())


def an_elected_replica_loses_power_before_leading(rules: RuntimeRules) -> Script:
    """r0 commits an entry on r0 and r1; r2 holds it unsynced. r0 is cut off; the
    controller elects r2, which loses power between answering NewTerm and
    BecomeLeader."""
    script = Script(3, rules)
    r1, r2 = script.replica("r-1"), script.replica("r-2")
    assert script.elect("r-0") == "r-0"
    script.world.held_syncs.add("r-2")
    entry = script.write("r-0")
    script.run_until(lambda: bool(script.world.observer.acked) and r2.log.last_offset >= entry)
    script.cut_off("r-0")
    script.coordinator.preferred = "r-2"
    script.coordinator.start_election("scripted")
    term = script.coordinator.highest_term
    script.run_until(lambda: r2.core is not None and r2.core.term == term)
    script.crash("r-2")
    script.restart("r-2")
    script.world.held_syncs.clear()
    script.run_until(lambda: script.coordinator.leader is not None)
    script.steps(10)
    assert r1.up
    return script


def test_new_term_answers_a_durable_head() -> None:
    an_elected_replica_loses_power_before_leading(RuntimeRules())


def test_new_term_answering_an_unsynced_head_loses_an_acknowledged_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken(monkeypatch, "NewTerm answers an unsynced head")
    with pytest.raises((Violation, ReplicationInvariantError), match=r"acknowledged|committed"):
        an_elected_replica_loses_power_before_leading(RuntimeRules())


def followers_lag_past_the_window_before_a_new_term(
    leader_core_class: type[LeaderCore],
) -> tuple[Script, int]:
    """r0 leads; r1 and r2 are cut off while r0 logs more than twice the send
    window of writes it cannot commit; then, healed, r0 (the highest head) is
    elected again. Returns the script and the new term's first offset."""
    rules = RuntimeRules()
    script = Script(3, rules, leader_core_class)
    r0 = script.replica("r-0")
    assert script.elect("r-0") == "r-0"
    first = script.write("r-0")
    script.run_until(lambda: all(script.replica(n).kv.applied_offset >= first for n in MEMBERS[:3]))
    script.cut_off("r-1", "r-2")
    lag = 2 * rules.max_in_flight_entries + 4
    last = first
    for _ in range(lag):
        last = script.write("r-0")
    script.run_until(lambda: r0.log.synced_offset >= last)
    assert r0.commit_offset == first
    script.heal()
    assert script.elect("r-0", taken_over=False) == "r-0"
    term_start = r0.log.last_offset
    assert term_start - script.replica("r-1").log.last_offset > 2 * rules.max_in_flight_entries
    return script, term_start


def test_a_new_leader_commits_although_its_followers_lag_past_the_window() -> None:
    script, term_start = followers_lag_past_the_window_before_a_new_term(LeaderCore)
    r0 = script.replica("r-0")
    script.run_until(lambda: r0.commit_offset >= term_start, max_steps=200)
    script.run_until(lambda: r0.leading is not None and r0.leading.taken_over())
    entry = script.write("r-0")
    script.run_until(lambda: script.world.observer.acked[-1].offset == entry)
    script.run_until(lambda: converged(script.world), max_steps=200)
    check_liveness(script.world)


def test_a_send_window_anchored_at_the_applied_offset_never_commits_the_new_term() -> None:
    script, term_start = followers_lag_past_the_window_before_a_new_term(
        WindowFromAppliedLeaderCore
    )
    r0 = script.replica("r-0")
    with pytest.raises(AssertionError, match="not reached in 400 steps"):
        script.run_until(lambda: r0.commit_offset >= term_start, max_steps=400)


def an_old_leader_is_cut_off_with_a_reader(rules: RuntimeRules) -> Script:
    """r0 leads; it is cut off together with a reader (the controller, the other
    replicas and the writing client stay together); r1 is elected and takes a
    write; then the reader reads from r0."""
    script = Script(3, rules)
    assert script.elect("r-0") == "r-0"
    first = script.write("r-0")
    script.run_until(lambda: all(script.replica(n).kv.applied_offset >= first for n in MEMBERS[:3]))
    script.cut_off("r-0", "reader-0")
    assert script.elect("r-1", taken_over=False) == "r-1"
    script.write_until_acknowledged("r-1")
    script.steps(1)  # the read begins after the step that acknowledged the write
    script.read("reader-0", "r-0")
    script.steps(3)
    return script


def test_an_old_leader_cut_off_with_a_reader_answers_no_stale_read() -> None:
    script = an_old_leader_is_cut_off_with_a_reader(RuntimeRules())
    assert script.world.env.counts["reads refused (taking over or no lease)"] >= 1
    assert not script.world.observer.reads


@pytest.mark.parametrize(
    "broken",
    [{"reads_need_lease": False}, {"takeover_waits_for_old_leases": False}],
    ids=["reads without the lease", "a new leader serves before older leases end"],
)
def test_without_either_lease_rule_a_reader_sees_a_stale_state(broken: dict[str, bool]) -> None:
    with pytest.raises(Violation, match=r"\(f\) a read sent by reader-0"):
        an_old_leader_is_cut_off_with_a_reader(dataclasses.replace(RuntimeRules(), **broken))
