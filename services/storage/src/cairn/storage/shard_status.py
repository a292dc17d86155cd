"""A shard replica as GetStatus reports it (the controller's observer reads it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cairn.proto import replication_pb2 as rpb
from cairn.storage.replication.wire import entry_id_message, node_message, spec_message

if TYPE_CHECKING:
    from cairn.storage.shard import ShardReplica


def shard_status(replica: ShardReplica) -> rpb.ShardStatus:
    core, counters = replica.core, replica.counters
    status = rpb.ShardStatus(
        shard=replica.shard_id,
        spec=spec_message(replica.spec),
        role=int(core.role),  # type: ignore[arg-type]
        term=core.term,
        head=entry_id_message(core.head),
        commit_offset=core.commit_offset,
        first_offset=core.log.first_offset,
        durable_offset=replica.durable_offset,
        applied_offset=replica.applied_offset,
        write_requests=counters.write_requests,
        write_operations=counters.write_operations,
        read_requests=counters.read_requests,
        read_gets=counters.read_gets,
        entries_applied_from_leader_changes=replica.entries_applied_from_leader_changes,
        incarnation=replica.incarnation,
    )
    commit_term = core.log.term_at(core.commit_offset)
    if commit_term is not None:
        status.commit_term = commit_term
    if core.leader is not None:
        status.leader.CopyFrom(node_message(core.leader))
    leader = replica.leader_role
    if leader is not None:
        status.followers.extend(leader.follower_status())
        status.term_start_offset = core.term_start_offset
    return status
