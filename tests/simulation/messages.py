"""The simulated wire: frozen dataclasses mirroring proto/cairn/proto/replication.proto.

Two additions to the proto, both about streams:
- `session`: a replication stream's id. A gRPC stream is one ordered channel that
  ends once; here each Truncate opens a session, and every message of the stream
  (entries, acks, snapshot) names it, so a message of an ended stream is ignored
  as gRPC would never deliver it. Session ids only grow (one counter for the
  whole simulation).
- `StreamBroken`: the follower ending a stream (entries that do not continue its
  log), which gRPC reports to the leader as the stream's error status.
"""

from __future__ import annotations

from dataclasses import dataclass

from cairn.common.heartbeat import ReplicaReport
from cairn.proto import replication_pb2 as rpb
from cairn.storage.core.entries import LogEntry
from cairn.storage.core.replication.replica import Member
from cairn.storage.core.replication.terms import EntryId, TermStart
from cairn.storage.kv.store import Column

# ---- controller -> storage ----------------------------------------------------------
#
# Calls of the real controller (simulation/controller.py) carry `call`, a number
# the answer echoes (a gRPC call's own reply), and `epoch`, the controller's
# fencing token: a pod refuses a call that changes it with an older epoch than
# the newest it has seen. The scripted coordinator sends neither (0).


@dataclass(frozen=True, slots=True)
class NewTerm:
    term: int
    epoch: int = 0
    call: int = 0
    # Create the replica if the pod lacks it (the request carries the shard's
    # spec); without, such a pod answers "not found". The scripted coordinator
    # always creates.
    create: bool = True


@dataclass(frozen=True, slots=True)
class NewTermResponse:
    term: int
    head: EntryId
    commit_offset: int
    # The incarnation of the replica's data (created anew after a wipe).
    incarnation: int = 0
    call: int = 0


@dataclass(frozen=True, slots=True)
class BecomeLeader:
    term: int
    followers: tuple[Member, ...]
    # (follower, incarnation of its data the controller recorded)
    incarnations: tuple[tuple[str, int], ...] = ()
    epoch: int = 0
    call: int = 0


@dataclass(frozen=True, slots=True)
class BecomeLeaderResponse:
    term: int
    term_start: EntryId
    call: int = 0


@dataclass(frozen=True, slots=True)
class AddFollower:
    term: int
    follower: Member
    epoch: int = 0
    call: int = 0


@dataclass(frozen=True, slots=True)
class RemoveFollower:
    term: int
    follower: str
    epoch: int = 0
    call: int = 0


@dataclass(frozen=True, slots=True)
class EnsembleChangeResponse:
    term: int
    follower: str
    call: int = 0


@dataclass(frozen=True, slots=True)
class DeleteShard:
    term: int
    epoch: int
    call: int


@dataclass(frozen=True, slots=True)
class PushAssignments:
    """The shard map (its content does not matter here: only its epoch)."""

    epoch: int
    call: int


@dataclass(frozen=True, slots=True)
class Done:
    """The empty answer of DeleteShard and PushAssignments."""

    call: int


@dataclass(frozen=True, slots=True)
class PodStatus:
    """Coordination.GetStatus of every replica on the pod (the controller's polls)."""

    call: int


@dataclass(frozen=True, slots=True)
class PodStatusResponse:
    call: int
    # The shard's replica, if the pod has one (as replica_report_of makes it).
    reports: tuple[ReplicaReport, ...]


@dataclass(frozen=True, slots=True)
class GetStatus:
    term: int
    request_id: int


