"""ShardCore's pipeline rules, one at a time, without a replica around them."""

from __future__ import annotations

import pytest

from cairn.common.errors import InvalidTerm, OffsetPassed, Overloaded
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core.apply import MAX_RECORDS_PER_CLOSE_ENTRY
from cairn.storage.core.entries import (
    CLIENT_WRITE,
    CLOSE_SESSION,
    FOLDED_WRITES,
    TERM_START,
    Folded,
    LogEntry,
    encode_entry,
)
from cairn.storage.core.events import Closing, NewTerm, Truncate
from cairn.storage.core.folding import fits_fold, starts_fold
from cairn.storage.core.pending import PendingEntry, ReadLog
from cairn.storage.core.ready import Ready, SteppedDown
from cairn.storage.core.replication.leader import LeaderCore
from cairn.storage.core.replication.replica import Member, ReplicationInvariantError, Role
from cairn.storage.core.replication.terms import NO_OFFSET, EntryId, history_of
from cairn.storage.core.shard_core import PipelineLimits, ShardCore, operation_count

ME = Member("pod-0:6648", "pod-0:6649")
OTHER = Member("pod-1:6648", "pod-1:6649")
LIMITS = PipelineLimits(
    max_pending_entries=4,
    max_pending_bytes=100,
    max_entries_per_apply=3,
    max_operations_per_apply=10,
    fold_after_uncommitted_entries=2,
    max_operations_per_fold=3,
    max_bytes_per_fold=1000,
)


def _core(last_offset: int = 9, applied: int = 5) -> ShardCore[None]:
    log = history_of(0, last_offset, lambda offset: 1, EntryId(-1, NO_OFFSET))
    return ShardCore(0, 1, log, commit_offset=applied, applied_offset=applied, limits=LIMITS)


def _lead(core: ShardCore, term: int, followers: tuple[Member, ...] = ()) -> EntryId:
    core.fence(term)
    term_start = core.become_leader(term, ME)
    core.log.append(term_start.term, term_start.offset)
    quorum = LeaderCore(term, ME, followers, core.commit_offset, term_start.offset, 8)
    core.on_leading(term_start, quorum)
    return term_start


def test_applies_only_what_is_committed_and_durable() -> None:
    core = _core()
    core.on_commit(8)
    assert core.apply_limit(durable_offset=9) == 8
    assert core.apply_limit(durable_offset=7) == 7
    core.stop_applying_at(6)
    core.stop_applying_at(7)
    assert core.apply_limit(durable_offset=9) == 6
    core.resume_applying_at(6)
    assert core.apply_limit(durable_offset=9) == 7
    core.resume_applying_at(7)
    assert core.apply_limit(durable_offset=9) == 8


def test_a_follower_commits_what_it_was_told_as_far_as_it_holds_it() -> None:
    core = _core()
    assert core.on_leader_commit(9, durable_offset=7)
    assert core.commit_offset == 7
    assert not core.on_leader_commit(3, durable_offset=7)  # never goes back
    assert core.on_follower_durable(9)
    assert core.commit_offset == 9


def test_a_leader_commit_moves_only_forward() -> None:
    core = _core()
    assert core.on_commit(7)
    assert not core.on_commit(7)
    assert not core.on_commit(6)
    assert core.commit_offset == 7


def test_a_new_leader_takes_over_after_its_first_entry_and_older_leases() -> None:
    core = _core(last_offset=9, applied=9)
    term_start = _lead(core, 2)
    assert core.takeover_wait_ms(now_ms=1_000, serves_from_ms=0) is None  # not applied
    core.on_applied(term_start.offset)
    assert core.takeover_wait_ms(now_ms=1_000, serves_from_ms=1_250) == 250
    assert not core.taken_over
    assert core.takeover_wait_ms(now_ms=1_250, serves_from_ms=1_250) == 0
    assert core.taken_over
    assert core.takeover_wait_ms(now_ms=2_000, serves_from_ms=1_250) is None  # done
    core.on_stepped_down()
    assert not core.taken_over


def test_a_leader_commits_what_its_quorum_counts_of_its_own_and_its_followers_logs() -> None:
    core = _core(last_offset=9, applied=5)
    term_start = _lead(core, 2, (OTHER,))
    core.log.append(2, term_start.offset + 1)
    # Its own durable offset alone is no majority of two.
    assert not core.on_local_durable(term_start.offset + 1)
    assert core.leading is not None
    counted = core.leading.on_ack(OTHER.internal_address, 2, term_start.offset)
    assert core.on_commit(counted)
    assert core.commit_offset == term_start.offset
    core.on_stepped_down()
    assert core.leading is None


def test_a_leader_alone_commits_what_it_holds_durably() -> None:
    core = _core(last_offset=9, applied=5)
    term_start = _lead(core, 2)
    assert core.on_local_durable(term_start.offset)
    assert core.commit_offset == term_start.offset


