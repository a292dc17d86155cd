"""The planner's output: what the executor should do next, as values.

Each action is idempotent (doing it twice is harmless) and concerns one shard
or one node, so that actions of different shards may run at the same time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cairn.controller.model import NodeHealth, ShardRecord


class ActionFailed(Exception):
    """An action could not be completed now; the planner will ask again."""


@dataclass(frozen=True)
class RecordNode:
    """Write what is known of a node into the status."""

    name: str
    public_address: str
    internal_address: str
    labels: Mapping[str, str] = field(default_factory=dict)
    health: NodeHealth = NodeHealth.UNKNOWN


@dataclass(frozen=True)
class PlaceShards:
    """Record the shards of a new namespace with their first ensembles; each
    then gets its first election."""

    namespace: str
    shards: tuple[ShardRecord, ...]


@dataclass(frozen=True)
class Elect:
    """Fence the shard at a new term, make the member with the highest head its
    leader. `preferred` wins ties on the head (a leader move)."""

    shard: int
    reason: str
    preferred: str | None = None


@dataclass(frozen=True)
class ConfirmLeader:
    """An election whose leader took office but was not recorded as steady (the
    controller stopped in between): record it."""

    shard: int


@dataclass(frozen=True)
class ChangeEnsemble:
    """Add one member or remove one follower (never both: one change at a
    time keeps every majority of old and new ensembles overlapping)."""

    shard: int
    reason: str
    add: str | None = None
    remove: str | None = None

    def __post_init__(self) -> None:
        assert (self.add is None) != (self.remove is None), "exactly one of add/remove"


@dataclass(frozen=True)
class FinishEnsembleChange:
    """Make the leader's followers match the recorded ensemble: add the members
    it lacks (a change interrupted, or a wiped node), drop those leaving."""

    shard: int


@dataclass(frozen=True)
class RecordVoting:
    """Record that the shard's leader counts its recorded learners `names`
    (`LastLeader.learners`) as voters now, and, with `term_committed`, that
    it committed in its term (`LastLeader.committed`), as its report shows:
    an election after its death, or after this controller restarted, then
    knows it too (planner.counted_voters). A status write (of what the
    leader's report still shows when it is made)."""

    shard: int
    names: tuple[str, ...]
    term_committed: bool = False


@dataclass(frozen=True)
class DeleteReplica:
    """A replica a node keeps of a shard it is no longer a member of."""

    node: str
    shard: int
    term: int


@dataclass(frozen=True)
class DropLeaderMove:
    shard: int
    node: str
    reason: str


@dataclass(frozen=True)
class ObserveGeneration:
    generation: int


Action = (
    RecordNode
    | PlaceShards
    | Elect
    | ConfirmLeader
    | ChangeEnsemble
    | FinishEnsembleChange
    | RecordVoting
    | DeleteReplica
    | DropLeaderMove
    | ObserveGeneration
)


def shard_of(action: Action) -> int | None:
    """The shard an action concerns (None: it concerns the cluster or a node)."""
    if isinstance(
        action, Elect | ConfirmLeader | ChangeEnsemble | FinishEnsembleChange | RecordVoting
    ):
        return action.shard
    if isinstance(action, DeleteReplica | DropLeaderMove):
        return action.shard
    return None
