"""Scripted histories of the shipped pods (script.py): ones random search
reaches too rarely. Each runs with the shipped code (the checks stay quiet)
and with one of its rules broken (mutants.py: a check fires).

- Raft's figure 8, in this protocol's terms: an entry of an old term that a new
  leader brought to a majority is not safe until an entry of the new term is on
  a majority too, because a replica holding a newer-term entry at that offset can
  still be elected. QuorumTracker's term-start rule prevents it.
- Truncate must answer a durable head: the leader counts it as an acknowledgement.
- NewTerm must answer a durable head: the controller elects on it, and the
  replica may lose power between answering and BecomeLeader.
- A new leader whose followers lag its head by more than the send window must
  still bring its term's first entry to a majority: the window runs from what a
  follower holds durably, never from what it applied (which stops at the commit
  offset, and the new term commits nothing until that entry is on a majority).
- Reads are linearizable: an old leader cut off with a reader, never told of
  the newer term, answers reads only under its lease, and a new leader takes
  no write before that lease has run out; either rule alone broken lets the
  reader see a state older than a write acknowledged before its read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cairn.storage.core.replication.replica import ReplicationInvariantError
from simulation.mutants import MUTANTS
from simulation.real_cluster import LIMITS, Violation
from simulation.script import Script, with_window


@pytest.fixture
def new_script() -> Iterator[Callable[..., Script]]:
    """Makes scripts, closed (their processes ended) after the test, whether
    it passed or not."""
    made: list[Script] = []

    def make(*args: Any) -> Script:
        made.append(Script(*args))
        return made[-1]

    yield make
    for script in made:
        script.close()


def broken(monkeypatch: pytest.MonkeyPatch, mutant: str) -> None:
    for target, name, value in MUTANTS[mutant]:
        monkeypatch.setattr(target, name, value)


def applied_everywhere(script: Script, offset: int, names: list[str]) -> bool:
    return all(script.replica(name).core.applied_offset >= offset for name in names)


def figure_8(new_script: Callable[..., Script]) -> Script:
    # One entry per message, so a follower can hold an old-term entry without the
    # new term's first entry.
    script = new_script(5, with_window(1))
    everyone = list(script.pods)
    assert script.elect("pod-0") == "pod-0"
    first = script.write("pod-0")
    script.run_until(lambda: applied_everywhere(script, first, everyone))

    # Term 1: pod-0 logs an entry that reaches only pod-1, then loses power.
    script.cut_off("pod-2", "pod-3", "pod-4")
    old = script.write("pod-0")
    script.run_until(lambda: script.replica("pod-1").durable_offset >= old)
    script.crash("pod-0")
    script.heal()

    # Term 2: pod-2, pod-3 and pod-4 elect pod-4, whose first entry (at `old`)
    # reaches no one.
    script.cut_off("pod-1")
    script.fence()
    assert script.lead("pod-4") == "pod-4"
    script.heal()
    script.cut_off("pod-4")
    assert script.replica("pod-4").core.log.last_offset == old

    # Term 3: pod-0 is back and leads; it brings its term-1 entry at `old` to
    # pod-2 and pod-3.
    script.restart("pod-0")
    assert script.elect("pod-0", taken_over=False) == "pod-0"
    script.run_until(lambda: script.replica("pod-0").core.commit_offset >= old)

    # pod-0 and pod-1 are cut off: pod-2, pod-3 and pod-4 elect the highest head.
    script.heal()
    script.cut_off("pod-0", "pod-1")
    script.elect(taken_over=False)
    script.steps(10)
    return script


def test_figure_8_is_safe_with_the_term_start_rule(new_script: Callable[..., Script]) -> None:
    script = figure_8(new_script)
    script.heal()
    leader = script.elect()
    script.write_until_acknowledged(leader)


def test_figure_8_without_the_term_start_rule_loses_a_committed_entry(
    monkeypatch: pytest.MonkeyPatch, new_script: Callable[..., Script]
) -> None:
    broken(monkeypatch, "commit before the term-start entry")
    with pytest.raises((Violation, ReplicationInvariantError), match="committed"):
        figure_8(new_script)


def a_follower_answers_truncate_unsynced(script: Script) -> bool:
    """pod-1 holds an entry its held syncs has not synced when pod-0 starts
    its stream over. Whether pod-0 commits the entry while pod-1's disk is
    still held: pod-2, cut off, cannot help, so only an answer to Truncate
    that counts the unsynced entry can."""
    assert script.elect("pod-0") == "pod-0"
    first = script.write("pod-0")
    script.run_until(lambda: applied_everywhere(script, first, ["pod-1"]))
    script.cut_off("pod-2")
    script.hold_syncs("pod-1")
    entry = script.write("pod-0")
    pod_1 = script.replica("pod-1")
    script.run_until(lambda: pod_1.core.log.last_offset >= entry)
    assert pod_1.durable_offset < entry
    # pod-1 goes quiet: pod-0's stream to it breaks; healed, pod-0 starts over
    # with a Truncate.
    script.cut_off("pod-1")
    script.steps(20)
    script.heal()
    script.cut_off("pod-2")
    pod_0 = script.replica("pod-0")
    try:
        script.run_until(lambda: pod_0.core.applied_offset >= entry, max_ms=100)
    except AssertionError:
        return False
    return True


def test_truncate_answers_a_durable_head(new_script: Callable[..., Script]) -> None:
    script = new_script(3)
    assert not a_follower_answers_truncate_unsynced(script)
    script.hold_syncs("pod-1", False)
    script.run_until(lambda: script.replica("pod-0").core.applied_offset >= 2)


def test_truncate_answering_an_unsynced_head_loses_an_acknowledged_write(
    monkeypatch: pytest.MonkeyPatch, new_script: Callable[..., Script]
) -> None:
    broken(monkeypatch, "Truncate answers an unsynced head")
    script = new_script(3)
    assert a_follower_answers_truncate_unsynced(script)
    # The acknowledged entry was on pod-0 alone, durably: both lose power.
    script.crash("pod-0")
    script.crash("pod-1")
    script.heal()
    script.restart("pod-1")
    script.hold_syncs("pod-1", False)
    with pytest.raises(Violation, match=r"\(b\)|\(c\)"):
        script.elect()


def an_elected_pod_answers_new_term_unsynced(script: Script) -> bool:
    """pod-0 commits an entry on itself and pod-1; pod-2 holds it unsynced
    (its syncs held). pod-0 is cut off and the controller fences the rest:
    whether pod-2 answers (pod-1 alone is no majority)."""
    assert script.elect("pod-0") == "pod-0"
    script.hold_syncs("pod-2")
    entry = script.write("pod-0")
    script.run_until(
        lambda: (
            bool(script.clients.acknowledged)
            and script.replica("pod-2").core.log.last_offset >= entry
        )
    )
    script.cut_off("pod-0")
    try:
        script.fence()
    except AssertionError:
        return False
    return "pod-2" in script.fenced


def test_new_term_answers_a_durable_head(new_script: Callable[..., Script]) -> None:
    assert not an_elected_pod_answers_new_term_unsynced(new_script(3))


def test_new_term_answering_an_unsynced_head_loses_an_acknowledged_write(
    monkeypatch: pytest.MonkeyPatch, new_script: Callable[..., Script]
) -> None:
    broken(monkeypatch, "NewTerm answers an unsynced head")
    script = new_script(3)
    assert an_elected_pod_answers_new_term_unsynced(script)
    # pod-2 loses power between answering NewTerm and BecomeLeader, which
    # still goes to it (its answer was the highest head, preferred among equals).
    script.crash("pod-2")
    script.restart("pod-2")
    script.hold_syncs("pod-2", False)
    with pytest.raises((Violation, ReplicationInvariantError), match=r"\(b\)|committed"):
        lead_and_run(script, "pod-2")


def lead_and_run(script: Script, leader: str) -> None:
    script.lead(leader)
    script.steps(300)


WINDOW = 8
# One entry a write, even with entries waiting for their commit.
UNFOLDED = dataclasses.replace(LIMITS, fold_writes_after_uncommitted_entries=10_000)


def followers_lag_past_the_window(new_script: Callable[..., Script]) -> tuple[Script, int]:
    """pod-0 leads; it is cut apart from pod-1 and pod-2 while it logs more
    than twice the send window of writes it cannot commit; then the
    controller fences all three and, healed, elects pod-0 (the highest head)
    again. Returns the script and the new term's first offset."""
    script = new_script(3, with_window(WINDOW), UNFOLDED)
    assert script.elect("pod-0") == "pod-0"
    first = script.write("pod-0")
    script.run_until(lambda: applied_everywhere(script, first, list(script.pods)))
    script.cut_apart("pod-0", "pod-1")
    script.cut_apart("pod-0", "pod-2")
    last = first
    for _ in range(2 * WINDOW + 4):
        last = script.write("pod-0")
    pod_0 = script.replica("pod-0")
    script.run_until(lambda: pod_0.durable_offset >= last)
    assert pod_0.core.commit_offset == first
    script.fence()
    script.heal()
    assert script.lead("pod-0") == "pod-0"
    term_start = pod_0.core.log.last_offset
    assert term_start - script.replica("pod-1").core.log.last_offset > 2 * WINDOW
    return script, term_start