def test_leading_needs_the_term_begun_by_become_leader() -> None:
    core = _core()
    core.fence(2)
    with pytest.raises(ValueError, match="not begun"):
        core.on_leading(EntryId(2, 10), LeaderCore(2, ME, (), 5, 10, 8))


def test_a_follower_never_takes_over() -> None:
    core = _core()
    core.follow(2, ME)
    core.on_applied(9)
    assert core.takeover_wait_ms(now_ms=1_000, serves_from_ms=0) is None


def test_timestamps_never_go_back() -> None:
    core = _core()
    assert core.next_timestamp_ms(100) == 100
    assert core.next_timestamp_ms(90) == 100
    core.on_replicated_timestamp(150)
    assert core.next_timestamp_ms(120) == 150


def _put(offset: int, size: int = 10) -> PendingEntry[None]:
    """A client write of one put, logged at `offset`, its payload `size` bytes
    (only its size and its body count here)."""
    body = pb.WriteRequest(puts=[pb.PutRequest(key="k")])
    return PendingEntry(LogEntry(1, offset, 0, b"x" * size), CLIENT_WRITE, body, True)


def _hold(core: ShardCore[None], *entries: PendingEntry[None]) -> None:
    for entry in entries:
        core.pending.append(entry)


def test_the_write_buffer_bounds_entries_and_bytes() -> None:
    core = _core()  # at most 4 entries and 100 bytes pending
    _hold(core, _put(6, 25), _put(7, 25))
    assert core.has_room(50)
    assert not core.has_room(51)
    _hold(core, _put(8, 10), _put(9, 10))
    assert not core.has_room(1)
    core.check_fits(100)
    with pytest.raises(Overloaded):
        core.check_fits(101)


def test_a_follower_keeps_in_memory_only_a_run_within_the_bounds() -> None:
    core = _core()  # applied up to 5
    assert not core.keeps_in_memory(7, 10)  # not the next after what is applied
    assert core.keeps_in_memory(6, 10)
    _hold(core, _put(6, 10))
    assert core.keeps_in_memory(7, 10)
    assert not core.keeps_in_memory(8, 10)
    assert not core.keeps_in_memory(7, 91)


def test_the_apply_step_takes_held_entries_and_reads_the_rest_from_the_log() -> None:
    core = _core(last_offset=20, applied=5)  # groups of at most 3 entries, 10 operations
    core.commit_offset = 20
    # Nothing held: read from the log, at most a group's worth of entries.
    assert core.next_apply_group(limit=20) == ReadLog(6, 8)
    assert core.next_apply_group(limit=7) == ReadLog(6, 7)
    # Held from 8 on: read up to the entry before.
    _hold(core, _put(8), _put(9), _put(10), _put(11))
    assert core.next_apply_group(limit=20) == ReadLog(6, 7)
    read = [_put(6), _put(7)]
    assert core.group_of(read) == read
    core.on_applied(7)
    group = core.next_apply_group(limit=20)
    assert not isinstance(group, ReadLog)
    assert [pending.offset for pending in group] == [8, 9, 10]
    assert [pending.offset for pending in core.pending] == [11]
    assert core.pending.size_bytes == 10


def test_the_apply_step_drops_held_entries_applied_meanwhile() -> None:
    core = _core(last_offset=20, applied=5)
    core.commit_offset = 20
    _hold(core, _put(6), _put(7), _put(8))
    core.on_applied(7)  # e.g. written from the leader's applied changes
    group = core.next_apply_group(limit=8)
    assert not isinstance(group, ReadLog)
    assert [pending.offset for pending in group] == [8]
    assert not core.pending and core.pending.size_bytes == 0


def test_a_cut_log_drops_what_the_buffer_held_past_the_cut() -> None:
    core = _core(last_offset=9, applied=5)
    _hold(core, _put(6), _put(7), _put(8), _put(9))
    dropped = core.on_log_cut(7)
    assert [pending.offset for pending in dropped] == [9, 8]
    assert core.head.offset == 7
    assert core.pending.last_offset == 7 and core.pending.size_bytes == 20


def test_a_snapshot_makes_everything_up_to_its_base_committed_and_applied() -> None:
    core = _core()
    _hold(core, _put(6))
    core.on_snapshot_installed(EntryId(3, 40))
    assert not core.pending
    assert (core.commit_offset, core.applied_offset, core.leader_commit_offset) == (40, 40, 40)
    assert core.head == EntryId(3, 40)


def test_an_apply_group_takes_the_first_entry_then_what_fits_the_bounds() -> None:
    core = _core()  # at most 3 entries and 10 operations a group
    assert core.apply_group_size([]) == 0
    assert core.apply_group_size([50]) == 1  # the first always, whatever it costs
    assert core.apply_group_size([50, 1]) == 1
    assert core.apply_group_size([4, 4, 2, 1]) == 3  # 10 operations
    assert core.apply_group_size([4, 4, 3]) == 2
    assert core.apply_group_size([1, 1, 1, 1, 1]) == 3  # the entry bound


