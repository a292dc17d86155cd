"""The invariants, checked after every step (and the liveness check at the end).

Each checker raises `Violation` naming what broke. They read the replicas and the
observer; the incremental ones keep their progress in `CheckerState` so that a
step costs what changed, not the whole history.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core import reads
from cairn.storage.core.replication.replica import Role
from simulation.clients import KEYS, AckedWrite, Oracle
from simulation.observer import LeaderLog

if TYPE_CHECKING:
    from simulation.replica import SimReplica
    from simulation.world import Locker, World


class Violation(AssertionError):
    pass


@dataclass
class CheckerState:
    terms_checked: int = 0
    leaders_checked: int = 0
    acks_checked: int = 0
    # replica -> (log generation, highest offset compared with the committed record)
    verified: dict[str, tuple[int, int]] = field(default_factory=dict)
    # replica -> the (applied offset, digest) last compared
    states_seen: dict[str, tuple[int, int]] = field(default_factory=dict)
    reads_checked: int = 0


def check_step(world: World) -> None:
    check_one_leader_per_term(world)
    check_acked_writes_in_later_leaders(world)
    check_committed_entries_agree(world)
    check_equal_applied_offsets_equal_states(world)
    check_core_mirrors_storage(world)
    check_reads_are_fresh(world)
    check_one_leader_per_term_across_controllers(world)


def check_one_leader_per_term(world: World) -> None:
    """(a) At most one leader per term, ever: no two leaderships (two nodes, or one
    node twice, e.g. after a restart) take office in one term, and a replica in
    the LEADER role leads the term's only leadership."""
    observer, state = world.observer, world.checks
    for leader in observer.leaders_in_order[state.terms_checked :]:
        taken = observer.leaders[leader.term]
        if len(taken) > 1:
            who = ", ".join(f"{t.name}#{t.incarnation} at step {t.step}" for t in taken)
            raise Violation(f"(a) term {leader.term} has {len(taken)} leaders: {who}")
    state.terms_checked = len(observer.leaders_in_order)
    for replica in world.live_replicas():
        core = replica.core
        assert core is not None
        if core.role is Role.LEADER:
            taken = observer.leaders.get(core.term, [])
            if [(t.name, t.incarnation) for t in taken] != [(replica.name, replica.incarnation)]:
                raise Violation(f"(a) {replica.name} leads term {core.term}, recorded: {taken}")


def check_one_leader_per_term_across_controllers(world: World) -> None:
    """(g) At most one leader per term across every controller: no two
    controllers (a paused one resumed, and the one that took over) nor one
    controller twice ever name two members leader of one term (each BecomeLeader
    sent is a claim, whether or not the pod takes it)."""
    claims = getattr(world.coordinator, "claims", None)
    if not claims:
        return
    for term, leaders in claims.items():
        if len(leaders) > 1:
            who = ", ".join(f"{name} by {by}" for name, by in leaders.items())
            raise Violation(f"(g) term {term} was given to {len(leaders)} leaders: {who}")


def check_acked_writes_in_later_leaders(world: World) -> None:
    """(b) No acknowledged write is lost: every leader that took office in a later
    term than a write's held it in its log, at the same offset with the same term
    and payload; or its log was trimmed past it (a trim or a snapshot), and then
    its KV had applied past it (the KV's content is tied to everyone else's by
    check (d) and to the oracle at the end)."""
    observer, state = world.observer, world.checks
    leaders, acked = observer.leaders_in_order, observer.acked
    for leader in leaders[state.leaders_checked :]:
        for write in acked:
            _check_leader_holds(leader, write)
    for write in acked[state.acks_checked :]:
        for leader in leaders:
            _check_leader_holds(leader, write)
    state.leaders_checked, state.acks_checked = len(leaders), len(acked)


