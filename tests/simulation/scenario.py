"""Scripted runs of the simulated shard: no random faults, every message delivered
one step after it is sent, every replica syncing each step, and a controller that
does only what the script says. For histories too particular for random search
to find in a reasonable number of seeds; the checkers still run after each step.
"""

from __future__ import annotations

from collections.abc import Callable

from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core.replication.leader import LeaderCore
from cairn.storage.core.replication.terms import EntryId
from simulation import messages as m
from simulation.context import RuntimeRules
from simulation.coordinator import NAME as CONTROLLER
from simulation.coordinator import Coordinator
from simulation.network import NetworkFaults
from simulation.replica import SimReplica
from simulation.world import CLIENT, SimConfig, World


class ScriptedCoordinator(Coordinator):
    """Elects only when told, preferring a given member among equal heads."""

    preferred: str | None = None

    def tick(self, faults: bool) -> None:
        pass

    def choose_leader(self, answers: dict[str, EntryId]) -> str:
        best = max(answers.values())
        tied = sorted(name for name, head in answers.items() if head == best)
        return self.preferred if self.preferred in tied else tied[0]


class Script:
    def __init__(
        self,
        replicas: int,
        rules: RuntimeRules,
        leader_core_class: type[LeaderCore] = LeaderCore,
    ) -> None:
        config = SimConfig(
            replicas=replicas,
            steps=0,
            rules=rules,
            faults=NetworkFaults.none(),
            controller="scripted",
            coordinator_class=ScriptedCoordinator,
            leader_core_class=leader_core_class,
        )
        self.world = World(0, config)
        self.world.faults = False
        coordinator = self.world.coordinator
        assert isinstance(coordinator, ScriptedCoordinator)
        self.coordinator = coordinator
        self.writes = 0
        self.reads = 0

    def replica(self, name: str) -> SimReplica:
        return self.world.replicas[name]

    def run_until(self, condition: Callable[[], bool], max_steps: int = 40) -> None:
        for _ in range(max_steps):
            self.world.step()
            if condition():
                return
        raise AssertionError(f"not reached in {max_steps} steps:\n{self.world.describe()}")

    def steps(self, count: int) -> None:
        for _ in range(count):
            self.world.step()

    def elect(self, preferred: str | None = None, taken_over: bool = True) -> str:
        """An election by the controller; returns the new leader, once it has taken
        over (it takes writes then) unless told not to wait for that."""
        self.coordinator.preferred = preferred
        self.coordinator.start_election("scripted")
        self.run_until(lambda: self.coordinator.leader is not None)
        leader = self.coordinator.leader
        assert leader is not None
        if taken_over:
            leading = self.replica(leader[1])
            self.run_until(lambda: leading.leading is not None and leading.leading.taken_over())
        return leader[1]

    def write(self, leader: str) -> int:
        """A client write sent to `leader`; returns the offset it will take."""
        self.writes += 1
        offset = self.replica(leader).log.last_offset + 1
        request = pb.WriteRequest(puts=[pb.PutRequest(key="/s", value=b"%d" % self.writes)])
        self.world.env.send(CLIENT, leader, m.ClientWrite(self.writes, request.SerializeToString()))
        return offset

    def read(self, reader: str, replica: str) -> None:
        """A read by `reader` (one of world.READERS) sent to `replica` now."""
        self.reads += 1
        now = self.world.env.now
        self.world.env.send(reader, replica, m.ClientRead(self.reads, reader, now))

    def write_until_acknowledged(self, leader: str, max_steps: int = 100) -> int:
        """Writes to `leader`, sent again every few steps (a leader taking over
        refuses them), until one is acknowledged; returns its offset."""
        acked = self.world.observer.acked
        before = len(acked)
        for step in range(max_steps):
            if step % 3 == 0:
                self.write(leader)
            self.world.step()
            if len(acked) > before:
                return acked[-1].offset
        raise AssertionError(f"no write acknowledged in {max_steps} steps")

    def cut_off(self, *names: str) -> None:
        """Cut `names` off from everyone else (the controller and clients stay with
        the rest) until `heal`."""
        assert CONTROLLER not in names
        self.world.env.net.partition(frozenset(names), until_step=1 << 60)

    def heal(self) -> None:
        self.world.env.net.heal()

    def crash(self, name: str) -> None:
        self.replica(name).crash()

    def restart(self, name: str) -> None:
        self.replica(name).start()
