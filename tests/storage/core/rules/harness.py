"""Replication rules as text: commands drive the real pure cores of a few replicas
(ShardCore for each, LeaderCore for the one leading), and each command prints what
the cores decided, so a scenario file reads as the rule it shows.

A scenario file is a series of blocks, each a command, a line `----`, and the
output expected, then a blank line; lines starting with `#` are comments. The
commands (a replica is a name; `T.O` is the entry of term T at offset O):

    replicas a b c            three empty replicas, fenced in term 0
    log b 1x3 2x2             setup: b's log gets 3 entries of term 1, then 2 of term 2
    fence a b c term=2        NewTerm: what each must do first (its Ready, ready.py),
                              then its answer: head and commit offset
    lead a term=2             BecomeLeader: a logs its first entry; the rest follow it
    write a 2                 the leader logs two client writes
    durable a 5               a's log is durable up to 5 (a leader counts its own)
    truncate b                b follows the leader: what it must do (its Ready: cut what
                              disagrees with the leader's log, sync), then its head
    send a b                  what the leader streams to b now (within its window), and
                              the commit offset as far as it applied
    receive b                 b appends what was sent to it and learns the commit offset
    ack b 5                   b acknowledges its log durable up to 5
    trim a 4                  a's log forgets entries before 4 (retention)
    snapshot b                b installs the leader's applied state; streaming resumes after it
    apply a                   a applies what is committed and durable
    status                    every replica's role, term, head, commit, applied

Set CAIRN_REWRITE_RULES=1 to write the outputs the cores give into the files
(then read the diff: it is the change of behaviour).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cairn.storage.core.events import BecomeLeader, NewTerm, Truncate
from cairn.storage.core.ready import Ready
from cairn.storage.core.replication.applied_changes import commit_for_followers
from cairn.storage.core.replication.leader import FollowerPhase, LeaderCore
from cairn.storage.core.replication.replica import Member
from cairn.storage.core.replication.terms import NO_OFFSET, NO_TERM, EntryId, TermHistory
from cairn.storage.core.shard_core import PipelineLimits, ShardCore

LIMITS = PipelineLimits(
    max_pending_entries=1000,
    max_pending_bytes=1 << 20,
    max_entries_per_apply=100,
    max_operations_per_apply=1000,
    fold_after_uncommitted_entries=1,
    max_operations_per_fold=1000,
    max_bytes_per_fold=1 << 20,
)
MAX_IN_FLIGHT_ENTRIES = 4
REWRITE = os.environ.get("CAIRN_REWRITE_RULES") == "1"


def _ready(ready: Ready[None]) -> str:
    """What the core asked its driver to do, in order (ready.py)."""
    steps = []
    if ready.persist_term:
        steps.append("persist term")
    if ready.stepped_down is not None:
        steps.append("step down")
    if ready.new_stream:
        steps.append("new stream")
    if ready.cut_log_after is not None:
        steps.append(f"cut after {ready.cut_log_after}")
    if ready.sync_log:
        steps.append("sync")
    if ready.lead is not None:
        steps.append(f"lead, first entry for {ready.lead.first_entry.leader}")
    return ", ".join(steps) or "nothing to do"


def _entry(entry: EntryId) -> str:
    return "none" if entry.offset == NO_OFFSET else f"{entry.term}.{entry.offset}"


@dataclass
class Replica:
    name: str
    core: ShardCore[None]
    durable_offset: int = NO_OFFSET
    leading: LeaderCore | None = None
    # Entries sent to it and not yet received: (term, offset) each; and the commit
    # offset sent with them.
    in_flight: list[tuple[int, int]] = field(default_factory=list)
    commit_in_flight: int = NO_OFFSET

    @property
    def member(self) -> Member:
        return Member(f"{self.name}:public", self.name)


class Cluster:
    def __init__(self) -> None:
        self.replicas: dict[str, Replica] = {}

    # -- the commands ------------------------------------------------------------------

    def run(self, command: str) -> list[str]:
        name, *args = command.split()
        handler: Callable[[list[str]], list[str]] = getattr(self, f"_{name}")
        return handler(args)

    def _replicas(self, args: list[str]) -> list[str]:
        for name in args:
            core: ShardCore[None] = ShardCore(0, 0, TermHistory(), limits=LIMITS)
            self.replicas[name] = Replica(name, core)
        return [f"{len(args)} replicas, empty"]

    def _log(self, args: list[str]) -> list[str]:
        replica = self.replicas[args[0]]
        log = replica.core.log
        for run in args[1:]:
            term, count = (int(part) for part in run.split("x"))
            for _ in range(count):
                log.append(term, log.last_offset + 1)
        replica.durable_offset = log.last_offset
        return [f"{replica.name}: head {_entry(log.head)}"]

    def _fence(self, args: list[str]) -> list[str]:
        term = _option(args, "term")
        lines = []
        for name in _names(args):
            replica = self.replicas[name]
            ready = replica.core.step(NewTerm(term))
            self._carry_out(replica, ready)
            lines.append(
                f"{name}: fenced in term {term} ({_ready(ready)}), "
                f"head {_entry(replica.core.head)}, commit {replica.core.commit_offset}"
            )
        return lines

    def _carry_out(self, replica: Replica, ready: Ready[None]) -> None:
        """What a driver does with the core's Ready (the log is the core's own
        here: there is no WAL to cut, only its durable offset)."""
        if ready.stepped_down is not None:
            replica.leading = None
        if ready.cut_log_after is not None:
            replica.core.on_log_cut(ready.cut_log_after)
            replica.durable_offset = min(replica.durable_offset, ready.cut_log_after)
        if ready.sync_log:
            replica.durable_offset = replica.core.log.last_offset

    def _lead(self, args: list[str]) -> list[str]:
        leader = self.replicas[args[0]]
        term = _option(args, "term")
        core = leader.core
        followers = tuple(r.member for r in self.replicas.values() if r is not leader)
        ready = core.step(BecomeLeader(term, leader.member, followers, None, MAX_IN_FLIGHT_ENTRIES))
        assert ready.lead is not None
        leader.leading = ready.lead.quorum
        # The driver logs the term's first entry.
        term_start = EntryId(term, core.term_start_offset)
        core.log.append(term_start.term, term_start.offset)
        return [
            f"{leader.name} leads term {term} ({_ready(ready)}); "
            f"its first entry is {_entry(term_start)}"
        ]

    def _write(self, args: list[str]) -> list[str]:
        leader = self.replicas[args[0]]
        core = leader.core
        core.check_leader()
        first = core.log.last_offset + 1
        for _ in range(int(args[1])):
            core.log.append(core.term, core.log.last_offset + 1)
        return [f"{leader.name} logs {first}..{core.log.last_offset}"]

    def _durable(self, args: list[str]) -> list[str]:
        replica = self.replicas[args[0]]
        replica.durable_offset = int(args[1])
        replica.core.on_local_durable(replica.durable_offset)
        return [f"{replica.name}: commit {replica.core.commit_offset}"]

    def _truncate(self, args: list[str]) -> list[str]:
        follower = self.replicas[args[0]]
        leader = self._leader()
        assert leader.leading is not None
        core = follower.core
        ready = core.step(Truncate(leader.core.term, leader.member, leader.core.log))
        self._carry_out(follower, ready)
        head = core.head
        lines = [f"{follower.name}: {_ready(ready)}; head {_entry(head)}"]
        phase = leader.leading.on_truncated(follower.name, head, leader.core.log.first_offset)
        leader.core.on_commit(leader.leading.commit_offset)
        if phase is FollowerPhase.SNAPSHOT:
            lines.append(f"{leader.name} must send {follower.name} a snapshot")
        else:
            lines.append(f"{leader.name} streams to {follower.name} from {head.offset + 1}")
        lines.append(f"{leader.name}: commit {leader.core.commit_offset}")
        return lines

    def _send(self, args: list[str]) -> list[str]:
        leader = self.replicas[args[0]]
        follower = self.replicas[args[1]]
        assert leader.leading is not None
        # Followers learn the commit offset as far as the leader applied it.
        commit = commit_for_followers(leader.core.commit_offset, leader.core.applied_offset)
        follower.commit_in_flight = max(follower.commit_in_flight, commit)
        span = leader.leading.to_send(follower.name, leader.core.log.last_offset)
        if span is None:
            return [f"{leader.name} sends {follower.name} no entries, commit {commit}"]
        first, last = span
        leader.leading.on_sent(follower.name, last)
        log = leader.core.log
        for offset in range(first, last + 1):
            term = log.term_at(offset)
            assert term is not None
            follower.in_flight.append((term, offset))
        return [f"{leader.name} sends {follower.name} {first}..{last}, commit {commit}"]

    def _receive(self, args: list[str]) -> list[str]:
        follower = self.replicas[args[0]]
        core = follower.core
        if follower.in_flight:
            core.check_entries(core.term, follower.in_flight[0][1])
        for term, offset in follower.in_flight:
            core.log.append(term, offset)
        follower.in_flight.clear()
        core.on_leader_commit(follower.commit_in_flight, follower.durable_offset)
        return [f"{follower.name}: head {_entry(core.head)}, commit {core.commit_offset}"]

    def _ack(self, args: list[str]) -> list[str]:
        follower = self.replicas[args[0]]
        leader = self._leader()
        assert leader.leading is not None
        durable = int(args[1])
        follower.durable_offset = durable
        commit = leader.leading.on_ack(follower.name, leader.core.term, durable)
        leader.core.on_commit(commit)
        return [f"{leader.name}: commit {leader.core.commit_offset}"]

    def _trim(self, args: list[str]) -> list[str]:
        replica = self.replicas[args[0]]
        replica.core.log.trim_before(int(args[1]))
        return [f"{replica.name}: log from {replica.core.log.first_offset}"]

    def _snapshot(self, args: list[str]) -> list[str]:
        follower = self.replicas[args[0]]
        leader = self._leader()
        assert leader.leading is not None
        applied = leader.core.applied_offset
        term = leader.core.log.term_at(applied)
        base = EntryId(term if term is not None else NO_TERM, applied)
        follower.core.on_snapshot_installed(base)
        follower.durable_offset = base.offset
        leader.leading.on_snapshot_installed(follower.name, base)
        leader.core.on_commit(leader.leading.commit_offset)
        return [
            f"{follower.name} installs the state at {_entry(base)}: "
            f"commit {follower.core.commit_offset}, applied {follower.core.applied_offset}",
            f"{leader.name} streams to {follower.name} from {base.offset + 1}",
        ]

    def _apply(self, args: list[str]) -> list[str]:
        replica = self.replicas[args[0]]
        limit = replica.core.apply_limit(replica.durable_offset)
        if limit > replica.core.applied_offset:
            replica.core.on_applied(limit)
        return [f"{replica.name}: applied {replica.core.applied_offset}"]

    def _status(self, args: list[str]) -> list[str]:
        lines = []
        for replica in self.replicas.values():
            core = replica.core
            lines.append(
                f"{replica.name}: {core.role.name.lower()} term {core.term}, "
                f"head {_entry(core.head)}, durable {replica.durable_offset}, "
                f"commit {core.commit_offset}, applied {core.applied_offset}"
            )
        return lines

    def _leader(self) -> Replica:
        (leader,) = [r for r in self.replicas.values() if r.leading is not None]
        return leader


def _option(args: list[str], name: str) -> int:
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]
    return int(value)


def _names(args: list[str]) -> list[str]:
    return [a for a in args if "=" not in a]


@dataclass
class Block:
    comments: list[str]
    command: str
    expected: list[str]


def parse(text: str) -> list[Block]:
    blocks: list[Block] = []
    comments: list[str] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if not line.strip():
            continue
        if line.startswith("#"):
            comments.append(line)
            continue
        command = line
        assert lines[index] == "----", f"line {index + 1}: expected ---- after {command!r}"
        index += 1
        expected = []
        while index < len(lines) and lines[index].strip():
            expected.append(lines[index])
            index += 1
        blocks.append(Block(comments, command, expected))
        comments = []
    return blocks


def render(blocks: list[Block]) -> str:
    parts = []
    for block in blocks:
        parts.append("\n".join([*block.comments, block.command, "----", *block.expected]))
    return "\n\n".join(parts) + "\n"


def run_file(path: Path) -> None:
    """Replay a scenario; assert each command's output (or rewrite the file)."""
    blocks = parse(path.read_text(encoding="utf-8"))
    cluster = Cluster()
    mismatches = []
    for block in blocks:
        try:
            output = cluster.run(block.command)
        except Exception as error:  # a refusal is a rule's answer too
            output = [f"refused: {type(error).__name__}: {error}"]
        if output != block.expected:
            mismatches.append(
                f"{block.command}\n  expected: {block.expected}\n  got:      {output}"
            )
            block.expected = output
    if REWRITE:
        path.write_text(render(blocks), encoding="utf-8")
        return
    assert not mismatches, f"{path.name}:\n" + "\n".join(mismatches)