def _check_leader_holds(leader: LeaderLog, write: AckedWrite) -> None:
    if leader.term <= write.term:
        return
    entry = leader.entry(write.offset)
    if entry is not None:
        if (entry.term, entry.payload) != (write.term, write.payload):
            raise Violation(
                f"(b) the write acknowledged by {write.leader} at (term {write.term}, offset "
                f"{write.offset}) is replaced by term {entry.term} in the log {leader.name} "
                f"led term {leader.term} with"
            )
        return
    if write.offset <= leader.base.offset and write.offset <= leader.applied_offset:
        return
    last = leader.entries[-1].offset if leader.entries else leader.base.offset
    raise Violation(
        f"(b) the write acknowledged by {write.leader} at (term {write.term}, offset "
        f"{write.offset}) is missing from {leader.name}'s log when it took term {leader.term} "
        f"(base {leader.base}, last offset {last}, applied {leader.applied_offset})"
    )


def check_committed_entries_agree(world: World) -> None:
    """(c) Replicas agree on committed entries: whatever a replica holds at an offset
    up to its commit offset is the one entry ever seen committed there (by any
    replica, at any time, applied or not). So any two replicas hold identical
    entries up to the lower of their commit offsets, where both hold entries."""
    observer, state = world.observer, world.checks
    if observer.conflicts:
        raise Violation("(c) " + observer.conflicts[0])
    for replica in world.live_replicas():
        log = replica.log
        generation, verified = state.verified.get(replica.name, (-1, -1))
        if generation != log.generation:
            verified = log.base.offset
        upto = min(replica.commit_offset, log.last_offset)
        first_held = log.first_offset if log.entries else log.last_offset + 1
        for offset in range(max(verified + 1, first_held), upto + 1):
            entry = log.entry(offset)
            assert entry is not None, (replica.name, offset)
            observer.saw_committed(entry, replica.name)
        if observer.conflicts:
            raise Violation("(c) " + observer.conflicts[0])
        state.verified[replica.name] = (log.generation, max(verified, upto))


def check_equal_applied_offsets_equal_states(world: World) -> None:
    """(d) Replicas that applied up to the same offset hold the same state, both
    columns (user records and internal state: sessions, notifications, the commit
    offset). Compared by a digest of the whole KV, against every state any
    replica ever had at that offset."""
    observer, state = world.observer, world.checks
    for replica in world.replicas.values():
        kv = replica.kv
        seen = (kv.applied_offset, kv.digest)
        if state.states_seen.get(replica.name) == seen:
            continue
        state.states_seen[replica.name] = seen
        known = observer.digests.get(kv.applied_offset)
        if known is None:
            observer.digests[kv.applied_offset] = (kv.digest, f"{replica.name}@{world.env.now}")
        elif known[0] != kv.digest:
            raise Violation(
                f"(d) {replica.name} applied up to {kv.applied_offset} but its state differs "
                f"from {known[1]}'s at that offset{_state_difference(world, replica)}"
            )


def _state_difference(world: World, replica: SimReplica) -> str:
    for other in world.replicas.values():
        if other is not replica and other.kv.applied_offset == replica.kv.applied_offset:
            mine, theirs = set(replica.kv.dump()), set(other.kv.dump())
            only_mine = sorted(mine - theirs)[:3]
            only_theirs = sorted(theirs - mine)[:3]
            return f"; vs {other.name}: only here {only_mine}, only there {only_theirs}"
    return ""


def check_core_mirrors_storage(world: World) -> None:
    """(e) The runtime keeps the core and the storage in step: the core's term
    history is the WAL's (as rebuilt after a restart), and nothing is applied
    beyond what is durable and known committed."""
    for replica in world.live_replicas():
        core = replica.core
        assert core is not None
        log, applied = replica.log, replica.kv.applied_offset
        if core.log != log.history():
            raise Violation(f"(e) {replica.name}: core {core.log} but the WAL has {log.history()}")
        if applied > log.synced_offset or applied > replica.commit_offset:
            raise Violation(
                f"(e) {replica.name} applied {applied} past its synced offset "
                f"{log.synced_offset} or commit offset {replica.commit_offset}"
            )


