"""The HTTP/1.1 protocol the gateway serves with: uvicorn's httptools protocol
(llhttp, in C, far cheaper per request than the pure-Python h11), with the
request head bounded and malformed requests answered as problem documents.

httptools has no bound of its own on the request line and headers (h11's
`max_incomplete_event_size` was the gateway's), so the protocol counts them: a
request whose target and header lines add up to more than `max_head_bytes` is
refused (400, invalid-argument) and the connection closed.
"""

from __future__ import annotations

import asyncio
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
