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
            coordinator_class=ScriptedCoordinator,
            leader_core_class=leader_core_class,
        )
        self.world = World(0, config)
        self.world.faults = False
        coordinator = self.world.coordinator
        assert isinstance(coordinator, ScriptedCoordinator)
        self.coordinator = coordinator
        self.writes = 0

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

    def elect(self, preferred: str | None = None) -> str:
        """An election by the controller; returns the new leader."""
        self.coordinator.preferred = preferred
        self.coordinator.start_election("scripted")
        self.run_until(lambda: self.coordinator.leader is not None)
        leader = self.coordinator.leader
        assert leader is not None
        return leader[1]

    def write(self, leader: str) -> int:
        """A client write sent to `leader`; returns the offset it will take."""
        self.writes += 1
        offset = self.replica(leader).log.last_offset + 1
        request = pb.WriteRequest(puts=[pb.PutRequest(key="/s", value=b"%d" % self.writes)])
        self.world.env.send(CLIENT, leader, m.ClientWrite(self.writes, request.SerializeToString()))
        return offset

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
