"""The two ways `cairn perf` reaches a server.

gRPC (`host:port`): through AsyncClient, so only the public Oxia protocol is used
and any Oxia-compatible server will do; the client's batching is what is measured.
HTTP (`http://host:port`): through Cairn's REST gateway, one request per
operation over a bounded pool of keep-alive connections (a lean HTTP/1.1 client,
perf/http.py, so that the client costs well under the gateway): `PUT` of the raw
value to `/v1/namespaces/{ns}/keys/{key}`, `GET` of the same path for it back.
"""

from __future__ import annotations

import asyncio
from typing import Protocol
from urllib.parse import quote

from cairn.bench.perf.http import HttpConnection, HttpEndpoint
from cairn.bench.perf.options import PerfOptions
from cairn.client.client import AsyncClient
from cairn.client.errors import KeyNotFound
from cairn.client.options import ClientOptions


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
    """Operations over a bounded set of keep-alive connections (perf/http.py's
    lean client), each lent to one operation at a time; a connection the server
    closed is opened again for the next operation that takes it."""

    def __init__(self, endpoint: HttpEndpoint, connections: int, namespace: str) -> None:
        if connections < 1:
            raise ValueError("an HTTP target needs at least one connection")
        self._endpoint = endpoint
        self._idle: asyncio.Queue[HttpConnection | None] = asyncio.Queue(connections)
        for _ in range(connections):
            self._idle.put_nowait(None)  # opened on first use
        self._open: set[HttpConnection] = set()
        self._prefix = f"/v1/namespaces/{quote(namespace, safe='')}/keys/".encode("ascii")
        self._timeout_s: float | None = None

    @classmethod
    def open(cls, options: PerfOptions) -> HttpTarget:
        target = cls(
            HttpEndpoint(options.target),
            options.http_connections or options.concurrency,
            options.namespace,
        )
        target._timeout_s = options.request_timeout_s
        return target

    def path(self, key: str) -> bytes:
        # Every byte of the key that is not unreserved is escaped, slashes included,
        # so that a key is always one path segment.
        return self._prefix + quote(key, safe="").encode("ascii")

    async def _request(self, method: bytes, key: str, content: bytes | None = None) -> int:
        """The answer's status code (the connection goes back to the idle set
        whatever happens; one that failed is dropped and opened again later)."""
        connection = await self._idle.get()
        try:
            if connection is None or not connection.is_open:
                connection = await self._endpoint.connect()
                self._open.add(connection)
            request = self._endpoint.request(method, self.path(key), content)
            status, _ = await connection.exchange(request, self._timeout_s)
        except BaseException:
            if connection is not None:
                connection.close()
                self._open.discard(connection)
            self._idle.put_nowait(None)
            raise
        self._idle.put_nowait(connection)
        return status

    async def put(self, key: str, value: bytes) -> None:
        status = await self._request(b"PUT", key, value)
        if status >= 300:
            raise HttpStatusError(status)

    async def get(self, key: str) -> bool:
        status = await self._request(b"GET", key)
        if status == 404:
            return False
        if status >= 300:
            raise HttpStatusError(status)
        return True

    async def close(self) -> None:
        for connection in self._open:
            connection.close()
        self._open.clear()


async def open_target(options: PerfOptions) -> Target:
    if options.is_http:
        return HttpTarget.open(options)
    return await GrpcTarget.connect(options)
