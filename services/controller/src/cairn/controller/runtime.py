"""The reconcile loop: observe, plan, execute, repeat. The only place the
controller's pieces are wired together and its `await`s meet.

Only the holder of the leader lock acts; a controller that loses it stops at
once (another one is taking over and will plan from the recorded status). The
lock alone cannot stop a controller that does not know it lost it (paused past
its lease): taking the lock, a controller takes a new controller epoch in the
cluster state, and stops as soon as the state or a pod shows a newer one
(cairn.controller.fencing).
Failed actions back off per shard, so one stuck shard never stalls the others
or spins the loop.

On Kubernetes the leader also keeps the storage StatefulSet's replica count in
step with the spec (`PodCount`, implemented by cairn.controller.kube_scale; the
count to ask for is cairn.controller.scaling's pure decision).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from cairn.common.tls import TlsSource
from cairn.controller.actions import Action, shard_of
from cairn.controller.executor import Executor
from cairn.controller.fencing import ControllerFenced
from cairn.controller.keeper import StateKeeper
from cairn.controller.model import ClusterSpec
from cairn.controller.observer import DetectionSettings, Observer, monotonic_ms
from cairn.controller.planner import PlannerSettings, plan
from cairn.controller.pods import Channels, PodClient
from cairn.controller.scaling import statefulset_replicas
from cairn.controller.state.store import LeaderLock, StateStore

log = logging.getLogger(__name__)
BACKOFF_MIN_MS = 100
BACKOFF_MAX_MS = 5_000


@dataclass(frozen=True)
class RuntimeSettings:
    detection: DetectionSettings = field(default_factory=DetectionSettings)
    planner: PlannerSettings = field(default_factory=PlannerSettings)
    # After taking over, wait this long for the recorded nodes to report before
    # judging any of them dead (a new controller has seen no heartbeats yet).
    startup_grace_ms: int = 3_000
    # The shard map is pushed to every pod this often, healing any lost push.
    push_interval_ms: int = 5_000
    # Re-plan at least this often even if nothing signalled a change.
    tick_ms: int = 500
    max_parallel_actions: int = 16
    rpc_timeout_s: float = 5.0
    # The controller's certificate directory (cert-manager layout): its calls to
    # the pods' internal ports are mutual TLS. None: plaintext.
    tls_dir: Path | None = None
    # The pod count (PodCount) is read, and corrected if need be, this often.
    pod_count_interval_ms: int = 2_000


class PodCount(Protocol):
    """The number of storage pods the platform runs (a StatefulSet's replicas).
    Errors are the implementation's own; the runtime logs them and retries."""

    async def replicas(self) -> int: ...

    async def scale(self, replicas: int) -> None: ...


class Controller:
    def __init__(
        self,
        store: StateStore,
        lock: LeaderLock,
        initial_spec: ClusterSpec,
        settings: RuntimeSettings | None = None,
        clock_ms: Callable[[], int] = monotonic_ms,
        pod_count: PodCount | None = None,
        channels: Channels | None = None,
    ) -> None:
        """`pod_count`: the storage pods to keep in step with the spec (None: the
        platform starts them, e.g. the local launcher or docker compose).
        `channels`: to the pods, instead of gRPC's (the simulation's network)."""
        self.store = store
        self.pod_count = pod_count
        self.lock = lock
        self.initial_spec = initial_spec
        self.settings = settings or RuntimeSettings()
        self.clock_ms = clock_ms
        tls = TlsSource.from_directory(self.settings.tls_dir) if self.settings.tls_dir else None
        self.pods = PodClient(self.settings.rpc_timeout_s, tls, channels)
        self.observer = Observer(self.pods, self.settings.detection, clock_ms)
        self.wake = asyncio.Event()
        # Set on every spec change: the pod count is checked at once then.
        self._spec_changed = asyncio.Event()
        self.leading = asyncio.Event()
        self.keeper: StateKeeper | None = None
        self.executor: Executor | None = None
        self._backoff: dict[object, tuple[int, int]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._inflight: dict[object, asyncio.Task[None]] = {}

    # -- lifecycle -----------------------------------------------------------------------

    async def run(self) -> None:
        """Wait for the lock, then reconcile until cancelled, the lock is lost or
        a newer controller is seen (fenced)."""
        log.info("waiting for the controller lock")
        await self.lock.acquire()
        state = await self.store.create(self.initial_spec)
        self.keeper = StateKeeper(self.store, state)
        epoch = await self.keeper.take_epoch()
        log.info("controller lock held, epoch %d; reconciling", epoch)
        self.executor = Executor(self.keeper, self.pods, self.observer)
        self.leading.set()
        self._tasks = [
            asyncio.create_task(self._follow_store()),
            asyncio.create_task(self._push_to_joiners()),
            asyncio.create_task(self._push_periodically()),
        ]
        if self.pod_count is not None:
            self._tasks.append(asyncio.create_task(self._keep_pod_count(self.pod_count)))
        loop = asyncio.create_task(self._reconcile())
        lost = asyncio.create_task(self.lock.lost.wait())
        fenced = asyncio.create_task(self.keeper.fenced.wait())
        try:
            done, _ = await asyncio.wait({loop, lost, fenced}, return_when=asyncio.FIRST_COMPLETED)
            if lost in done:
                log.error("controller lock lost: stopping")
            if fenced in done:
                log.error("a newer controller has taken over: stopping")
            if loop in done:
                loop.result()
        finally:
            tasks = [loop, lost, fenced, *self._tasks, *self._inflight.values()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.leading.clear()

    async def close(self) -> None:
        if self.executor is not None:
            await self.executor.close()
        await self.observer.close()
        await self.pods.close()
        await self.lock.release()
        await self.store.close()

    # -- the loop --------------------------------------------------------------------------

    async def _reconcile(self) -> None:
        keeper = self.keeper
        assert keeper is not None
        grace_end_ms = self.clock_ms() + self.settings.startup_grace_ms
        while True:
            self.wake.clear()
            self.observer.changed.clear()
            recorded = [node.name for node in keeper.state.status.nodes]
            if self.clock_ms() < grace_end_ms and not self.observer.known(recorded):
                await self._sleep(100)
                continue
            state = keeper.state
            self.observer.leader_reports.retain(record.shard for record in state.status.shards)
            actions = plan(
                state.spec,
                state.status,
                state.generation,
                self.observer.view(),
                self.settings.planner,
            )
            due = [
                action
                for action in actions
                if self._due(action) and self._key(action) not in self._inflight
            ]
            await self._execute(due)
            await self._sleep(self.settings.tick_ms)

    async def _sleep(self, timeout_ms: int) -> None:
        wake = asyncio.create_task(self.wake.wait())
        changed = asyncio.create_task(self.observer.changed.wait())
        try:
            await asyncio.wait(
                {wake, changed}, timeout=timeout_ms / 1000, return_when="FIRST_COMPLETED"
            )
        finally:
            wake.cancel()
            changed.cancel()

    def _key(self, action: Action) -> object:
        shard = shard_of(action)
        return ("shard", shard) if shard is not None else type(action).__name__

    def _due(self, action: Action) -> bool:
        backoff = self._backoff.get(self._key(action))
        return backoff is None or self.clock_ms() >= backoff[0]

    async def _execute(self, actions: list[Action]) -> None:
        """Start each action as its own task (one at a time per shard, as many
        shards at once as allowed) and return without waiting: a hung pod may hold
        an action up for seconds, and other shards must not wait for it."""
        for action in actions:
            key = self._key(action)
            if key in self._inflight:
                continue
            if len(self._inflight) >= self.settings.max_parallel_actions:
                break
            task = asyncio.create_task(self._attempt(action))
            self._inflight[key] = task
            task.add_done_callback(functools.partial(self._finished, key))

    def _finished(self, key: object, _: asyncio.Task[None]) -> None:
        self._inflight.pop(key, None)
        self.wake.set()

    async def _attempt(self, action: Action) -> None:
        executor = self.executor
        assert executor is not None
        key = self._key(action)
        try:
            await executor.run(action)
        except asyncio.CancelledError:
            raise
        except ControllerFenced:
            return  # the keeper is fenced: run() stops
        except Exception as error:  # any failure: retry later, never stop the loop
            previous = self._backoff.get(key, (0, BACKOFF_MIN_MS // 2))[1]
            delay_ms = min(BACKOFF_MAX_MS, previous * 2)
            self._backoff[key] = (self.clock_ms() + delay_ms, delay_ms)
            log.warning("%s failed (retry in %d ms): %s", action, delay_ms, error)
        else:
            self._backoff.pop(key, None)

    # -- side tasks ------------------------------------------------------------------------

    async def _follow_store(self) -> None:
        """Spec changes by others (kubectl, a second admin API) wake the loop. A
        feed that fails or ends is followed again after a growing pause: ending
        here would leave the controller on an old spec for good."""
        keeper = self.keeper
        assert keeper is not None
        delay_ms = BACKOFF_MIN_MS
        while True:
            try:
                async for state in self.store.changes():
                    delay_ms = BACKOFF_MIN_MS
                    if state.status.controller_epoch != keeper.epoch:
                        # Another controller's epoch: read again (a fresh read decides,
                        # not a feed that may lag) and stop if fenced.
                        await keeper.reload()
                    if state.generation != keeper.state.generation:
                        await keeper.reload()
                        log.info("spec changed (generation %d)", keeper.state.generation)
                        self.wake.set()
                        self._spec_changed.set()
                log.warning("the feed of cluster state changes ended; following again")
            except Exception:
                log.exception("following cluster state changes failed (retry in %d ms)", delay_ms)
            await asyncio.sleep(delay_ms / 1000)
            delay_ms = min(BACKOFF_MAX_MS, delay_ms * 2)

    async def _push_to_joiners(self) -> None:
        executor = self.executor
        assert executor is not None
        while True:
            name = await self.observer.joined.get()
            executor.push_assignments([name])

    async def _push_periodically(self) -> None:
        executor = self.executor
        assert executor is not None
        while True:
            await asyncio.sleep(self.settings.push_interval_ms / 1000)
            executor.push_assignments()

    async def _keep_pod_count(self, pod_count: PodCount) -> None:
        """The pod count follows `spec.storage.replicas`: up at once, down only
        past pods that hold no shard (see cairn.controller.scaling). It is read
        every time, not remembered: someone may have scaled it by hand."""
        keeper = self.keeper
        assert keeper is not None
        delay_ms = BACKOFF_MIN_MS
        while True:
            # Cleared before reading the spec: a change from now on wakes the wait below.
            self._spec_changed.clear()
            pause_ms = self.settings.pod_count_interval_ms
            try:
                current = await pod_count.replicas()
                state = keeper.state
                wanted = statefulset_replicas(state.spec, state.status, current)
                if wanted != current:
                    log.info(
                        "scaling %s from %d to %d pods (the spec wants %d)",
                        pod_count,
                        current,
                        wanted,
                        state.spec.storage_pods,
                    )
                    await pod_count.scale(wanted)
                delay_ms = BACKOFF_MIN_MS
            except Exception as error:  # retried: the count must not stay wrong for good
                log.warning("keeping the pod count failed (retry in %d ms): %s", delay_ms, error)
                pause_ms = delay_ms
                delay_ms = min(BACKOFF_MAX_MS, delay_ms * 2)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause_ms / 1000):
                    await self._spec_changed.wait()
