"""Which controller a storage pod takes coordination calls from. Pure.

Every controller takes a new epoch (its fencing token) when it takes the
leadership, and sends it with every call that changes a pod. A pod remembers the
highest epoch it has seen and refuses any call of an older one: a controller that
was paused or partitioned while a newer one took over can then no longer move a
pod the newer one has touched, whatever it believes about its lease.

Epoch 0 is what a caller that sends none says (the field is absent): the oldest
of all. A pod that has never seen an epoch takes such calls (test drivers and
benchmarks that play the controller), and refuses them once any controller with
an epoch has reached it.
"""

from __future__ import annotations

from cairn.common.errors import StaleControllerEpoch

# The epoch a call without one carries (proto3's absent int64).
NO_EPOCH = 0


def admit(highest: int, epoch: int) -> int:
    """The highest epoch seen once a call of `epoch` is taken (the caller makes
    it durable before acting on the call when it grew); raises
    StaleControllerEpoch, changing nothing, for an epoch older than `highest`."""
    if epoch < NO_EPOCH:
        raise StaleControllerEpoch(f"controller epoch {epoch} is not an epoch")
    if epoch < highest:
        raise StaleControllerEpoch(
            f"controller epoch {epoch} is older than {highest}, the newest this pod has "
            "seen: a newer controller has taken over",
            {"epoch": str(highest)},
        )
    return epoch
