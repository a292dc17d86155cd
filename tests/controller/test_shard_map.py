"""The shard map the controller pushes to pods (what they hand to clients)."""

from __future__ import annotations

from cairn.common.hashing import split_hash_space
from cairn.controller.executor import assignments_of
from cairn.controller.model import (
    ClusterSpec,
    ClusterState,
    ClusterStatus,
    NamespaceSpec,
    NodeRecord,
    ShardRecord,
    ShardState,
)
from cairn.proto import oxia_client_pb2 as pb


def test_every_namespace_of_the_spec_is_in_the_map_even_before_its_shards_are_placed() -> None:
    """A pod must tell "still being placed" (a client waits) from "no such
    namespace" (a client gives up): so a namespace with no shards yet is in the
    map, with none; a shard without a leader yet has an empty address."""
    spec = ClusterSpec(
        (NamespaceSpec("default", 2, 1), NamespaceSpec("later", 1, 1)), storage_pods=1
    )
    ranges = split_hash_space(2)
    status = ClusterStatus(
        shards=(
            ShardRecord("default", 0, ranges[0], 1, ShardState.STEADY, "pod-0", ("pod-0",)),
            ShardRecord("default", 1, ranges[1], 0, ShardState.NEW, None, ("pod-0",)),
        ),
        nodes=(NodeRecord("pod-0", "10.0.0.1:6648", "10.0.0.1:6649"),),
    )
    message = assignments_of(ClusterState(spec, status, "1"), {})
    assert sorted(message.namespaces) == ["default", "later"]
    default = message.namespaces["default"]
    assert default.shard_key_router == pb.XXHASH3
    assert [(a.shard, a.leader) for a in default.assignments] == [(0, "10.0.0.1:6648"), (1, "")]
    later = message.namespaces["later"]
    assert later.shard_key_router == pb.XXHASH3
    assert list(later.assignments) == []
