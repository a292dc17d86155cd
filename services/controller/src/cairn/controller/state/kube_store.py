"""The cluster state as a `CairnCluster` custom resource (cairn.dev/v1), and the
controller's leader lock as a coordination.k8s.io/v1 Lease.

The object's `spec` and `status` are the documents of `cairn.controller.model`;
the state's version is `metadata.resourceVersion` and its generation is
`metadata.generation`, which the API server bumps on spec changes only (the CRD
enables the status subresource, so status writes go to `/status` and leave the
generation alone). Every write names the resourceVersion it was based on: the API
server refuses a stale one with 409 Conflict, which is `StateConflict`. A write
that changes nothing is a no-op for the API server: it keeps the version.

Errors: 404 is `StateNotFound`, 409 `StateConflict`, connection failures, 429 and
5xx `StateUnavailable` (retry later); any other refusal (400, 401, 403, 422) is
`StateRejected`, because retrying the same request cannot help.

The `kubernetes` client is synchronous: every call runs in a thread
(`asyncio.to_thread`), with a request timeout so that a dead connection cannot
hold a caller forever. `changes()` lists and then watches the one object from a
thread of its own, and hands states to the event loop through a queue that keeps
only the newest.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeVar, cast

import urllib3.exceptions
from kubernetes.client import (
    ApiClient,
    CoordinationV1Api,
    CustomObjectsApi,
    V1Lease,
    V1LeaseSpec,
    V1ObjectMeta,
)
from kubernetes.client.exceptions import ApiException
from kubernetes.watch import Watch

from cairn.controller.model import (
    ClusterSpec,
    ClusterState,
    ClusterStatus,
    SpecError,
    parse_spec,
    parse_status,
    spec_document,
    status_document,
)
from cairn.controller.state.store import (
    CorruptState,
    StateConflict,
    StateNotFound,
    StateRejected,
    StateStoreError,
    StateUnavailable,
)

GROUP = "cairn.dev"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
PLURAL = "cairnclusters"
KIND = "CairnCluster"

# Reconnecting a watch: the first retry is quick, later ones back off to the cap.
WATCH_BACKOFF_INITIAL_S = 0.1
WATCH_BACKOFF_MAX_S = 5.0
# A watch that ends sooner than this without any event counts as a failure.
WATCH_MIN_LIFETIME_S = 1.0

log = logging.getLogger(__name__)
T = TypeVar("T")


# Errors of the transport under the client: refused or dropped connections,
# timeouts (urllib3 wraps most of them, some surface as OSError).
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (urllib3.exceptions.HTTPError, OSError)


def _status_message(error: ApiException) -> str:
    """The `message` of the Status body the API server answered with, if any."""
    try:
        body = json.loads(error.body or "")
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return str(error.reason)


def translate_error(error: Exception, what: str) -> StateStoreError:
    """The store error for a failed API call (`what` says which, for the message)."""
    if isinstance(error, ApiException):
        status = error.status or 0
        message = f"{what}: {status} {_status_message(error)}"
        if status == 404:
            return StateNotFound(message)
        if status == 409:
            return StateConflict(message)
        # Status 0: the client failed before any answer (e.g. a TLS handshake).
        if status in (0, 429) or status >= 500:
            return StateUnavailable(message)
        return StateRejected(message)
    if isinstance(error, TRANSPORT_ERRORS):
        return StateUnavailable(f"{what}: cannot reach the API server: {error!r}")
    raise TypeError(f"not an API error: {error!r}")


async def _call(what: str, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return await asyncio.to_thread(function, *args, **kwargs)
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as error:
        raise translate_error(error, what) from error


class KubernetesStateStore:
    """The `StateStore` on the `CairnCluster` object `namespace/name`.

    The caller owns `api_client` (and closes it after `close()`)."""

    def __init__(
        self,
        api_client: ApiClient,
        namespace: str,
        name: str,
        watch_timeout_s: int = 60,
        request_timeout_s: float = 10.0,
    ) -> None:
        self.namespace = namespace
        self.name = name
        # The API server ends each watch after this long; it is then resumed from
        # the last resourceVersion seen (a bounded request, like any other).
        self.watch_timeout_s = watch_timeout_s
        self.request_timeout_s = request_timeout_s
        self._api = CustomObjectsApi(api_client)
        self._closed = False
        self._feeds: set[_ChangeFeed] = set()

    # -- reading -----------------------------------------------------------------------

    def state_of(self, obj: Mapping[str, Any]) -> ClusterState:
        """The state a `CairnCluster` object holds (CorruptState if unparseable)."""
        try:
            metadata = obj["metadata"]
            return ClusterState(
                spec=parse_spec(obj["spec"]),
                status=parse_status(obj.get("status") or {}),
                version=str(metadata["resourceVersion"]),
                generation=int(metadata["generation"]),
            )
        except (KeyError, TypeError, ValueError, SpecError) as error:
            raise CorruptState(f"{KIND} {self.namespace}/{self.name}: {error!r}") from None

    async def _get(self) -> dict[str, Any]:
        obj = await _call(
            f"read {KIND} {self.namespace}/{self.name}",
            self._api.get_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            self.name,
            _request_timeout=self.request_timeout_s,
        )
        return cast(dict[str, Any], obj)

    async def read(self) -> ClusterState:
        return self.state_of(await self._get())

    # -- writing -----------------------------------------------------------------------

    def _metadata(self, version: str | None = None) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if version is not None:
            metadata["resourceVersion"] = version
        return metadata

    async def create(self, spec: ClusterSpec) -> ClusterState:
        # No status: the API server drops it on create (status subresource), and an
        # absent status reads as the empty ClusterStatus anyway.
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": self._metadata(),
            "spec": spec_document(spec),
        }
        try:
            created = await _call(
                f"create {KIND} {self.namespace}/{self.name}",
                self._api.create_namespaced_custom_object,
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                body,
                _request_timeout=self.request_timeout_s,
            )
        except StateConflict:
            # 409 AlreadyExists: it exists already, and the stored spec wins.
            return await self.read()
        return self.state_of(cast(dict[str, Any], created))

    async def write_status(self, status: ClusterStatus, version: str) -> ClusterState:
        # The status subresource takes the status and ignores everything else, so
        # the body needs nothing more than the precondition.
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": self._metadata(version),
            "status": status_document(status),
        }
        written = await _call(
            f"write the status of {KIND} {self.namespace}/{self.name}",
            self._api.replace_namespaced_custom_object_status,
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            self.name,
            body,
            _request_timeout=self.request_timeout_s,
        )
        return self.state_of(cast(dict[str, Any], written))

    async def write_spec(self, spec: ClusterSpec, version: str) -> ClusterState:
        # A replace sets the whole object but the status: read it first so that its
        # labels, annotations, finalizers and owners survive. A version that is not
        # the current one is refused here, or by the API server's precondition if
        # someone writes between the read and the replace.
        current = await self._get()
        metadata = current.get("metadata") or {}
        if metadata.get("resourceVersion") != version:
            raise StateConflict(
                f"{KIND} {self.namespace}/{self.name} is at version "
                f"{metadata.get('resourceVersion')}, not {version}"
            )
        body = {**current, "spec": spec_document(spec)}
        body.pop("status", None)  # ignored by the main resource; no need to send it
        written = await _call(
            f"write the spec of {KIND} {self.namespace}/{self.name}",
            self._api.replace_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            self.name,
            body,
            _request_timeout=self.request_timeout_s,
        )
        return self.state_of(cast(dict[str, Any], written))

    # -- watching ----------------------------------------------------------------------

    async def changes(self) -> AsyncIterator[ClusterState]:
        if self._closed:
            return
        # Size 1: a state not yet taken is replaced by a newer one (only the newest
        # matters); `None` marks the end of the feed.
        queue: asyncio.Queue[ClusterState | None] = asyncio.Queue(maxsize=1)
        feed = _ChangeFeed(self, asyncio.get_running_loop(), queue)
        self._feeds.add(feed)
        feed.start()
        try:
            while (state := await queue.get()) is not None:
                yield state
        finally:
            self._feeds.discard(feed)
            await feed.close()

    async def close(self) -> None:
        self._closed = True
        feeds = list(self._feeds)
        await asyncio.gather(*(feed.close() for feed in feeds))


class _ChangeFeed:
    """One `changes()` iteration: a thread that lists the object, then watches it from
    the list's resourceVersion, resuming each watch where the last one ended and
    listing again when the API server has forgotten that version (410 Gone)."""

    def __init__(
        self,
        store: KubernetesStateStore,
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue[ClusterState | None],
    ) -> None:
        self._store = store
        self._loop = loop
        self._queue = queue
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._watch: Watch | None = None
        self._last_version: str | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"watch-{store.namespace}-{store.name}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def _interrupt(self) -> None:
        self._stopped.set()
        with self._lock:
            watch = self._watch
        if watch is not None:
            # Shuts the watch's socket down, which ends a read blocked on it.
            watch.stop()  # type: ignore[no-untyped-call]  # kubernetes.watch is untyped

    async def close(self) -> None:
        self._interrupt()
        await asyncio.to_thread(self._join)

    def _join(self) -> None:
        # A stop that lands before the watch has its response is lost (the client
        # only keeps the response once the request returns): repeat it until the
        # thread ends. It ends by itself within a watch timeout regardless.
        store = self._store
        deadline = time.monotonic() + store.watch_timeout_s + store.request_timeout_s + 1.0
        while self._thread.is_alive() and time.monotonic() < deadline:
            self._interrupt()
            self._thread.join(0.05)

    # -- on the feed's thread ----------------------------------------------------------

    def _run(self) -> None:
        try:
            self._follow()
        finally:
            self._deliver(None)

    def _follow(self) -> None:
        store = self._store
        api = store._api
        selector = f"metadata.name={store.name}"
        version: str | None = None
        delay_s = WATCH_BACKOFF_INITIAL_S
        while not self._stopped.is_set():
            try:
                if version is None:
                    listing = cast(
                        dict[str, Any],
                        api.list_namespaced_custom_object(
                            GROUP,
                            VERSION,
                            store.namespace,
                            PLURAL,
                            field_selector=selector,
                            _request_timeout=store.request_timeout_s,
                        ),
                    )
                    for item in listing.get("items") or ():
                        self._offer(item)
                    version = str(listing["metadata"]["resourceVersion"])
                watch = Watch()  # type: ignore[no-untyped-call]
                with self._lock:
                    if self._stopped.is_set():
                        return
                    self._watch = watch
                started = time.monotonic()
                events = 0
                try:
                    for event in watch.stream(  # type: ignore[no-untyped-call]
                        api.list_namespaced_custom_object,
                        GROUP,
                        VERSION,
                        store.namespace,
                        PLURAL,
                        field_selector=selector,
                        resource_version=version,
                        timeout_seconds=store.watch_timeout_s,
                        # Reads wait at most the watch's own timeout and then some: a
                        # silently dead connection is noticed and replaced.
                        _request_timeout=(
                            store.request_timeout_s,
                            store.watch_timeout_s + store.request_timeout_s,
                        ),
                    ):
                        events += 1
                        obj = event["raw_object"]
                        version = str(obj["metadata"]["resourceVersion"])
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self._offer(obj)
                        if self._stopped.is_set():
                            return
                finally:
                    with self._lock:
                        self._watch = None
                if events or time.monotonic() - started >= WATCH_MIN_LIFETIME_S:
                    delay_s = WATCH_BACKOFF_INITIAL_S  # it ran its course: resume at once
                    continue
                # Ended at once with no news: backed off like a failure, so that a
                # server that ends every watch straight away is not hammered.
                problem: object = "the watch ended at once"
            except ApiException as error:
                if error.status == 410:
                    version = None  # the history moved past us: list again, at once
                    continue
                problem = translate_error(error, "watch")
            except TRANSPORT_ERRORS as error:
                problem = translate_error(error, "watch")
            except Exception as error:
                # An answer this code does not understand: `changes()` must not end
                # before close(), so it is retried like an outage (and logged in full).
                log.exception("watching %s %s/%s failed", KIND, store.namespace, store.name)
                problem = error
            if self._stopped.is_set():
                return
            log.warning(
                "watching %s %s/%s: %s; retrying in %.1f s",
                KIND,
                store.namespace,
                store.name,
                problem,
                delay_s,
            )
            self._stopped.wait(delay_s)
            delay_s = min(delay_s * 2, WATCH_BACKOFF_MAX_S)

    def _offer(self, obj: Mapping[str, Any]) -> None:
        try:
            state = self._store.state_of(obj)
        except CorruptState as error:
            # Keep following: the controller keeps acting on the last good state.
            log.error("ignoring an unreadable cluster state: %s", error)
            return
        # A list after a 410 repeats the state last seen when nothing changed since.
        if state.version != self._last_version:
            self._last_version = state.version
            self._deliver(state)

    def _deliver(self, state: ClusterState | None) -> None:
        with contextlib.suppress(RuntimeError):  # the event loop is closed: nobody reads
            self._loop.call_soon_threadsafe(self._put, state)

    def _put(self, state: ClusterState | None) -> None:
        if self._queue.full():
            self._queue.get_nowait()  # older than `state`, and not taken yet: drop it
        self._queue.put_nowait(state)


# -- the leader lock ---------------------------------------------------------------


def _micro_time_now() -> datetime.datetime:
    now = datetime.datetime.now(datetime.UTC)
    # The client writes datetimes with isoformat(), which leaves out a zero fraction,
    # and the API server parses MicroTime with exactly six fraction digits: never
    # send a whole second.
    return now if now.microsecond else now.replace(microsecond=1)


def _expired(spec: V1LeaseSpec, now: datetime.datetime) -> bool:
    if spec.renew_time is None or spec.lease_duration_seconds is None:
        return True
    renewed = spec.renew_time
    if renewed.tzinfo is None:
        renewed = renewed.replace(tzinfo=datetime.UTC)
    return renewed + datetime.timedelta(seconds=spec.lease_duration_seconds) < now


class KubernetesLeaderLock:
    """The `LeaderLock` on the Lease `namespace/lease_name`, held as `identity`
    (unique per contender: the controller's pod name).

    It is free when absent, unheld, held by `identity` already (a restart), or
    expired (renewTime + leaseDurationSeconds has passed: contenders' clocks are
    assumed to agree to well within a lease duration). Taking it is a create or a
    replace that names the resourceVersion read, so of two contenders one gets 409
    and keeps waiting. The holder renews it every `renew_interval_s` (every
    `retry_interval_s` after a failure); `lost` is set when someone else holds it,
    or when no renewal has succeeded for `lease_duration_s`, the moment others may
    take it. A renewal counts from when it was sent, never from when it returned.
    """

    def __init__(
        self,
        api_client: ApiClient,
        namespace: str,
        lease_name: str,
        identity: str,
        lease_duration_s: int = 15,
        renew_interval_s: float = 5,
        retry_interval_s: float = 1,
        request_timeout_s: float = 5.0,
    ) -> None:
        if not 0 < renew_interval_s < lease_duration_s:
            raise ValueError("the renew interval must be shorter than the lease duration")
        self.namespace = namespace
        self.lease_name = lease_name
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_interval_s = renew_interval_s
        self.retry_interval_s = retry_interval_s
        self.request_timeout_s = request_timeout_s
        self._api = CoordinationV1Api(api_client)
        self._lost = asyncio.Event()
        self._held = False
        # time.monotonic() when the last successful take or renewal was sent.
        self._renewed_at = 0.0
        self._keeper: asyncio.Task[None] | None = None

    @property
    def lost(self) -> asyncio.Event:
        return self._lost

    @property
    def _what(self) -> str:
        return f"Lease {self.namespace}/{self.lease_name}"

    # -- on threads: one blocking attempt each ------------------------------------------

    def _read(self) -> V1Lease | None:
        try:
            return self._api.read_namespaced_lease(
                self.lease_name, self.namespace, _request_timeout=self.request_timeout_s
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def _spec(self, previous: V1LeaseSpec | None, now: datetime.datetime) -> V1LeaseSpec:
        taken = previous is None or previous.holder_identity != self.identity
        transitions = 0 if previous is None else previous.lease_transitions or 0
        return V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=self.lease_duration_s,
            acquire_time=now if taken or previous is None else previous.acquire_time,
            renew_time=now,
            # Counts changes of holder (a first holder included), as client-go does.
            lease_transitions=transitions + 1 if taken and previous is not None else transitions,
        )

    def _try_take(self) -> bool:
        now = _micro_time_now()
        lease = self._read()
        try:
            if lease is None:
                self._api.create_namespaced_lease(
                    self.namespace,
                    V1Lease(
                        metadata=V1ObjectMeta(name=self.lease_name, namespace=self.namespace),
                        spec=self._spec(None, now),
                    ),
                    _request_timeout=self.request_timeout_s,
                )
                return True
            spec = lease.spec or V1LeaseSpec()
            holder = spec.holder_identity
            if holder and holder != self.identity and not _expired(spec, now):
                return False
            # The read's resourceVersion is the precondition: of two contenders that
            # read the same version, only one replace succeeds.
            lease.spec = self._spec(spec, now)
            self._api.replace_namespaced_lease(
                self.lease_name, self.namespace, lease, _request_timeout=self.request_timeout_s
            )
            return True
        except ApiException as error:
            if error.status == 409:
                return False  # another contender got there first
            raise

    def _renew(self) -> bool:
        """Renew the lease; False if it is no longer ours. Raises on failures."""
        lease = self._read()
        if lease is None or lease.spec is None or lease.spec.holder_identity != self.identity:
            return False
        lease.spec = self._spec(lease.spec, _micro_time_now())
        self._api.replace_namespaced_lease(
            self.lease_name, self.namespace, lease, _request_timeout=self.request_timeout_s
        )
        return True

    def _clear(self) -> None:
        lease = self._read()
        if lease is None or lease.spec is None or lease.spec.holder_identity != self.identity:
            return
        lease.spec.holder_identity = None
        self._api.replace_namespaced_lease(
            self.lease_name, self.namespace, lease, _request_timeout=self.request_timeout_s
        )

    # -- the LeaderLock protocol ---------------------------------------------------------

    async def acquire(self) -> None:
        if self._held and not self._lost.is_set():
            return
        while True:
            sent_at = time.monotonic()
            try:
                if await _call(f"take {self._what}", self._try_take):
                    break
            except StateUnavailable as error:
                log.warning("cannot take %s yet: %s", self._what, error)
            await asyncio.sleep(self.retry_interval_s)
        log.info("%s taken by %s", self._what, self.identity)
        self._held = True
        self._renewed_at = sent_at
        self._lost.clear()
        self._keeper = asyncio.create_task(self._keep(), name=f"keep {self._what}")

    async def _keep(self) -> None:
        interval_s = self.renew_interval_s
        while True:
            deadline = self._renewed_at + self.lease_duration_s
            await asyncio.sleep(max(0.0, min(interval_s, deadline - time.monotonic())))
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                self._lose(f"no renewal succeeded for {self.lease_duration_s} s")
                return
            sent_at = time.monotonic()
            try:
                # Past the deadline others may take the lease: stop waiting for an
                # answer then (a late renewal only delays them by one lease).
                # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a
                # cancellation (release()) that arrives as the renewal completes,
                # and this loop would then renew a lease given up.
                async with asyncio.timeout(remaining_s):
                    ours = await _call(f"renew {self._what}", self._renew)
            except (StateUnavailable, StateConflict, TimeoutError) as error:
                log.warning("renewing %s failed: %s", self._what, error)
                interval_s = self.retry_interval_s
                continue
            except StateStoreError as error:
                self._lose(f"renewing it was refused: {error}")
                return
            except Exception as error:
                # Unforeseen (a lease it cannot read, a bug): give up, said out loud.
                # A renewer that just ended would let the lease lapse to another
                # controller while this one, never told, went on acting.
                log.exception("renewing %s failed", self._what)
                self._lose(f"renewing it failed: {error!r}")
                return
            if not ours:
                self._lose("someone else holds it")
                return
            self._renewed_at = sent_at
            interval_s = self.renew_interval_s

    def _lose(self, why: str) -> None:
        log.error("%s lost by %s: %s", self._what, self.identity, why)
        self._held = False
        self._lost.set()

    async def release(self) -> None:
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        if not self._held:
            return
        self._held = False
        try:
            # Clearing the holder lets the next contender in at once, not after expiry.
            await _call(f"release {self._what}", self._clear)
        except StateStoreError as error:
            log.warning("could not release %s (it will expire): %s", self._what, error)