def test_a_new_leader_commits_although_its_followers_lag_past_the_window(
    new_script: Callable[..., Script],
) -> None:
    script, term_start = followers_lag_past_the_window(new_script)
    script.run_until(lambda: script.replica("pod-0").core.commit_offset >= term_start)
    script.write_until_acknowledged("pod-0")


def test_a_send_window_anchored_at_the_applied_offset_never_commits_the_new_term(
    monkeypatch: pytest.MonkeyPatch, new_script: Callable[..., Script]
) -> None:
    broken(monkeypatch, "send window anchored at the applied offset")
    script, term_start = followers_lag_past_the_window(new_script)
    with pytest.raises(AssertionError, match="not reached in 400 ms"):
        script.run_until(
            lambda: script.replica("pod-0").core.commit_offset >= term_start, max_ms=400
        )


def an_old_leader_is_cut_off_with_a_reader(new_script: Callable[..., Script]) -> Script:
    """pod-0 leads; it is cut off with a reader (the controller, the other pods
    and the writing client stay together); pod-1 is elected and takes a write;
    then the reader reads it from pod-0."""
    script = new_script(3)
    assert script.elect("pod-0") == "pod-0"
    first = script.write("pod-0")
    script.run_until(lambda: applied_everywhere(script, first, list(script.pods)))
    script.cut_off("pod-0")
    assert script.elect("pod-1", taken_over=False) == "pod-1"
    script.write_until_acknowledged("pod-1")
    script.steps(1)  # the read begins after the step that acknowledged the write
    script.read_last_write("pod-0")
    return script


def test_an_old_leader_cut_off_with_a_reader_answers_no_stale_read(
    new_script: Callable[..., Script],
) -> None:
    script = an_old_leader_is_cut_off_with_a_reader(new_script)
    assert script.counters.get("reads refused", 0) == 1


@pytest.mark.parametrize(
    "mutant", ["reads without the lease", "a new leader serves before older leases end"]
)
def test_without_either_lease_rule_a_reader_sees_a_stale_state(
    mutant: str, monkeypatch: pytest.MonkeyPatch, new_script: Callable[..., Script]
) -> None:
    broken(monkeypatch, mutant)
    with pytest.raises(Violation, match=r"\(f\) pod-0 answered a read"):
        an_old_leader_is_cut_off_with_a_reader(new_script)