def test_an_entrys_cost_counts_its_record_operations() -> None:
    write = pb.WriteRequest(
        puts=[pb.PutRequest(key="a"), pb.PutRequest(key="b")],
        deletes=[pb.DeleteRequest(key="c")],
        delete_ranges=[pb.DeleteRangeRequest(start_inclusive="d", end_exclusive="e")],
    )
    assert operation_count(CLIENT_WRITE, write) == 4
    folded = Folded([pb.WriteRequest(puts=[pb.PutRequest(key="a")]), write])
    assert operation_count(FOLDED_WRITES, folded) == 4  # folds hold puts and deletes only
    assert operation_count(CLOSE_SESSION, pb.WriteRequest()) == MAX_RECORDS_PER_CLOSE_ENTRY
    assert operation_count(TERM_START, pb.WriteRequest()) == 1


def test_a_fold_takes_requests_with_disjoint_keys_within_its_bounds() -> None:
    held = {"a", "b"}
    assert fits_fold(held, 2, 40, {"c"}, 1, 20, max_operations=3, max_bytes=60)
    assert not fits_fold(held, 2, 40, {"b"}, 1, 20, max_operations=3, max_bytes=60)
    assert not fits_fold(held, 2, 40, {"c"}, 2, 20, max_operations=3, max_bytes=60)
    assert not fits_fold(held, 2, 40, {"c"}, 1, 21, max_operations=3, max_bytes=60)


def test_only_a_leader_with_followers_and_enough_uncommitted_entries_folds() -> None:
    assert starts_fold(uncommitted_entries=2, threshold=2, has_followers=True)
    assert not starts_fold(uncommitted_entries=1, threshold=2, has_followers=True)
    assert not starts_fold(uncommitted_entries=9, threshold=2, has_followers=False)


def _write(*keys: str) -> tuple[bytes, pb.WriteRequest]:
    request = pb.WriteRequest(puts=[pb.PutRequest(key=key, value=b"v") for key in keys])
    return request.SerializeToString(), request


def test_a_leader_folds_plain_writes_while_entries_wait_for_their_commit() -> None:
    core = _core(last_offset=9, applied=5)  # folds from 2 uncommitted entries
    core.commit_offset = 8
    request = _write("/a")[1]
    assert not core.folds(request, plain_puts=True, has_followers=True)  # 1 uncommitted
    core.commit_offset = 7
    assert core.folds(request, plain_puts=True, has_followers=True)
    assert not core.folds(request, plain_puts=True, has_followers=False)
    assert not core.folds(request, plain_puts=False, has_followers=True)
    ranged = pb.WriteRequest(delete_ranges=[pb.DeleteRangeRequest(start_inclusive="/a")])
    assert not core.folds(ranged, plain_puts=True, has_followers=True)


def test_a_write_that_does_not_fit_the_fold_seals_it_first() -> None:
    core = _core()  # a fold holds at most 3 operations
    assert core.fold_in(*_write("/a"), waiter=None) is None
    assert core.fold_in(*_write("/b", "/c"), waiter=None) is None
    # Still collecting: every write joins it, whatever the uncommitted count.
    assert core.folds(_write("/z")[1], plain_puts=True, has_followers=True)
    sealed = core.fold_in(*_write("/d"), waiter=None)  # a fourth operation
    assert sealed is not None and [len(r.puts) for r in sealed.requests] == [1, 2]
    kind, _, body = sealed.entry()
    assert kind == FOLDED_WRITES and isinstance(body, Folded) and len(body.requests) == 2
    # The same key again cannot share the fold's version id: the next fold.
    assert core.fold_in(*_write("/d"), waiter=None) is not None
    single = core.seal_fold()
    assert single is not None and single.entry()[0] == CLIENT_WRITE
    assert core.seal_fold() is None


def test_a_leader_logs_at_the_next_offset_of_its_term_and_holds_the_entry() -> None:
    core = _core(last_offset=9, applied=5)
    assert _lead(core, 2) == EntryId(2, 10)
    core.on_replicated_timestamp(500)
    entry = core.next_entry(b"\x01", now_ms=400)
    assert (entry.term, entry.offset, entry.timestamp_ms) == (2, 11, 500)
    assert core.log.last_offset == 10  # not logged until the WAL holds it
    core.on_logged(PendingEntry(entry, CLIENT_WRITE, pb.WriteRequest(), True, "writer"))
    assert core.head == EntryId(2, 11)
    assert [(p.offset, p.waiter) for p in core.pending] == [(11, "writer")]


