"""Targeted histories for the managed cluster (managed_cluster.py): each
reproduces, with random timing, the class of history one of issue 38's holes
needs, so that reverting the hole's fix (its mutant, mutants.py) is caught
within a CI-sized seed budget; the broad profiles reach them too rarely. Each
must also pass with the real code.
"""

from __future__ import annotations

import dataclasses
import enum

from cairn.controller.model import ShardRecord
from cairn.storage.core.replication.terms import NO_OFFSET
from simulation.managed_cluster import CONTROLLERS, Cluster, Faults
from simulation.managed_controller import ControllerProcess

# The phases' bounds (ms) of WipeWhileLagging's history.
LAG_BEFORE_WIPE_MS = (200.0, 1_200.0)
# A wiped follower whose replica is not re-created within this long: given up.
RECREATE_WAIT_MS = 3_000.0
# From the re-creation to the leader's loss: the follower is still catching up.
CRASH_AFTER_RECREATE_MS = (0.0, 120.0)
# A shrink past the commit offset the controller does not record within this
# long is let go.
SHRINK_RECORDED_WITHIN_MS = 500.0
# The leader stays down this long, past the controller's failure detection:
# the members left may elect without it.
LEADER_DOWN_MS = (400.0, 1_500.0)
# How long MoveToLaggingVoter's follower and spare pods are cut off from the
# leader.
LAGGING_VOTER_CUT_MS = (300.0, 1_500.0)
# The leader move waits until the leader has committed this many entries past
# what the target holds (so that the other member knows of the commit too).
LAGGING_VOTER_MISSES = 4


class _Phase(enum.Enum):
    IDLE = "idle"
    LAGGING = "lagging"  # C cut off; B's disk lost at `_next_ms`
    REBUILDING = "rebuilding"  # waiting for B's replica to be re-created
    CATCHING_UP = "catching up"  # the leader loses power at `_next_ms`


class WipeWhileLagging(Cluster):
    """Issue 38's hole 1. The leader A has two followers: C is cut off (it
    lags) while A and B acknowledge writes; B loses its disk (as the fault
    model allows: A holds everything, C its data); once the controller has
    re-created B's replica, while A catches it up, A loses power and stays
    down a while, and C's lag ends. B (partly rebuilt) and C (lagging) are a
    majority that must not elect: neither holds every acknowledged write."""

    HISTORY_PROBABILITY = 0.001

    def __init__(self, seed: int, faults: Faults | None = None) -> None:
        super().__init__(seed, faults)
        self._phase = _Phase.IDLE
        self._next_ms = 0.0
        self._leader = self._lagging = self._wiped = ""

    def _faults(self) -> None:
        super()._faults()
        now, rng = self.now_ms, self.rng
        if self._phase is _Phase.IDLE:
            self._begin()
        elif self._phase is _Phase.LAGGING and now >= self._next_ms:
            leader, victim = self.leader_pod(), self.pods[self._wiped]
            if leader is None or leader.name != self._leader or not victim.up:
                self._end()
            elif not self._may_lose_disk(victim.name):
                self.count("hole 1 histories beyond the fault model")
                self._end()
            else:
                victim.lose_disk()
                victim.down_until_ms = now + rng.uniform(5, 50)
                self._phase, self._next_ms = _Phase.REBUILDING, now + RECREATE_WAIT_MS
        elif self._phase is _Phase.REBUILDING:
            if self.pods[self._wiped].replica() is not None:
                self._phase = _Phase.CATCHING_UP
                self._next_ms = now + rng.uniform(*CRASH_AFTER_RECREATE_MS)
            elif now >= self._next_ms:
                self._end()
        elif self._phase is _Phase.CATCHING_UP and now >= self._next_ms:
            leader = self.pods[self._leader]
            if leader.up:
                leader.lose_power()
                leader.down_until_ms = now + rng.uniform(*LEADER_DOWN_MS)
                self.count("hole 1 leaders lost")
            self._end()

    def _begin(self) -> None:
        record, rng = self.record(), self.rng
        if record is None or record.leader is None or rng.random() >= self.HISTORY_PROBABILITY:
            return
        followers = sorted(set(record.ensemble) - {record.leader})
        if len(followers) != 2 or not all(self.pods[name].up for name in followers):
            return
        self._lagging, self._wiped = rng.sample(followers, 2)
        self._leader = record.leader
        self._phase = _Phase.LAGGING
        self._next_ms = self.now_ms + rng.uniform(*LAG_BEFORE_WIPE_MS)
        # Cut off until the history ends, however long it takes.
        forever = self.now_ms + 10 * RECREATE_WAIT_MS
        self.net.isolate(self._lagging, [*self.pods, *CONTROLLERS], forever)
        self.count("hole 1 histories")

    def _end(self) -> None:
        self.net.rejoin(self._lagging)
        self._phase = _Phase.IDLE


