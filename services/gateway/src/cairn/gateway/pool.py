"""The gateway's storage clients: one per namespace it has served.

The first client connects (lazily, so the gateway starts even while no storage
pod is up) to the configured root namespace; every other namespace gets a
sibling of it (`for_namespace`), sharing its connections. At most
`max_namespaces` are kept: beyond that the least recently used one that no
request holds is closed. Requests hold a client through `lease`, so a change
feed stream keeps its namespace's client for as long as it runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace

from cairn.client.client import AsyncClient
from cairn.client.errors import ClientError, NamespaceNotFound
from cairn.common.hashing import KeyHash
from cairn.common.identity import Principal
from cairn.gateway.callers import current_caller, on_behalf_of_metadata
from cairn.gateway.problems import Code, Problem
from cairn.gateway.settings import GatewaySettings

log = logging.getLogger(__name__)
ALL_NAMESPACES = "*"


@dataclass
class _Entry:
    client: AsyncClient
    leases: int = 0


class ClientPool:
    def __init__(self, settings: GatewaySettings) -> None:
        self._settings = settings
        self._root: AsyncClient | None = None
        self._root_lock = asyncio.Lock()
        # (namespace, caller) -> client, least recently used first (the root is not
        # in it); the caller "" without auth.
        self._siblings: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._sibling_lock = asyncio.Lock()
        self._closed = False

    @property
    def connected(self) -> bool:
        return self._root is not None

    async def root(self) -> AsyncClient:
        """The root client, connecting it on first use."""
        if self._root is not None:
            return self._root
        async with self._root_lock:
            if self._closed:
                raise Problem(Code.UNAVAILABLE, "the gateway is shutting down")
            if self._root is None:
                settings = self._settings
                try:
                    root_hash = settings.key_hashes.get(settings.root_namespace)
                    self._root = await AsyncClient.connect(
                        list(settings.storage_addresses),
                        namespace=settings.root_namespace,
                        options=settings.client_options
                        if root_hash is None
                        else replace(settings.client_options, key_hash=root_hash),
                    )
                except NamespaceNotFound:
                    raise Problem(
                        Code.UNAVAILABLE,
                        f"the gateway's root namespace {settings.root_namespace!r} does not "
                        "exist (start it with --namespace NAME of an existing namespace)",
                    ) from None
                except ClientError as error:
                    raise Problem(
                        Code.UNAVAILABLE,
                        f"no storage pod answered at {', '.join(settings.storage_addresses)}: "
                        f"{error}",
                        {"Retry-After": str(settings.retry_after_s)},
                    ) from None
                log.info("connected to %s", ", ".join(settings.storage_addresses))
            return self._root

    @asynccontextmanager
    async def lease(self, namespace: str) -> AsyncIterator[AsyncClient]:
        """The namespace's client, held until the block ends. NamespaceNotFound
        (a 404) for a namespace the cluster does not have."""
        if namespace == ALL_NAMESPACES:
            # The storage's "every namespace" wildcard, not a namespace one can use.
            raise NamespaceNotFound(f"{namespace!r} is not a namespace")
        root = await self.root()
        caller = current_caller()
        if caller is None and namespace == root.namespace:
            yield root
            return
        entry = await self._sibling(root, namespace, caller)
        entry.leases += 1
        try:
            yield entry.client
        finally:
            entry.leases -= 1

    async def _sibling(self, root: AsyncClient, namespace: str, caller: Principal | None) -> _Entry:
        """The client of (namespace, caller): with auth, one per caller, whose calls
        name it to the pods (the pods hold it to the rules); they share the
        root's connections."""
        name = (namespace, str(caller) if caller is not None else "")
        entry = self._siblings.get(name)
        if entry is not None:
            self._siblings.move_to_end(name)
            return entry
        # One lock for every creation: creations are rare (once per namespace),
        # and two requests for a new namespace must not both connect it.
        async with self._sibling_lock:
            entry = self._siblings.get(name)
            if entry is None:
                if self._closed:
                    raise Problem(Code.UNAVAILABLE, "the gateway is shutting down")
                await self._make_room()
                metadata = on_behalf_of_metadata(caller) if caller is not None else ()
                entry = _Entry(
                    await root.for_namespace(
                        namespace, self._settings.key_hashes.get(namespace, KeyHash.XXH3), metadata
                    )
                )
                self._siblings[name] = entry
            self._siblings.move_to_end(name)
            return entry

    async def _make_room(self) -> None:
        # The root counts as one of the namespaces kept.
        while len(self._siblings) + 1 >= self._settings.max_namespaces:
            idle = next((ns for ns, e in self._siblings.items() if e.leases == 0), None)
            if idle is None:
                raise Problem(
                    Code.UNAVAILABLE,
                    f"requests are open on {len(self._siblings) + 1} namespaces, the most this "
                    "gateway serves at once; retry later",
                    {"Retry-After": str(self._settings.retry_after_s)},
                )
            entry = self._siblings.pop(idle)
            log.info("closing the client of namespace %r (least recently used)", idle)
            await entry.client.close()

    async def close(self) -> None:
        self._closed = True
        async with self._sibling_lock:
            siblings = list(self._siblings.values())
            self._siblings.clear()
        for entry in siblings:
            await entry.client.close()
        async with self._root_lock:
            if self._root is not None:
                await self._root.close()
                self._root = None
