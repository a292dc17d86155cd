"""What the controller currently sees of the storage pods: a value the planner
reads, rebuilt by the observer (heartbeats, health watches, status polls)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from cairn.common.heartbeat import ReplicaReport


@dataclass(frozen=True)
class NodeView:
    name: str
    public_address: str
    internal_address: str
    labels: Mapping[str, str] = field(default_factory=dict)
    alive: bool = False
    # When the node last turned alive / unreachable (ms, the observer's clock).
    alive_since_ms: int = 0
    dead_since_ms: int = 0
    # Its replicas as of the last successful status poll, by shard id; None if
    # never polled since it last turned alive (unknown, not empty).
    replicas: Mapping[int, ReplicaReport] | None = None


@dataclass(frozen=True)
class Observed:
    now_ms: int
    nodes: Mapping[str, NodeView] = field(default_factory=dict)
    # The last report each shard's leader gave while leading (`LeaderReports`),
    # kept after it stopped: who that term's leader counted outlives it.
    leader_reports: Mapping[int, ReplicaReport] = field(default_factory=dict)

    def alive(self, name: str | None) -> bool:
        node = self.nodes.get(name) if name is not None else None
        return node is not None and node.alive

    def report(self, name: str | None, shard: int) -> ReplicaReport | None:
        node = self.nodes.get(name) if name is not None else None
        if node is None or not node.alive or node.replicas is None:
            return None
        return node.replicas.get(shard)

    def name_of_address(self, internal_address: str) -> str | None:
        for node in self.nodes.values():
            if node.internal_address == internal_address:
                return node.name
        return None


class NodeViews(Protocol):
    """What the executor asks of failure detection (the Observer; the
    simulation's observer of simulated pods)."""

    def node(self, name: str) -> NodeView | None:
        """One node's view as of now."""
        ...

    def view(self) -> Observed: ...

    async def refresh(self, names: Iterable[str]) -> None:
        """Poll these nodes' status now (after acting on them)."""
        ...


class LeaderReports:
    """The last report each shard's leader gave while leading (of the highest
    term seen), kept when it dies or restarts fenced. An election after a
    leader's death can then still tell whom that leader counted toward its
    commit offset and whether it committed in its term (`counted_voters`),
    which may let half of an even ensemble elect. Kept in memory only: a
    controller that restarts knows only what the shard's record says of its
    last leader (`ShardRecord.last_leader`). One report per recorded shard
    (`retain`)."""

    def __init__(self) -> None:
        self._by_shard: dict[int, ReplicaReport] = {}

    def note(self, reports: Iterable[ReplicaReport]) -> None:
        for report in reports:
            if report.role != "leader":
                continue
            known = self._by_shard.get(report.shard)
            if known is None or report.term >= known.term:
                self._by_shard[report.shard] = report

    def snapshot(self) -> dict[int, ReplicaReport]:
        return dict(self._by_shard)

    def retain(self, shards: Iterable[int]) -> None:
        """Forget all but these shards (the recorded ones: deleted shards go), so
        the memory stays as large as the cluster, not its history."""
        keep = set(shards)
        for shard in [shard for shard in self._by_shard if shard not in keep]:
            del self._by_shard[shard]
