"""The storage StatefulSet's replica count, through its `scale` subresource (the
only part of the StatefulSet the controller reads or writes; the Role grants
`get` and `patch` on `statefulsets/scale` and nothing else of the StatefulSet).

Part of the controller's Kubernetes layer, with kube_pods.py and
state/kube_store.py: nothing else calls the Kubernetes API. What count to ask
for is decided elsewhere (cairn.controller.scaling); errors are the client's
(ApiException, urllib3 and OS errors) and the caller retries.

A patch names no resourceVersion on purpose: the count written is safe whatever
the current one is (the decision depends only on which pods hold shards), and
the controller owns the count, so someone else's concurrent write is meant to
be overwritten.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes.client import ApiClient, AppsV1Api

DEFAULT_STATEFULSET = "cairn-storage"


class StatefulSetScale:
    """The `PodCount` of the runtime on the StatefulSet `namespace/name`."""

    def __init__(
        self,
        api_client: ApiClient,
        namespace: str,
        name: str = DEFAULT_STATEFULSET,
        request_timeout_s: float = 10.0,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.request_timeout_s = request_timeout_s
        self._api = AppsV1Api(api_client)

    def __repr__(self) -> str:
        return f"StatefulSet {self.namespace}/{self.name}"

    async def replicas(self) -> int:
        scale: Any = await asyncio.to_thread(
            self._api.read_namespaced_stateful_set_scale,
            self.name,
            self.namespace,
            _request_timeout=self.request_timeout_s,
        )
        # An unset count means 1, as the StatefulSet controller defaults it.
        replicas = scale.spec.replicas if scale.spec is not None else None
        return 1 if replicas is None else int(replicas)

    async def scale(self, replicas: int) -> None:
        await asyncio.to_thread(
            self._api.patch_namespaced_stateful_set_scale,
            self.name,
            self.namespace,
            {"spec": {"replicas": replicas}},
            _request_timeout=self.request_timeout_s,
        )
