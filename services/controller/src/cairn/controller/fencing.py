"""Fencing a stale controller: the controller epoch. Pure.

A controller that holds the leader lock may still be superseded without knowing
it: paused (SIGSTOP, a long GC, a frozen VM) or partitioned past its lease, it
wakes up believing it leads. So leadership comes with an epoch, a fencing token:

- Taking the leadership, a controller writes `controller_epoch + 1` into the
  cluster status with a compare-and-set (`take_epoch`); that number is its own.
- Every later status write is computed from the status it replaces, inside the
  compare-and-set, and refused (`check_epoch`, `ControllerFenced`) once the
  stored epoch is not its own: a newer controller has taken over.
- Every call that changes a storage pod carries the epoch, and a pod refuses
  calls of an epoch older than the newest it has seen (STALE_CONTROLLER_EPOCH,
  which the pod client also reports as `ControllerFenced`).

A fenced controller stops acting at once; the lease decides who leads next.

One refusal by a pod is not proof of a newer controller: if the cluster state
was recreated or restored (a deleted and re-applied CairnCluster, a lost state
directory) while the pods kept their data, the state's epochs start again below
what the pods have seen, and every controller would be refused for good. So a
controller refused by a pod reads the state again: if it still holds this
controller's epoch, no newer controller took one from it, and the controller
takes an epoch past the pod's (`outrun_epoch`, again by compare-and-set)
instead of stopping.
Safety rests on the epoch alone (only one epoch is current at a time, and the
store's compare-and-set orders every write against its taking), the lease only
keeps controllers from taking it from each other over and over.
"""

from __future__ import annotations

from dataclasses import replace

from cairn.controller.model import ClusterStatus


class ControllerFenced(Exception):
    """A newer controller has taken over: this one must stop acting.
    `pod_epoch`: the epoch a refusing pod has seen, when a pod refused."""

    def __init__(self, message: str, pod_epoch: int | None = None) -> None:
        super().__init__(message)
        self.pod_epoch = pod_epoch


def take_epoch(status: ClusterStatus) -> ClusterStatus:
    """The status with the next controller epoch, which becomes the caller's."""
    return replace(status, controller_epoch=status.controller_epoch + 1)


def outrun_epoch(status: ClusterStatus, pod_epoch: int) -> ClusterStatus:
    """The status with an epoch past one a pod has seen (never lower than the
    epoch it holds)."""
    return replace(status, controller_epoch=max(status.controller_epoch, pod_epoch) + 1)


def check_epoch(status: ClusterStatus, epoch: int) -> None:
    """Raise ControllerFenced unless `epoch` is the epoch `status` records."""
    if status.controller_epoch != epoch:
        raise ControllerFenced(
            f"the cluster state holds controller epoch {status.controller_epoch}, "
            f"not this controller's {epoch}: a newer controller has taken over"
        )
