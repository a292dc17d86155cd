"""How many storage pods the StatefulSet should run, given the spec and the
recorded status. Pure: the Kubernetes layer (kube_scale.py) reads and writes the
count, the runtime asks this module what to write.

A StatefulSet grows by adding the next ordinals and shrinks by removing the
highest ones first, and a removed pod takes its volume claim with it (the base
manifests delete claims on scale-in). So the count follows
`spec.storage.replicas` up at once, and down only past pods that hold no replica
of any shard: a pod beyond the new count keeps the StatefulSet at its size until
the planner has moved every shard off it (it plans that for every node beyond
the count, as for a drained one). The local launcher does the same with
processes (cairn.controller.local.launcher).
"""

from __future__ import annotations

from cairn.controller.model import ClusterSpec, ClusterStatus, SpecError, node_ordinal


def holding_ordinals(status: ClusterStatus) -> set[int]:
    """The ordinals of the nodes that hold, or may still hold, a replica the
    cluster counts on: every voter of every shard (members, and members still
    leaving, whose votes an election may need)."""
    ordinals: set[int] = set()
    for record in status.shards:
        for name in record.voters:
            try:
                ordinals.add(node_ordinal(name))
            except SpecError:
                # Not a StatefulSet pod's name: it cannot be one the count removes.
                continue
    return ordinals


def statefulset_replicas(spec: ClusterSpec, status: ClusterStatus, current: int) -> int:
    """The replica count to give a StatefulSet that runs `current` pods now.

    Growing: the spec's count. Shrinking: as far down toward the spec's count as
    the highest pod that still holds a replica allows (never below it, never
    above `current`: the count only moves toward the spec)."""
    wanted = spec.storage_pods
    if current <= wanted:
        return wanted
    highest_holding = max(holding_ordinals(status), default=-1)
    return min(current, max(wanted, highest_holding + 1))
