"""A lean HTTP/1.1 client for `cairn perf`'s gateway target.

A load generator must cost well under the server it measures. A general client
(httpx: URL objects, header models, a connection pool, sniffio) spends more CPU
per request than the gateway itself, so the gateway target speaks HTTP/1.1
directly: one keep-alive connection per caller, each request written with a
single `write` of preformatted bytes, each answer read by finding the end of
its head and skipping its body by length. It understands what the gateway
sends (`content-length` bodies, chunked ones, and a close) and nothing else;
it reports the status code and keeps the body only when asked.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import cast
from urllib.parse import urlsplit

# An answer's head is refused past this (the gateway's are a few hundred bytes).
MAX_HEAD_BYTES = 64 * 1024


class HttpProtocolError(Exception):
    """An answer this client cannot read, or a connection lost mid-answer."""


class _Answer:
    """The answer being read: its status, then its body by length or chunks."""

    __slots__ = ("body", "chunked", "close", "keep", "remaining", "status")

    def __init__(self, status: int, length: int | None, chunked: bool, close: bool, keep: bool):
        self.status = status
        self.remaining = length  # body bytes still to come (None: chunked or until close)
        self.chunked = chunked
        self.close = close
        self.keep = keep
        self.body = bytearray()


def _parse_head(head: bytes, keep_body: bool) -> _Answer:
    lines = head.split(b"\r\n")
    status_line = lines[0]
    if not status_line.startswith(b"HTTP/1.") or len(status_line) < 12:
        raise HttpProtocolError(f"not an HTTP/1.x answer: {status_line[:40]!r}")
    status = int(status_line[9:12])
    length: int | None = None
    chunked = False
    close = status_line.startswith(b"HTTP/1.0")
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            close = b"close" in value.lower()
    if status in (204, 304) or 100 <= status < 200:
        length = 0
    if length is None and not chunked:
        close = True  # the body runs until the server closes
    return _Answer(status, length, chunked, close, keep_body)


class HttpConnection(asyncio.Protocol):
    """One keep-alive connection, one request at a time."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._answer: _Answer | None = None
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self._keep_body = False

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's is not a subclass of asyncio's).
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        answer = self._answer
        if answer is not None and answer.remaining is None and not answer.chunked:
            self._finish()  # a body that ran until the close
            return
        self._fail(HttpProtocolError(f"connection lost: {exc or 'closed by the server'}"))

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        try:
            self._read()
        except (HttpProtocolError, ValueError) as error:
            self._fail(HttpProtocolError(str(error)))
            if self._transport is not None:
                self._transport.close()

    # ---- requests

    @property
    def is_open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    async def exchange(
        self, request: bytes, timeout_s: float | None = None, keep_body: bool = False
    ) -> tuple[int, bytes]:
        """Send one whole request (head and body); its answer's status and body
        (empty unless `keep_body`). TimeoutError after `timeout_s` (the
        connection is then closed: its answer would come out of turn)."""
        assert self._waiter is None, "one request at a time"
        if self._transport is None:
            raise HttpProtocolError("the connection is closed")
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        self._waiter = waiter
        self._keep_body = keep_body
        self._transport.write(request)
        timer = loop.call_later(timeout_s, self._time_out) if timeout_s is not None else None
        try:
            return await waiter
        finally:
            if timer is not None:
                timer.cancel()

    def _time_out(self) -> None:
        self._fail(TimeoutError("no answer in time"))
        self.close()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # ---- reading an answer

    def _read(self) -> None:
        buffer = self._buffer
        while buffer:
            answer = self._answer
            if answer is None:
                if self._waiter is None:
                    raise HttpProtocolError("an answer to no request")
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(buffer) > MAX_HEAD_BYTES:
                        raise HttpProtocolError("an answer's head is too large")
                    return
                answer = self._answer = _parse_head(bytes(buffer[:end]), self._keep_body)
                del buffer[: end + 4]
                if answer.remaining == 0:
                    self._finish()
                continue
            if answer.chunked:
                if not self._read_chunk(answer):
                    return
                continue
            if answer.remaining is None:  # until close
                self._take(answer, len(buffer))
                return
            taken = min(answer.remaining, len(buffer))
            self._take(answer, taken)
            answer.remaining -= taken
            if answer.remaining == 0:
                self._finish()

    def _read_chunk(self, answer: _Answer) -> bool:
        """One chunk (or the last, with its trailers) if it is all here."""
        buffer = self._buffer
        line_end = buffer.find(b"\r\n")
        if line_end < 0:
            return False
        size = int(bytes(buffer[:line_end]).split(b";")[0], 16)
        if size == 0:
            # The last chunk: "0" CRLF, then trailer lines (usually none), then CRLF.
            if buffer[line_end + 2 : line_end + 4] == b"\r\n":
                end = line_end + 4
            else:
                trailers_end = buffer.find(b"\r\n\r\n", line_end + 2)
                if trailers_end < 0:
                    return False
                end = trailers_end + 4
            del buffer[:end]
            self._finish()
            return True
        if len(buffer) < line_end + 2 + size + 2:
            return False
        del buffer[: line_end + 2]
        self._take(answer, size)
        del buffer[:2]
        return True

    def _take(self, answer: _Answer, count: int) -> None:
        if answer.keep:
            answer.body += self._buffer[:count]
        del self._buffer[:count]

    def _finish(self) -> None:
        answer, waiter = self._answer, self._waiter
        self._answer = self._waiter = None
        assert answer is not None
        if answer.close and self._transport is not None:
            self._transport.close()
            self._transport = None
        if waiter is not None and not waiter.done():
            waiter.set_result((answer.status, bytes(answer.body)))

    def _fail(self, error: Exception) -> None:
        waiter = self._waiter
        self._answer = self._waiter = None
        self._buffer.clear()
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)


class HttpEndpoint:
    """Where a connection goes: `http://host:port` or `https://host:port`."""

    def __init__(self, url: str, ssl_context: ssl.SSLContext | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = (
            (ssl_context or ssl.create_default_context()) if parts.scheme == "https" else None
        )
        self.authority = parts.netloc.encode("ascii")

    async def connect(self) -> HttpConnection:
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(
            HttpConnection, self.host, self.port, ssl=self.ssl
        )
        return connection

    def request(self, method: bytes, path: bytes, body: bytes | None = None) -> bytes:
        """A whole request's bytes (`path` already escaped)."""
        head = b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method, path, self.authority)
        if body is None:
            return head + b"\r\n"
        return head + b"content-length: %d\r\n\r\n" % len(body) + body