def check_reads_are_fresh(world: World) -> None:
    """(f) Reads are linearizable: a read returns a state no older than the last
    write acknowledged before it began (it was answered from a state applied at
    least up to that write's offset), and what it returns is that state's (the
    read cache answers as the KV holds the record)."""
    observer, state = world.observer, world.checks
    for read in observer.reads[state.reads_checked :]:
        if read.answer != read.stored:
            raise Violation(
                f"(f) a read answered by {read.replica} (term {read.term}) at step "
                f"{read.answered_step} got {read.answer!r} from the read cache, but the KV "
                f"held {read.stored!r}"
            )
        needed = observer.highest_acked_before(read.sent_step)
        if read.applied_offset < needed:
            raise Violation(
                f"(f) a read sent by {read.reader} at step {read.sent_step} was answered by "
                f"{read.replica} (term {read.term}) at step {read.answered_step} from its state "
                f"applied up to {read.applied_offset}, but a write at offset {needed} had been "
                f"acknowledged before the read began"
            )
    state.reads_checked = len(observer.reads)


def check_lock_taken(world: World, taker: Locker) -> None:
    """(h) An ephemeral record is never held by two live sessions: when a locker's
    put of the lock is acknowledged, no other locker still believes (its session
    answered within a timeout, by its own clock) that it holds it."""
    now = world.env.now
    for other in world.lockers.values():
        if other is not taker and other.believes_holding(now):
            raise Violation(
                f"(h) {taker.name} took the lock with session {taker.session} at step {now}, "
                f"but {other.name} still holds it with session {other.session} (alive "
                f"until step {other.live_until} by its last answered keep-alive)"
            )


# ---- at the end ----------------------------------------------------------------------


def converged(world: World) -> bool:
    """Whether the shard is quiet: a leader of the coordinator's latest term that
    committed its whole log, followed and applied by every member of the ensemble."""
    leader = world.current_leader()
    if leader is None or leader.leading is None:
        return False
    target = leader.log.last_offset
    if leader.leading.core.commit_offset < target:
        return False
    for name in world.coordinator.ensemble:
        replica = world.replicas[name]
        if not replica.up or replica.kv.applied_offset != target:
            return False
    return True


def check_liveness(world: World) -> None:
    """After the faults stop and the network heals, a final election and some
    steps bring every member of the ensemble to the leader's whole log, applied,
    with equal states; replaying the committed entries through a simple oracle
    gives every acknowledged answer and the final records, so every acknowledged
    write is readable unless a later committed entry changed its key."""
    if not converged(world):
        raise Violation(f"(liveness) not converged: {world.describe()}")
    leader = world.current_leader()
    assert leader is not None
    dump = leader.kv.dump()
    for name in world.coordinator.ensemble:
        replica = world.replicas[name]
        if replica.kv.dump() != dump:
            raise Violation(f"(liveness) {name}'s state differs from the leader's")
    oracle, answers = _replay(world, leader.kv.applied_offset)
    for write in world.observer.acked:
        statuses = answers.get(write.offset)
        expected = None if statuses is None else statuses[write.index]
        response = pb.WriteResponse.FromString(write.response)
        actual = (
            [put.status for put in response.puts],
            [delete.status for delete in response.deletes],
        )
        if expected != actual:
            raise Violation(
                f"(liveness) write at {write.offset} was answered {actual}, the oracle says "
                f"{expected}"
            )
    for key in KEYS:
        got = reads.get(
            leader.kv, pb.GetRequest(key=key, include_value=True), KeyOrder.HIERARCHICAL
        )
        record = oracle.records.get(key)
        if record is None:
            ok = got.status == pb.KEY_NOT_FOUND
        else:
            ok = got.status == pb.OK and (got.version.version_id, got.value) == record
        if not ok:
            raise Violation(f"(liveness) {key}: read {got}, the oracle says {record}")


def _replay(world: World, upto: int) -> tuple[Oracle, dict[int, list[tuple[list[int], list[int]]]]]:
    oracle = Oracle()
    answers: dict[int, list[tuple[list[int], list[int]]]] = {}
    committed = world.observer.committed
    for offset in range(upto + 1):
        known = committed.get(offset)
        if known is None:
            raise Violation(f"(liveness) no committed entry was ever seen at offset {offset}")
        statuses = oracle.apply(offset, known[0].payload)
        if statuses is not None:
            answers[offset] = statuses
    return oracle, answers