class CrashAfterShrink(Cluster):
    """A removal's worst moment ("remove a member the commit needs"): when the
    leader's ensemble shrinks while its commit offset is held by fewer than a
    majority of the voters left, the leader loses power as soon as the
    controller has recorded the removal (the removed member no longer counts
    in an election) if a member left has not synced what was committed, and
    that member with it; the leader stays down past failure detection: the
    members that remain elect among themselves. The real leader never shrinks its ensemble then
    (QuorumTracker.remove): with the real code this only adds faults."""

    def __init__(self, seed: int, faults: Faults | None = None) -> None:
        super().__init__(seed, faults)
        # (leader, term) -> how many followers it had at the last step
        self._followers: dict[tuple[str, int], int] = {}
        # A shrink past the commit offset: (leader, term, commit offset, until ms).
        self._shrunk: tuple[str, int, int, float] | None = None

    def _faults(self) -> None:
        super()._faults()
        for pod in self.pods.values():
            replica = pod.replica()
            core = replica.core.leading if replica is not None else None
            if replica is None or core is None:
                continue
            key = (pod.name, replica.term)
            count, before = len(core.followers), self._followers.get(key)
            self._followers[key] = count
            if before is None or count >= before:
                continue
            quorum = core.quorum
            holding = sum(
                1 for v in quorum.voters if quorum.acked.get(v, NO_OFFSET) >= quorum.commit_offset
            )
            if holding * 2 <= len(quorum.voters):
                until = self.now_ms + SHRINK_RECORDED_WITHIN_MS
                self._shrunk = (pod.name, replica.term, quorum.commit_offset, until)
        self._crash_once_recorded()

    def _crash_once_recorded(self) -> None:
        if self._shrunk is None:
            return
        name, term, commit, until = self._shrunk
        record, replica = self.record(), self.pods[name].replica()
        if self.now_ms > until or replica is None or replica.term != term:
            self._shrunk = None
            return
        if record is None or record.term != term or record.leaving:
            return  # not recorded yet
        self._shrunk = None
        lacking = [
            member
            for member in record.ensemble
            if member != name
            and (disk := self.pods[member].disk()) is not None
            and disk.wal.synced_offset < commit
        ]
        if lacking:
            # The leader and the members that lack what it committed lose power
            # together (a rack): those come back soon, without what they had not
            # synced; the leader stays down past failure detection.
            pod = self.pods[name]
            pod.lose_power()
            pod.down_until_ms = self.now_ms + self.rng.uniform(*LEADER_DOWN_MS)
            for member in lacking:
                if self.pods[member].up:
                    self.pods[member].lose_power()
                    self.pods[member].down_until_ms = self.now_ms + self.rng.uniform(5, 50)
            self.count("leaders lost after shrinking past their commit offset")


