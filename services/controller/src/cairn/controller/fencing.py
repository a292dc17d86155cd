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
Safety rests on the epoch alone (only one epoch is current at a time, and the
store's compare-and-set orders every write against its taking), the lease only
keeps controllers from taking it from each other over and over.
"""

from __future__ import annotations

from dataclasses import replace

from cairn.controller.model import ClusterStatus


class ControllerFenced(Exception):
    """A newer controller has taken over: this one must stop acting."""


def take_epoch(status: ClusterStatus) -> ClusterStatus:
    """The status with the next controller epoch, which becomes the caller's."""
    return replace(status, controller_epoch=status.controller_epoch + 1)


def check_epoch(status: ClusterStatus, epoch: int) -> None:
    """Raise ControllerFenced unless `epoch` is the epoch `status` records."""
    if status.controller_epoch != epoch:
        raise ControllerFenced(
            f"the cluster state holds controller epoch {status.controller_epoch}, "
            f"not this controller's {epoch}: a newer controller has taken over"
        )