@dataclass(frozen=True, slots=True)
class StatusResponse:
    """A leader's ShardStatus, the parts the controller needs before an ensemble
    change: its commit offset, and for each voting member (the leader too) the
    highest offset it acknowledged as durable in this term. The proto's
    FollowerStatus has `acked_offset` and `voting`; the leader's own durable
    offset is not in ShardStatus yet (`head` may be unsynced)."""

    term: int
    request_id: int
    commit_offset: int
    voters: tuple[tuple[str, int], ...]
    # (voting follower, the incarnation of its data the leader tracks)
    incarnations: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Refused:
    """A coordination call failed (INVALID_TERM and the like)."""

    term: int
    request: str
    reason: str
    call: int = 0
    # The gRPC code it maps to ("FAILED_PRECONDITION", "NOT_FOUND", ...), and for a
    # stale controller epoch the newest epoch the pod has seen.
    code: str = "FAILED_PRECONDITION"
    epoch_seen: int | None = None


# ---- leader -> follower -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Truncate:
    session: int
    term: int
    leader: Member
    leader_terms: tuple[TermStart, ...]
    leader_head: EntryId


@dataclass(frozen=True, slots=True)
class TruncateResponse:
    session: int
    head: EntryId
    commit_offset: int
    first_offset: int
    incarnation: int = 0


@dataclass(frozen=True, slots=True)
class Replicate:
    session: int
    term: int
    entries: tuple[LogEntry, ...]
    commit_offset: int
    # When the leader sent it (its clock): echoed back, it renews the lease.
    leader_time_ms: int
    # What the leader's apply step wrote for committed entries the follower
    # holds (applied_changes.py).
    applied_changes: tuple[rpb.AppliedChanges, ...] = ()


@dataclass(frozen=True, slots=True)
class ReplicateResponse:
    session: int
    durable_offset: int
    # What the follower applied: it trails durable_offset by any distance while
    # the follower is behind the commit offset (the leader's window must not
    # depend on it: LeaderCore's docstring).
    applied_offset: int
    # The term the follower acknowledges in (the stream's; see
    # RuntimeRules.end_streams_on_new_term).
    term: int
    # The latest Replicate.leader_time_ms received on the stream.
    leader_time_ms: int
    incarnation: int = 0


@dataclass(frozen=True, slots=True)
class StreamBroken:
    session: int
    reason: str


@dataclass(frozen=True, slots=True)
class SendSnapshot:
    """All chunks of one SendSnapshot stream at once (chunking is snapshot.py's
    business; here the install is atomic either way)."""

    session: int
    term: int
    leader: Member
    last_included: EntryId
    records: tuple[tuple[Column, bytes, bytes], ...]


@dataclass(frozen=True, slots=True)
class SnapshotResponse:
    session: int
    head: EntryId


# ---- client -> leader ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientWrite:
    request_id: int
    request: bytes  # a serialized pb.WriteRequest


@dataclass(frozen=True, slots=True)
class CreateSession:
    request_id: int
    client: str
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class KeepAlive:
    session_id: int
    client: str
    sent_step: int


@dataclass(frozen=True, slots=True)
class ClientRead:
    """A read of the shard's state; it began when the reader sent it."""

    read_id: int
    reader: str
    sent_step: int
    # The record it gets (an exact-key get: the leader's read cache answers it).
    key: str = "/k/0"


Body = (
    NewTerm
    | NewTermResponse
    | BecomeLeader
    | BecomeLeaderResponse
    | AddFollower
    | RemoveFollower
    | EnsembleChangeResponse
    | DeleteShard
    | PushAssignments
    | Done
    | PodStatus
    | PodStatusResponse
    | GetStatus
    | StatusResponse
    | Refused
    | Truncate
    | TruncateResponse
    | Replicate
    | ReplicateResponse
    | StreamBroken
    | SendSnapshot
    | SnapshotResponse
    | ClientWrite
    | ClientRead
    | CreateSession
    | KeepAlive
)

# gRPC unary coordination calls are at most once: the controller never retries one
# transparently, so these are never duplicated (a stale AddFollower delivered after
# its RemoveFollower would silently re-grow the leader's ensemble).
AT_MOST_ONCE = (NewTerm, BecomeLeader, AddFollower, RemoveFollower, DeleteShard)
