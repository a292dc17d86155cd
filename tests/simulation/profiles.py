"""Targeted fault profiles: each reproduces the class of history one of issue
38's holes needs, with random variation, so that reverting the hole's fix (its
mutant, mutants.py) is caught within a CI-sized seed budget. The broad profiles
(world.PROFILES) reach these histories too rarely: their other faults (learners
stopped part-way, partitions, controller pauses) interrupt them first.

Each must also pass with the real code (test_simulation.py runs them like the
broad profiles).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from cairn.storage.core.replication.terms import NO_OFFSET
from simulation.network import Partition
from simulation.world import SimConfig, World

# The phases' bounds (steps) of WipeWhileLaggingWorld's history.
LAG_BEFORE_WIPE_STEPS = (20, 120)
# A wiped follower whose replica is not re-created within this long: given up.
RECREATE_WAIT_STEPS = 300
# From the re-creation to the leader's crash: the follower is still catching up.
CRASH_AFTER_RECREATE_STEPS = (0, 12)
# The leader stays down this long, past the controller's failure detection
# (ControllerSettings.dead_after_steps): the members left may elect without it.
LEADER_DOWN_STEPS = (40, 150)


class _Phase(enum.Enum):
    IDLE = "idle"
    LAGGING = "lagging"  # C cut off; the wipe of B at `_next_step`
    REBUILDING = "rebuilding"  # B wiped; waiting for its replica to be re-created
    CATCHING_UP = "catching up"  # B re-created; the leader crashes at `_next_step`


class WipeWhileLaggingWorld(World):
    """Issue 38's hole 1, with random timing. The leader A has two followers:
    C is cut off (it lags) while A and B acknowledge writes; B loses its disk
    (only as world._wipe's fault model allows: A holds everything and C its
    data); once the controller has re-created B's replica, while A catches it
    up, A crashes and stays down a while, and C's lag ends. B (partly rebuilt)
    and C (lagging) are then a majority that must not elect: neither holds
    every acknowledged write. One such history at a time, begun at
    `HISTORY_PROBABILITY` a step; every other fault goes on as in World."""

    HISTORY_PROBABILITY = 0.01

    def __init__(self, seed: int, config: SimConfig) -> None:
        super().__init__(seed, config)
        self._phase = _Phase.IDLE
        self._next_step = 0
        self._leader = self._lagging = self._wiped = ""
        self._lag: Partition | None = None

    def _inject_faults(self) -> None:
        super()._inject_faults()
        now, rng = self.env.now, self.env.rng
        if self._phase is _Phase.IDLE:
            self._begin()
        elif self._phase is _Phase.LAGGING and now >= self._next_step:
            victim = self.replicas[self._wiped]
            leader = self.current_leader()
            if leader is None or leader.name != self._leader or not victim.up:
                self._end("the leader changed or the follower is down")
                return
            if not self._wipe(victim):
                self._end("the wipe is beyond the fault model")
                return
            self._phase, self._next_step = _Phase.REBUILDING, now + RECREATE_WAIT_STEPS
        elif self._phase is _Phase.REBUILDING:
            wiped = self.replicas[self._wiped]
            if wiped.up and not wiped.absent:
                self._phase = _Phase.CATCHING_UP
                self._next_step = now + rng.randint(*CRASH_AFTER_RECREATE_STEPS)
            elif now >= self._next_step:
                self._end("the wiped replica was not re-created")
        elif self._phase is _Phase.CATCHING_UP and now >= self._next_step:
            leader = self.replicas[self._leader]
            if leader.up:
                self.env.log(f"hole 1: {leader.name} crashes", "hole 1 leaders crashed")
                leader.crash()
                self.down_until[leader.name] = now + rng.randint(*LEADER_DOWN_STEPS)
            self._end("the leader crashed")

    def _begin(self) -> None:
        env, rng = self.env, self.env.rng
        leader = self.current_leader()
        if leader is None or rng.random() >= self.HISTORY_PROBABILITY:
            return
        followers = sorted(set(self.coordinator.ensemble) - {leader.name})
        if len(followers) != 2 or not all(self.replicas[name].up for name in followers):
            return
        self._lagging, self._wiped = rng.sample(followers, 2)
        self._leader = leader.name
        self._phase = _Phase.LAGGING
        self._next_step = env.now + rng.randint(*LAG_BEFORE_WIPE_STEPS)
        # Cut off until the history ends (`_end`), however long it takes.
        env.net.partition(frozenset({self._lagging}), env.now + 10 * RECREATE_WAIT_STEPS)
        self._lag = env.net.partitions[-1]
        env.log(f"hole 1: {self._lagging} lags, {self._wiped} to be wiped", "hole 1 histories")

    def _end(self, why: str) -> None:
        net = self.env.net
        net.partitions = [p for p in net.partitions if p is not self._lag]
        self.env.log(f"hole 1: {self._lagging}'s lag ends ({why})")
        self._phase = _Phase.IDLE


class CrashAfterShrinkWorld(World):
    """A removal's worst moment (mutants.py, "remove a member the commit
    needs"): whenever the leader's ensemble shrinks while its commit offset is
    held by fewer than a majority of the voters left, the leader crashes at
    once and stays down past failure detection, so the members that remain
    elect among themselves. The real leader never shrinks its ensemble then
    (QuorumTracker.remove), so with the real code this world only adds faults."""

    def __init__(self, seed: int, config: SimConfig) -> None:
        super().__init__(seed, config)
        # (leader, term) -> how many followers it had at the last step
        self._followers: dict[tuple[str, int], int] = {}

    def _inject_faults(self) -> None:
        super()._inject_faults()
        leader = self.current_leader()
        if leader is None or leader.leading is None:
            return
        core = leader.leading.core
        key = (leader.name, leader.leading.term)
        count, before = len(core.followers), self._followers.get(key)
        self._followers[key] = count
        if before is None or count >= before:
            return
        quorum = core.quorum
        holding = sum(
            1 for v in quorum.voters if quorum.acked.get(v, NO_OFFSET) >= quorum.commit_offset
        )
        if holding * 2 > len(quorum.voters):
            return
        self.env.log(
            f"{leader.name} shrank its ensemble past its commit offset; it crashes",
            "shrinks past the commit offset",
        )
        leader.crash()
        self.down_until[leader.name] = self.env.now + self.env.rng.randint(*LEADER_DOWN_STEPS)


@dataclass(frozen=True)
class Targeted:
    config: SimConfig
    world: type[World] = World


TARGETED: dict[str, Targeted] = {
    # Hole 2: a learner still catching up elected. The replication factor
    # cycles through even sizes often (3 -> 2 -> 4 -> 3: a learner added each
    # time it grows), operators ask for leader moves often (the moves and
    # handovers the hole let target a learner), learners stop part-way, writes
    # keep the learners behind, and short lags keep a follower behind too.
    "even-learners": Targeted(
        SimConfig(
            ensemble_change_probability=0.15,
            random_election_probability=0.05,
            learner_stop_probability=0.02,
            client_write_probability=0.8,
            long_lag_probability=0.005,
            long_lag_steps=(40, 150),
        )
    ),
    # A member the commit still needs removed (CrashAfterShrinkWorld): the
    # replication factor changes often (3 -> 2 -> 4 -> 3) under steady writes,
    # so followers are a few entries apart when a removal lands.
    "shrink-then-crash": Targeted(
        SimConfig(
            ensemble_change_probability=0.15,
            client_write_probability=0.8,
            # Fewer other faults, which would end the history first.
            crash_probability=0.001,
            power_loss_probability=0.0,
            partition_probability=0.001,
            controller_crash_probability=0.0,
            random_election_probability=0.001,
        ),
        CrashAfterShrinkWorld,
    ),
    # Hole 1: a wiped follower keeps its vote (WipeWhileLaggingWorld). The
    # replication factor stays 3: the history needs a leader and two followers.
    "wipe-while-lagging": Targeted(
        SimConfig(client_write_probability=0.8, ensemble_change_probability=0.0),
        WipeWhileLaggingWorld,
    ),
}


def run_targeted(seed: int, targeted: Targeted, config: SimConfig) -> World:
    """run_seed with the profile's world (`config`: its config, changed)."""
    world = targeted.world(seed, config)
    world.run()
    return world
