"""Storage pod events from the Kubernetes API, a third failure signal beside
heartbeats and health watches: the kubelet and the API server often know first
(a pod deleted or evicted, a container that exited and waits to restart).

A pod counts as down when it is deleted or terminating, has failed or
finished, or its storage container is not running. Readiness is deliberately
ignored: a pod is unready during every election (its sidecar says so), and
treating that as a failure would cascade.

Node names are pod names (the StatefulSet's `<name>-<ordinal>`, which the
sidecar reports as its node name).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import kubernetes
import urllib3

log = logging.getLogger(__name__)
RETRY_MIN_S = 0.1
RETRY_MAX_S = 5.0
# A watch is renewed this often (also bounds how long stopping can take).
WATCH_TIMEOUT_S = 30


def pod_is_down(pod: Mapping[str, Any], container: str) -> bool:
    """Whether a pod object (as JSON) says its storage container cannot serve."""
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if metadata.get("deletionTimestamp"):
        return True
    if status.get("phase") in ("Failed", "Succeeded"):
        return True
    for container_status in status.get("containerStatuses") or ():
        if container_status.get("name") == container:
            state = container_status.get("state") or {}
            return "running" not in state
    return False


class PodWatcher:
    """Watches the storage pods and reports each one's down-ness when it changes.
    The watch runs in a thread (the client is synchronous); reports are handed
    to the event loop."""

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        namespace: str,
        label_selector: str,
        on_change: Callable[[str, bool], None],
        container: str = "storage",
    ) -> None:
        self.api = kubernetes.client.CoreV1Api(api_client)
        self.namespace = namespace
        self.label_selector = label_selector
        self.on_change = on_change
        self.container = container
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: kubernetes.watch.Watch | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        def report(name: str, down: bool) -> None:
            loop.call_soon_threadsafe(self.on_change, name, down)

        self._thread = threading.Thread(
            target=self._run, args=(report,), daemon=True, name="pod-watch"
        )
        self._thread.start()

    def _run(self, report: Callable[[str, bool], None]) -> None:
        delay_s = RETRY_MIN_S
        while not self._stop.is_set():
            try:
                listed = self.api.list_namespaced_pod(
                    self.namespace, label_selector=self.label_selector
                )
                # As JSON (camelCase), like the watch's raw objects.
                document = self.api.api_client.sanitize_for_serialization(listed)
                for pod in document.get("items", ()):
                    report(pod["metadata"]["name"], pod_is_down(pod, self.container))
                version = document["metadata"]["resourceVersion"]
                self._watch = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
                for event in self._watch.stream(  # type: ignore[no-untyped-call]
                    self.api.list_namespaced_pod,
                    self.namespace,
                    label_selector=self.label_selector,
                    resource_version=version,
                    timeout_seconds=WATCH_TIMEOUT_S,
                ):
                    if self._stop.is_set():
                        break
                    pod = event["raw_object"]
                    if event["type"] == "ERROR":
                        break  # e.g. 410 Gone: list again
                    name = pod["metadata"]["name"]
                    report(name, event["type"] == "DELETED" or pod_is_down(pod, self.container))
                delay_s = RETRY_MIN_S
            except (kubernetes.client.ApiException, urllib3.exceptions.HTTPError, OSError) as error:
                if self._stop.is_set():
                    break
                log.warning("pod watch failed (%s); retrying in %.1f s", error, delay_s)
                time.sleep(delay_s)
                delay_s = min(RETRY_MAX_S, delay_s * 2)

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()  # type: ignore[no-untyped-call]
        if self._thread is not None:
            # The thread notices within one event or one watch timeout; it is a
            # daemon, so a stop never waits for that.
            self._thread.join(timeout=1.0)
