"""The controller's handle on the cluster state: the latest state read, and
status updates written with compare-and-set, retried on conflicts.

Conflicts are expected: an operator changing the spec (kubectl, the admin API)
moves the resource's version under the controller's feet. An update is a
function of the status it replaces: on a conflict the state is read again and
the function applied again to what was read, never a value computed from an
older read. So anything an update derives (a new term, an ensemble) is derived
inside the compare-and-set.

Fencing (see cairn.controller.fencing): `take_epoch` gives this keeper its
controller epoch when the controller takes the leadership; from then on every
update is refused with `ControllerFenced` (and `fenced` is set) once the status
it would replace holds another epoch. An update that changes nothing is checked
against a fresh read of the store rather than the state held: the caller is
about to act on it (call a pod, typically), so it must be the current state,
and this controller's.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from cairn.common.telemetry import LatencyCounter
from cairn.controller.fencing import ControllerFenced, check_epoch, outrun_epoch, take_epoch
from cairn.controller.model import ClusterSpec, ClusterState, ClusterStatus
from cairn.controller.state.store import StateConflict, StateStore, StateUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_CONFLICT_RETRIES = 20
UNAVAILABLE_RETRIES = 50
UNAVAILABLE_RETRY_S = 0.2


class StateKeeper:
    def __init__(self, store: StateStore, state: ClusterState) -> None:
        self.store = store
        self.state = state
        # This controller's epoch once taken (None: it may not write yet).
        self.epoch: int | None = None
        # Set once a newer controller is known to have taken over.
        self.fenced = asyncio.Event()
        self._lock = asyncio.Lock()
        # Metrics (metrics.py): durations of successful writes, and conflicts lost.
        self.write_latency = LatencyCounter()
        self.conflicts = 0

    async def take_epoch(self) -> int:
        """Take the next controller epoch (a compare-and-set on the status, like
        any update) and make it this keeper's. Called once, right after the
        leader lock is taken."""
        async with self._lock:
            assert self.epoch is None, "a keeper takes one epoch"
            state = await self._update_status(take_epoch, fencing=False)
            self.epoch = state.status.controller_epoch
            log.info("controller epoch %d taken", self.epoch)
            return self.epoch

    async def outrun(self, pod_epoch: int) -> bool:
        """A pod refused this controller, having seen `pod_epoch`. If the state
        still holds this controller's epoch (a fresh read decides), the pod's
        epoch did not come from it (the state was recreated): take one past it
        and return True. Otherwise this controller is fenced (False)."""
        async with self._lock:
            epoch = self.epoch
            try:
                self._check(await self._reload())
            except ControllerFenced:
                return False
            assert epoch is not None
            if pod_epoch < epoch:
                return True  # refused a call of an epoch this controller has left behind
            try:
                state = await self._update_status(
                    lambda status: outrun_epoch(status, pod_epoch), fencing=True
                )
            except ControllerFenced:
                return False  # a newer controller took an epoch meanwhile
            self.epoch = state.status.controller_epoch
            log.warning(
                "a storage pod has seen controller epoch %d, which the cluster state never "
                "held (was it recreated?): took epoch %d",
                pod_epoch,
                self.epoch,
            )
            return True

    async def reload(self) -> ClusterState:
        async with self._lock:
            return await self._reload()

    async def _reload(self) -> ClusterState:
        self.state = await self._with_retries(self.store.read)
        epoch = self.state.status.controller_epoch
        if self.epoch is not None and epoch != self.epoch:
            self.fence(f"the cluster state holds controller epoch {epoch}, not {self.epoch}")
        return self.state

    def fence(self, why: str) -> None:
        """Note that a newer controller has taken over (the runtime stops)."""
        if not self.fenced.is_set():
            log.error("controller fenced: %s", why)
            self.fenced.set()

    def _check(self, state: ClusterState) -> None:
        if self.epoch is None:
            raise ControllerFenced("this controller has taken no epoch")
        try:
            check_epoch(state.status, self.epoch)
        except ControllerFenced as error:
            self.fence(str(error))
            raise

    async def update_status(self, change: Callable[[ClusterStatus], ClusterStatus]) -> ClusterState:
        """Apply `change` to the current status (raising from it aborts the
        update) and return the state written, or the current state if `change`
        leaves it as it is; ControllerFenced if this controller is superseded."""
        async with self._lock:
            return await self._update_status(change, fencing=True)

    async def _update_status(
        self, change: Callable[[ClusterStatus], ClusterStatus], *, fencing: bool
    ) -> ClusterState:
        fresh = False  # whether self.state was read from the store by this update
        for _ in range(MAX_CONFLICT_RETRIES):
            state = self.state
            if fencing:
                self._check(state)
            status = change(state.status)
            if status == state.status:
                if fresh:
                    return state
                await self._reload()
                fresh = True
                continue
            started_ns = time.perf_counter_ns()
            try:
                self.state = await self._with_retries(
                    functools.partial(self.store.write_status, status, state.version)
                )
                self.write_latency.record_since(started_ns)
                return self.state
            except StateConflict:
                self.conflicts += 1
                await self._reload()
                fresh = True
        raise StateConflict(f"status update lost {MAX_CONFLICT_RETRIES} races in a row")

    async def update_spec(self, change: Callable[[ClusterSpec], ClusterSpec]) -> ClusterState:
        async with self._lock:
            for _ in range(MAX_CONFLICT_RETRIES):
                state = self.state
                self._check(state)
                spec = change(state.spec)
                if spec == state.spec:
                    return state
                started_ns = time.perf_counter_ns()
                try:
                    self.state = await self._with_retries(
                        functools.partial(self.store.write_spec, spec, state.version)
                    )
                    self.write_latency.record_since(started_ns)
                    return self.state
                except StateConflict:
                    self.conflicts += 1
                    await self._reload()
            raise StateConflict(f"spec update lost {MAX_CONFLICT_RETRIES} races in a row")

    async def _with_retries(self, call: Callable[[], Awaitable[T]]) -> T:
        """The store briefly unreachable (an API server restarting) is waited out,
        for a bounded time; conflicts go back to the caller."""
        for attempt in range(UNAVAILABLE_RETRIES):
            try:
                return await call()
            except StateUnavailable as error:
                if attempt == UNAVAILABLE_RETRIES - 1:
                    raise
                log.warning("cluster state unavailable (%s); retrying", error)
                await asyncio.sleep(UNAVAILABLE_RETRY_S)
        raise AssertionError("unreachable")
