"""What happened, as the checkers need to know it: committed entries, acknowledged
writes, leaders and the logs they took office with, states by applied offset.

The observer only records; checkers.py judges. Every record is small or shared
(log entries are immutable and shared with the replicas' logs)."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from cairn.storage.core.entries import LogEntry
from cairn.storage.core.replication.terms import EntryId
from simulation.clients import AckedWrite


@dataclass(frozen=True, slots=True)
class LeaderLog:
    """A leader's log when it took office (before its term-start entry)."""

    term: int
    name: str
    incarnation: int
    step: int
    base: EntryId
    entries: tuple[LogEntry, ...]
    applied_offset: int

    def entry(self, offset: int) -> LogEntry | None:
        if not self.entries:
            return None
        index = offset - self.entries[0].offset
        return self.entries[index] if 0 <= index < len(self.entries) else None


@dataclass(frozen=True, slots=True)
class AnsweredRead:
    """A read a leader answered: from its state applied up to `applied_offset`."""

    read_id: int
    reader: str
    sent_step: int
    answered_step: int
    replica: str
    term: int
    applied_offset: int
    # The record's answer (reads.answer_fields; None: absent) as the leader's read
    # cache gave it, and as its KV held it then.
    answer: bytes | None = None
    stored: bytes | None = None


@dataclass
class Observer:
    # offset -> the entry first seen committed there, and by whom.
    committed: dict[int, tuple[LogEntry, str]] = field(default_factory=dict)
    # Two different entries seen committed at one offset.
    conflicts: list[str] = field(default_factory=list)
    acked: list[AckedWrite] = field(default_factory=list)
    # The step of each acknowledgement, and the highest offset acknowledged by
    # then (acknowledgements come in step order).
    ack_steps: list[int] = field(default_factory=list)
    ack_max_offsets: list[int] = field(default_factory=list)
    reads: list[AnsweredRead] = field(default_factory=list)
    # term -> every leadership taken in it (one, unless something is wrong).
    leaders: dict[int, list[LeaderLog]] = field(default_factory=dict)
    leaders_in_order: list[LeaderLog] = field(default_factory=list)
    # Sessions: (client, request id, session id, step) once created, and
    # (client, session id, sent step, step) for each keep-alive answered.
    sessions_created: list[tuple[str, int, int, int]] = field(default_factory=list)
    keepalives: list[tuple[str, int, int, int]] = field(default_factory=list)
    # applied offset -> (digest of the KV, who had it and when)
    digests: dict[int, tuple[int, str]] = field(default_factory=dict)

    def saw_committed(self, entry: LogEntry, who: str) -> None:
        known = self.committed.get(entry.offset)
        if known is None:
            self.committed[entry.offset] = (entry, who)
        elif known[0] != entry and len(self.conflicts) < 10:
            self.conflicts.append(
                f"offset {entry.offset}: {who} holds committed {_describe(entry)}, "
                f"{known[1]} held {_describe(known[0])}"
            )

    def acknowledged(self, write: AckedWrite) -> None:
        self.acked.append(write)
        self.ack_steps.append(write.step)
        highest = self.ack_max_offsets[-1] if self.ack_max_offsets else -1
        self.ack_max_offsets.append(max(highest, write.offset))

    def highest_acked_before(self, step: int) -> int:
        """The highest offset of a write acknowledged before `step` (-1: none)."""
        index = bisect_left(self.ack_steps, step)
        return self.ack_max_offsets[index - 1] if index else -1

    def answered(self, read: AnsweredRead) -> None:
        self.reads.append(read)

    def took_office(self, leader: LeaderLog) -> None:
        self.leaders.setdefault(leader.term, []).append(leader)
        self.leaders_in_order.append(leader)


def _describe(entry: LogEntry) -> str:
    return f"(term {entry.term}, {len(entry.payload)} bytes, ts {entry.timestamp_ms})"