def test_a_follower_holds_what_fits_and_learns_its_leaders_commit() -> None:
    core = _core(last_offset=5, applied=5)  # holds at most 4 entries, 100 bytes
    core.follow(2, OTHER)
    request = pb.WriteRequest(puts=[pb.PutRequest(key="/k", value=b"v")])
    payload = encode_entry(CLIENT_WRITE, request.SerializeToString())
    entries = [LogEntry(2, offset, 700 + offset, payload) for offset in range(6, 12)]
    assert not core.on_replicated(entries, leader_commit_offset=8, durable_offset=5)
    assert core.head == EntryId(2, 11) and core.last_timestamp_ms == 711
    assert [pending.offset for pending in core.pending] == [6, 7, 8, 9]
    assert core.leader_commit_offset == 8 and core.commit_offset == 5  # nothing durable yet
    assert core.on_follower_durable(11) and core.commit_offset == 8


# -- events and what the driver must do for them (ShardCore.step) --------------------


def test_new_term_persists_the_term_steps_down_and_syncs_before_answering() -> None:
    core: ShardCore[str] = ShardCore(
        0, 1, history_of(0, 5, lambda offset: 1, EntryId(-1, NO_OFFSET)), limits=LIMITS
    )
    _lead(core, 2, followers=(OTHER,))
    entry = core.next_entry(b"\x01", now_ms=0)
    core.on_logged(PendingEntry(entry, CLIENT_WRITE, pb.WriteRequest(), True, "logged writer"))
    core.fold_in(*_write("/a"), waiter="folded writer")
    ready = core.step(NewTerm(3))
    assert ready.persist_term and ready.sync_log and not ready.new_stream
    assert ready.stepped_down is not None
    assert ready.stepped_down.outcome_unknown == ("logged writer",)
    assert ready.stepped_down.not_logged is not None
    assert ready.stepped_down.not_logged.waiters == ["folded writer"]
    assert (core.role, core.term, core.leading, core.fold) == (Role.FENCED, 3, None, None)
    # Fenced again in its own term by a controller that did not hear the answer:
    # the term is durable already, and a fenced replica has nothing to stop.
    assert core.step(NewTerm(3)) == Ready(sync_log=True)


def test_truncate_cuts_what_disagrees_and_syncs_what_it_answers() -> None:
    core = _core(last_offset=9, applied=5)  # term 1 entries 0..9, committed to 5
    leader_log = history_of(0, 7, lambda offset: 1 if offset <= 7 else 2, EntryId(-1, NO_OFFSET))
    leader_log.append(2, 8)
    ready = core.step(Truncate(2, OTHER, leader_log))
    assert ready == Ready(persist_term=True, new_stream=True, cut_log_after=7, sync_log=True)
    assert (core.role, core.term, core.leader) == (Role.FOLLOWER, 2, OTHER)
    assert core.log.last_offset == 9  # cut once the driver cut the WAL: on_log_cut
    # The same leader again, its log agreeing with ours: nothing to cut, no new term.
    core.on_log_cut(7)
    assert core.step(Truncate(2, OTHER, leader_log)) == Ready(new_stream=True, sync_log=True)


def test_a_refused_truncate_changes_nothing() -> None:
    core = _core(last_offset=9, applied=5)
    core.fence(3)
    with pytest.raises(InvalidTerm):
        core.step(Truncate(2, OTHER, history_of(0, 9, lambda o: 1, EntryId(-1, NO_OFFSET))))
    # A leader whose log disagrees with what this replica committed: refused
    # before the replica takes its term (which it would have to persist).
    disagreeing = history_of(0, 9, lambda offset: 1 if offset < 3 else 2, EntryId(-1, NO_OFFSET))
    with pytest.raises(ReplicationInvariantError):
        core.step(Truncate(4, OTHER, disagreeing))
    assert (core.role, core.term, core.leader) == (Role.FENCED, 3, None)


def test_closing_a_leader_steps_it_down() -> None:
    core = _core()
    _lead(core, 2)
    stepped_down = core.step(Closing()).stepped_down
    assert stepped_down == SteppedDown((), None)
    assert core.step(Closing()) == Ready()


def test_a_state_digest_waits_at_its_offset_unless_applied_past_it() -> None:
    core = _core(last_offset=9, applied=5)
    core.stop_applying_at(7)
    assert core.apply_limit(durable_offset=9) == 5  # committed only up to 5
    core.commit_offset = 9
    assert core.apply_limit(durable_offset=9) == 7  # stops at the digest's offset
    core.applied_offset = 7
    core.check_view_at(7)
    core.resume_applying_at(7)
    with pytest.raises(OffsetPassed):
        core.stop_applying_at(6)
    core.applied_offset = 9  # a snapshot moved past it while waiting
    with pytest.raises(OffsetPassed):
        core.check_view_at(8)
