"""The invariants, checked on the shipped pods after every step of a managed
cluster (managed_cluster.py). Each finding is a line in `violations`.

    (a) one leader per term: no two pods, nor one pod's two processes, lead
        one term;
    (b) no acknowledged write lost: a replica serving as leader holds every
        write acknowledged before;
    (c) committed entries agree: what a replica holds at an offset up to its
        commit offset is the one entry ever seen committed there;
    (d) replicas that applied up to one offset hold one state there;
    (e) nothing is applied beyond what the replica's disk holds durably, nor
        beyond its commit offset;
    (f) reads are fresh (managed_cluster.py checks each as it is answered).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cairn.storage.core.meta import COMMIT_OFFSET_KEY, decode_i64
from cairn.storage.core.replication.replica import Role
from cairn.storage.core.replication.terms import NO_OFFSET
from cairn.storage.kv.store import Column
from cairn.storage.shard import ShardReplica

if TYPE_CHECKING:
    from simulation.managed_cluster import Pod, ShardDisk


def applied_in_kv(disk: ShardDisk) -> int:
    """What the KV holds applied (its commit offset, written with each batch)."""
    return decode_i64(disk.kv.get(Column.META, COMMIT_OFFSET_KEY), NO_OFFSET)


@dataclass
class PodChecks:
    violations: list[str] = field(default_factory=list)
    # term -> (pod, process) that led it
    leaders: dict[int, tuple[str, int]] = field(default_factory=dict)
    # (pod, incarnation, term) of replicas already checked serving
    serving_checked: set[tuple[str, int, int]] = field(default_factory=set)
    # offset -> (term, payload digest, who saw it committed first)
    committed: dict[int, tuple[int, bytes, str]] = field(default_factory=dict)
    # (pod, incarnation) -> offset up to which its log was compared
    verified: dict[tuple[str, int], int] = field(default_factory=dict)
    # applied offset -> (state digest, who had it first)
    states: dict[int, tuple[int, str]] = field(default_factory=dict)
    # (pod, incarnation) -> the applied offset last digested
    digested: dict[tuple[str, int], int] = field(default_factory=dict)
    leaders_serving: int = 0

    def check(self, pods: list[Pod], acknowledged: set[str], now_ms: float) -> None:
        for pod in pods:
            replica, disk = pod.replica(), pod.disk()
            if replica is None or disk is None:
                continue
            self._one_leader_per_term(pod, replica)
            self._serving_leader_holds_every_write(pod, replica, acknowledged)
            self._committed_entries_agree(pod, replica, disk)
            self._nothing_applied_past_durable(pod, replica, disk)
            self._one_state_per_applied_offset(pod, replica, disk, now_ms)

    def _one_leader_per_term(self, pod: Pod, replica: ShardReplica) -> None:
        if replica.role is not Role.LEADER:
            return
        me = (pod.name, pod.process)
        recorded = self.leaders.setdefault(replica.term, me)
        if recorded != me:
            self.violations.append(
                f"(a) term {replica.term} is led by {pod.name} (process {pod.process}) "
                f"and by {recorded[0]} (process {recorded[1]})"
            )

    def _serving_leader_holds_every_write(
        self, pod: Pod, replica: ShardReplica, acknowledged: set[str]
    ) -> None:
        if not replica.serving:
            return
        mark = (pod.name, replica.incarnation, replica.term)
        if mark in self.serving_checked:
            return
        self.serving_checked.add(mark)
        self.leaders_serving += 1
        missing = acknowledged - pod.stored_keys()
        if missing:
            self.violations.append(
                f"(b) {pod.name} serves term {replica.term} without {len(missing)} "
                f"acknowledged writes, e.g. {sorted(missing)[:3]}"
            )

    def _committed_entries_agree(self, pod: Pod, replica: ShardReplica, disk: ShardDisk) -> None:
        key = (pod.name, replica.incarnation)
        wal = disk.wal
        upto = min(replica.core.commit_offset, wal.last_offset)
        # Entries trimmed, or replaced by a snapshot, are not held to compare.
        held_from = wal.first_offset if wal.first_offset != NO_OFFSET else wal.last_offset + 1
        start = max(self.verified.get(key, -1) + 1, held_from)
        for offset in range(start, upto + 1):
            entry = wal.get(offset)
            payload = hashlib.sha256(entry.payload).digest()
            seen = self.committed.setdefault(offset, (entry.term, payload, pod.name))
            if seen[:2] != (entry.term, payload):
                self.violations.append(
                    f"(c) {pod.name} holds term {entry.term}'s entry at {offset}, up to its "
                    f"commit offset {replica.core.commit_offset}; {seen[2]} saw term "
                    f"{seen[0]}'s committed there"
                )
                return
        self.verified[key] = max(self.verified.get(key, -1), upto)

    def _nothing_applied_past_durable(
        self, pod: Pod, replica: ShardReplica, disk: ShardDisk
    ) -> None:
        applied = applied_in_kv(disk)
        if applied > disk.wal.synced_offset or applied > replica.core.commit_offset:
            self.violations.append(
                f"(e) {pod.name} applied {applied} past its synced offset "
                f"{disk.wal.synced_offset} or its commit offset {replica.core.commit_offset}"
            )

    def _one_state_per_applied_offset(
        self, pod: Pod, replica: ShardReplica, disk: ShardDisk, now_ms: float
    ) -> None:
        key = (pod.name, replica.incarnation)
        applied = applied_in_kv(disk)
        if self.digested.get(key) == applied:
            return
        self.digested[key] = applied
        digest = disk.kv.records_digest
        seen = self.states.setdefault(applied, (digest, f"{pod.name} at {now_ms:g} ms"))
        if seen[0] != digest:
            self.violations.append(
                f"(d) {pod.name} applied up to {applied} but its state differs from "
                f"{seen[1]}'s at that offset"
            )
