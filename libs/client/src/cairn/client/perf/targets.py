"""The two ways `cairn perf` reaches a server.

gRPC (`host:port`): through AsyncClient, so only the public Oxia protocol is used
and any Oxia-compatible server will do; the client's batching is what is measured.
HTTP (`http://host:port`): through Cairn's REST gateway, one request per
operation over a bounded pool of keep-alive connections: `PUT` of the raw value to
`/v1/namespaces/{ns}/keys/{key}`, `GET` of the same path for it back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol
from urllib.parse import quote

import httpx

from cairn.client.client import AsyncClient
from cairn.client.errors import KeyNotFound
from cairn.client.options import ClientOptions
from cairn.client.perf.options import PerfOptions


class Target(Protocol):
    async def put(self, key: str, value: bytes) -> None: ...

    async def get(self, key: str) -> bool:
        """True if the key has a record."""
        ...

    async def close(self) -> None: ...


class HttpStatusError(Exception):
    """An HTTP answer other than success (or 404 on a get)."""

    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


def error_type(error: BaseException) -> str:
    """How an operation's failure is counted in the report."""
    if isinstance(error, HttpStatusError):
        return f"HTTP {error.status_code}"
    return type(error).__name__


def client_options(options: PerfOptions) -> ClientOptions:
    """The client's settings for a run. Batching off: the client sends every
    operation as a request of its own, pipelining up to the server's bound of
    requests per stream (256), so up to that many callers per shard never queue
    behind each other in the client."""
    if options.batching:
        defaults = ClientOptions()
        return ClientOptions(
            request_timeout_s=options.request_timeout_s,
            connect_timeout_s=options.request_timeout_s,
            batch_linger_ms=options.linger_ms,
            max_batch_ops=options.max_batch_ops,
            max_inflight_batches=options.max_inflight_batches or defaults.max_inflight_batches,
        )
    return ClientOptions(
        request_timeout_s=options.request_timeout_s,
        connect_timeout_s=options.request_timeout_s,
        batching=False,
    )


class GrpcTarget:
    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    @classmethod
    async def connect(cls, options: PerfOptions) -> GrpcTarget:
        addresses = [address.strip() for address in options.target.split(",") if address.strip()]
        client = await AsyncClient.connect(
            addresses, namespace=options.namespace, options=client_options(options)
        )
        return cls(client)

    async def put(self, key: str, value: bytes) -> None:
        await self.client.put(key, value)

    async def get(self, key: str) -> bool:
        try:
            await self.client.get(key)
        except KeyNotFound:
            return False
        return True

    async def close(self) -> None:
        await self.client.close()


class HttpTarget:
    """Operations over a bounded set of keep-alive connections, each its own
    one-connection httpx client, lent to one operation at a time. (One httpx client
    with a pool of N connections costs CPU per request that grows with N and with
    the requests queued on it, since the pool re-examines every connection on each
    request and answer; with one connection per client each of those is O(1), so
    the figures show the gateway's cost rather than the pool's.)"""

    def __init__(self, clients: Sequence[httpx.AsyncClient], namespace: str) -> None:
        if not clients:
            raise ValueError("an HTTP target needs at least one client")
        self._clients = list(clients)
        self._idle: asyncio.Queue[httpx.AsyncClient] = asyncio.Queue(len(self._clients))
        for client in self._clients:
            self._idle.put_nowait(client)
        self._prefix = f"/v1/namespaces/{quote(namespace, safe='')}/keys/"

    @classmethod
    def open(cls, options: PerfOptions) -> HttpTarget:
        connections = options.http_connections or options.concurrency
        one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        timeout = httpx.Timeout(options.request_timeout_s)
        clients = [
            httpx.AsyncClient(base_url=options.target, limits=one, timeout=timeout)
            for _ in range(connections)
        ]
        return cls(clients, options.namespace)

    def path(self, key: str) -> str:
        # Every byte of the key that is not unreserved is escaped, slashes included,
        # so that a key is always one path segment.
        return self._prefix + quote(key, safe="")

    async def _request(self, method: str, key: str, content: bytes | None = None) -> int:
        """The answer's status code (the connection goes back to the idle set
        whatever happens)."""
        client = await self._idle.get()
        try:
            response = await client.request(method, self.path(key), content=content)
        finally:
            self._idle.put_nowait(client)
        return response.status_code

    async def put(self, key: str, value: bytes) -> None:
        status = await self._request("PUT", key, value)
        if status >= 300:
            raise HttpStatusError(status)

    async def get(self, key: str) -> bool:
        status = await self._request("GET", key)
        if status == 404:
            return False
        if status >= 300:
            raise HttpStatusError(status)
        return True

    async def close(self) -> None:
        for client in self._clients:
            await client.aclose()


async def open_target(options: PerfOptions) -> Target:
    if options.is_http:
        return HttpTarget.open(options)
    return await GrpcTarget.connect(options)