class MoveToLaggingVoter(Cluster):
    """Issue 38's hole 2 ("a learner is elected"). The leader L of three
    members: follower C, once it holds an entry of L's term, is cut off from
    L (it lags, still a voter, and the controller still reaches it), and so
    are the spare pods (the member the controller adds next gets nothing);
    the operator raises the replication factor to four, and once the new
    member is in the ensemble asks for the leader to move to C. Counting the
    new member as a voter, C's head is held by three of the four; counting
    the voters L counted, only L and the third member hold what L committed:
    electing C loses it. The real planner moves to C only once C has caught
    up and the new member votes, after the cuts heal at the end of the
    history; the factor then goes back to three."""

    HISTORY_PROBABILITY = 0.002

    def __init__(self, seed: int, faults: Faults | None = None) -> None:
        super().__init__(seed, faults)
        self._target = ""
        self._ends_ms: float | None = None
        self._move_requested = False

    def _faults(self) -> None:
        super()._faults()
        active = self.active_controller()
        if self._ends_ms is None:
            if active is not None:
                self._begin(active)
            return
        record = self.record()
        if self.now_ms >= self._ends_ms:
            if active is not None:
                self._ends_ms = None
                self.request_replication_factor(active, self.faults.replication_factor)
        elif (
            not self._move_requested
            and active is not None
            and record is not None
            and len(record.ensemble) > self.faults.replication_factor
            and self._target_lacks_a_commit(record)
        ):
            self._move_requested = True
            self.request_leader_move(active, self._target)
            self.count("hole 2 moves to a lagging voter")

    def _target_lacks_a_commit(self, record: ShardRecord) -> bool:
        """Has the leader committed entries the target does not hold?"""
        core = self.leading_core(record.leader)
        progress = core.followers.get(self._target) if core is not None else None
        if core is None or progress is None:
            return False
        return core.commit_offset >= progress.acked_offset + LAGGING_VOTER_MISSES

    def _begin(self, active: ControllerProcess) -> None:
        record, rng = self.record(), self.rng
        if record is None or record.leader is None or rng.random() >= self.HISTORY_PROBABILITY:
            return
        if len(record.ensemble) != self.faults.replication_factor or record.leaving:
            return
        core = self.leading_core(record.leader)
        if core is None or core.term != record.term:
            return
        term_start = core.quorum.term_start_offset
        followers = sorted(
            name
            for name, progress in core.followers.items()
            if core.is_voting(name) and progress.acked_offset >= term_start
        )
        if not followers or not all(self.pods[name].up for name in record.ensemble):
            return
        self._target = rng.choice(followers)
        self._ends_ms = self.now_ms + rng.uniform(*LAGGING_VOTER_CUT_MS)
        self._move_requested = False
        spares = sorted(set(self.pods) - set(record.ensemble))
        for name in [self._target, *spares]:
            self.net.cut_apart(name, record.leader, self._ends_ms)
        self.request_replication_factor(active, self.faults.replication_factor + 1)
        self.count("hole 2 histories")


@dataclasses.dataclass(frozen=True)
class Targeted:
    faults: Faults
    cluster: type[Cluster] = Cluster


TARGETED: dict[str, Targeted] = {
    # Hole 2 broadly (move-to-lagging-voter is its targeted history): a
    # learner still catching up elected. The replication factor cycles
    # through even sizes often (3 -> 2 -> 4 -> 3: a learner added each time it
    # grows), operators ask for leader moves often, learners stop part-way,
    # bursts of writes keep learners behind, short lags keep a follower behind
    # too.
    "even-learners": Targeted(
        Faults(
            operator=0.015,
            leader_move=0.005,
            learner_stop=0.002,
            burst=0.02,
            long_lag=0.0005,
            long_lag_ms=(40.0, 150.0),
            slow_sync_share=0.5,
        )
    ),
    # A member the commit still needs removed (CrashAfterShrink): the
    # replication factor changes often under steady writes, so followers are a
    # few entries apart when a removal lands; fewer other faults, which would
    # end the history first.
    "shrink-then-crash": Targeted(
        Faults(
            operator=0.015,
            burst=0.02,
            power_loss=0.0001,
            correlated_power_loss=0.0,
            cut=0.0001,
            isolation=0.0,
            controller_crash=0.0,
            leader_move=0.0001,
            slow_sync_share=0.5,
        ),
        CrashAfterShrink,
    ),
    # Hole 1: a wiped member keeps its vote (WipeWhileLagging). The
    # replication factor stays 3: the history needs a leader and two followers.
    "wipe-while-lagging": Targeted(Faults(burst=0.02), WipeWhileLagging),
    # Hole 2: a leader move to a lagging voter while the member just added
    # has nothing (MoveToLaggingVoter). Few other faults, which would end the
    # history first.
    "move-to-lagging-voter": Targeted(
        Faults(
            power_loss=0.0002,
            correlated_power_loss=0.0,
            cut=0.0003,
            isolation=0.0,
            controller_crash=0.0002,
            burst=0.02,
        ),
        MoveToLaggingVoter,
    ),
}
