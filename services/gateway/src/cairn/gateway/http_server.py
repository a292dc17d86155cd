"""The HTTP/1.1 protocol the gateway serves with: uvicorn's httptools protocol
(llhttp, in C, far cheaper per request than the pure-Python h11), with the
request head bounded and malformed requests answered as problem documents.

httptools has no bound of its own on the request line and headers (h11's
`max_incomplete_event_size` was the gateway's), so the protocol counts them: a
request whose target and header lines add up to more than `max_head_bytes` is
refused (400, invalid-argument) and the connection closed.

uvicorn writes an answer's head and its body apart; the protocol's transport
sends what is written in one turn of the event loop in one write (one system
call, and with TLS one record, instead of two).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from http import HTTPStatus
from typing import Any

import orjson
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from cairn.gateway.problems import PROBLEM_MEDIA_TYPE, Code, Problem

HEAD_TOO_LARGE = "the request head (request line and headers) is over {limit} bytes"
MALFORMED = "malformed HTTP request"


def problem_answer(problem: Problem) -> bytes:
    """A whole HTTP/1.1 answer carrying `problem`, closing the connection."""
    body = orjson.dumps(problem.document())
    return b"".join(
        (
            f"HTTP/1.1 {problem.status} {HTTPStatus(problem.status).phrase}\r\n".encode("ascii"),
            f"content-type: {PROBLEM_MEDIA_TYPE}\r\n".encode("ascii"),
            f"content-length: {len(body)}\r\n".encode("ascii"),
            b"connection: close\r\n\r\n",
            body,
        )
    )


class CoalescingTransport(asyncio.Transport):
    """A transport sending the writes of one event loop turn together, at the
    end of the turn (or before closing)."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        for data in list_of_data:
            self.write(data)

    def flush(self) -> None:
        if not self._pending:
            return
        pending = self._pending
        self._pending = []
        if not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._pending = []
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending))

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()


class _HeadTooLarge(Exception):
    """Raised in a parser callback to stop parsing a request whose head is over
    the bound (httptools passes it on as an HttpParserError)."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the request head bounded."""

    max_head_bytes = 1024 * 1024

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        # The current request's head as parsed: its target and header lines.
        self._head_bytes = 0
        # Bytes received while the current request's head is incomplete: the
        # parser holds a header until it ends, so this bounds what it holds.
        self._unparsed_bytes = 0
        self._in_head = True
        self._head_over = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))

    def data_received(self, data: bytes) -> None:
        if self.parser is None:
            return  # refused: the connection is closing
        if self._in_head:
            self._unparsed_bytes += len(data)
            # Twice the bound: a head just over it is read whole and refused by
            # on_headers_complete, so the client gets the answer, not a reset.
            if self._unparsed_bytes > 2 * self.max_head_bytes:
                self._head_over = True
                self.send_400_response("")
                return
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self._head_bytes += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        self._head_bytes += len(name) + len(value) + 4  # ": " and CRLF

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._unparsed_bytes = 0
        if self._head_bytes > self.max_head_bytes:
            self._head_over = True
            raise _HeadTooLarge
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True

    def send_400_response(self, msg: str) -> None:
        detail = HEAD_TOO_LARGE.format(limit=self.max_head_bytes) if self._head_over else MALFORMED
        problem = Problem(Code.INVALID_ARGUMENT, detail)
        if self.transport.is_closing():
            return
        self.transport.write(problem_answer(problem))
        self.transport.close()
        self.parser = None  # type: ignore[assignment]


def bounded_protocol(
    max_head_bytes: int, tls_protocol: type[HttpToolsProtocol] | None = None
) -> type[BoundedHttpToolsProtocol]:
    """The protocol class (uvicorn's `http=` setting) bounding heads at this size.
    `tls_protocol`: the httptools protocol that TLS serving needs (it puts the
    peer's certificate in the scope, cairn.common.tls_asgi), combined with it."""
    bases: tuple[type[HttpToolsProtocol], ...] = (BoundedHttpToolsProtocol,)
    if tls_protocol is not None:
        bases = (BoundedHttpToolsProtocol, tls_protocol)
    return type("BoundedHttpToolsProtocol", bases, {"max_head_bytes": max_head_bytes})
