"""The hot routes, served without FastAPI's per-request machinery.

    GET | PUT | DELETE  /v1/namespaces/{ns}/keys/{key}
    GET                 /v1/namespaces/{ns}/keys      (a page of keys)
    GET                 /v1/namespaces/{ns}/records   (a page of records)

The routers (keys.py, scans.py) declare these routes: FastAPI documents them and
can serve every request to them. `Front`, the gateway's one ASGI wrapper, serves
the common requests itself at a fraction of the CPU: it reads the parameters
straight from the scope, checks them against the bounds the routers declare,
calls the client library, and writes the answer with orjson. A request it does
not take it hands to FastAPI untouched, before reading any of its body:

- a parameter outside its declared bounds (FastAPI's 400 problem names it);
- parameters left to the routers: `comparison` and `index` of a read, `session`
  and `index` of a write, `index` of a page;
- a body declared over the app's limit on a route that reads none (the app's
  limit answers it, 413);
- every request while tracing is on (FastAPI's telemetry makes the spans).

Either way the request is authenticated alike, its body held to the same limit,
its errors answered as the same problem documents, and it is timed in
`http.server.request.duration` (for every request, by `Front`).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl

import orjson
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cairn.client.records import EXPECTED_RECORD_DOES_NOT_EXIST
from cairn.common import tracing
from cairn.gateway import metrics
from cairn.gateway.app import bearer_credentials, check_bearer
from cairn.gateway.callers import identify_caller
from cairn.gateway.cursors import ScanKind
from cairn.gateway.headers import (
    ANY_PATTERN,
    JSON,
    OCTET_STREAM,
    ONE_TAG_OR_ANY_PATTERN,
    TAGS_OR_ANY_PATTERN,
    HeaderError,
    WriteCondition,
    etag,
    parse_entity_tags,
    prefers_json,
    write_precondition,
)
from cairn.gateway.keys import KEY_PATH, key_location, version_headers
from cairn.gateway.models import record_document, version_document
from cairn.gateway.pool import ClientPool
from cairn.gateway.problems import PROBLEM_MEDIA_TYPE, Code, Problem, problem_for_error
from cairn.gateway.scans import KEYS_PATH, RECORDS_PATH, query_of, read_keys, read_records
from cairn.gateway.settings import (
    MAX_KEY_CHARS,
    MAX_NAMESPACE_CHARS,
    MAX_TOKEN_CHARS,
    GatewaySettings,
)
from cairn.gateway.tokens import TOKEN_PATTERN

log = logging.getLogger(__name__)

_KEY_ROUTE = compile_path(KEY_PATH)[0]
_KEYS_ROUTE = compile_path(KEYS_PATH)[0]
_RECORDS_ROUTE = compile_path(RECORDS_PATH)[0]
_ONE_TAG_OR_ANY = re.compile(ONE_TAG_OR_ANY_PATTERN)
_TAGS_OR_ANY = re.compile(TAGS_OR_ANY_PATTERN)
_ANY = re.compile(ANY_PATTERN)
_TOKEN = re.compile(TOKEN_PATTERN)

# Query parameters a route's fast path leaves to the router.
_KEY_READ_DEFERRED = frozenset({"comparison", "index"})
_KEY_WRITE_DEFERRED = frozenset({"session", "index"})
_PAGE_DEFERRED = frozenset({"index"})

_JSON_TYPE = (b"content-type", JSON.encode("ascii"))
_OCTET_TYPE = (b"content-type", OCTET_STREAM.encode("ascii"))
_PROBLEM_TYPE = (b"content-type", PROBLEM_MEDIA_TYPE.encode("ascii"))

# (status, headers, body) of an answer; headers as ASGI wants them.
Headers = list[tuple[bytes, bytes]]
Call = Callable[[Receive, Send], Awaitable[None]]


class _Defer(Exception):
    """The request is the router's to serve (see the module's docstring)."""


class _ClientLeft(Exception):
    """The client went away before sending the whole body: nobody to answer."""


def _header_pairs(headers: Mapping[str, str]) -> Headers:
    return [
        (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()
    ]


async def _answer(send: Send, status: int, headers: Headers, body: bytes = b"") -> None:
    if status not in (204, 304):
        headers.append((b"content-length", str(len(body)).encode("ascii")))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _answer_problem(send: Send, problem: Problem) -> None:
    headers = _header_pairs(problem.headers)
    headers.append(_PROBLEM_TYPE)
    await _answer(send, problem.status, headers, orjson.dumps(problem.document()))


async def _answer_json(send: Send, status: int, document: Any, headers: Headers) -> None:
    headers.append(_JSON_TYPE)
    await _answer(send, status, headers, orjson.dumps(document))


class _Request:
    """What the fast path reads of a request: its path parameters, its query
    (the last of repeated parameters, as Starlette reads them) and headers (the
    first of repeated ones, likewise)."""

    __slots__ = ("headers", "params", "query", "scope")

    def __init__(self, scope: Scope, params: dict[str, str]) -> None:
        self.scope = scope
        self.params = params
        raw = scope.get("query_string", b"")
        self.query: dict[str, str] = (
            dict(parse_qsl(raw.decode("latin-1"), keep_blank_values=True)) if raw else {}
        )
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name, value)
        self.headers = headers

    def header(self, name: bytes) -> str | None:
        value = self.headers.get(name)
        return value.decode("latin-1") if value is not None else None

    def namespace(self) -> str:
        namespace = self.params["namespace"]
        if not 1 <= len(namespace) <= MAX_NAMESPACE_CHARS:
            raise _Defer
        return namespace

    def key(self) -> str:
        key = self.params["key"]
        if not 1 <= len(key) <= MAX_KEY_CHARS:
            raise _Defer
        return key

    def query_text(self, name: str, *, required: bool = False) -> str | None:
        value = self.query.get(name)
        if value is None:
            if required:
                raise _Defer
            return None
        if len(value) > MAX_KEY_CHARS:
            raise _Defer
        return value

    def matching_header(self, name: bytes, pattern: re.Pattern[str]) -> str | None:
        value = self.header(name)
        if value is not None and pattern.fullmatch(value) is None:
            raise _Defer
        return value

    def defers(self, names: frozenset[str]) -> None:
        if not names.isdisjoint(self.query):
            raise _Defer

    def declares_no_body_over(self, limit: int) -> None:
        """A route that reads no body: one declared over the app's limit is
        refused by the app's limit (a 413 problem), so the router answers it."""
        declared = self.headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            raise _Defer


class Front:
    """The gateway's ASGI app: times every HTTP request, serves the hot routes'
    common requests itself, and hands the rest to the FastAPI app."""

    def __init__(
        self,
        app: ASGIApp,
        settings: GatewaySettings,
        pool: ClientPool,
        counters: metrics.GatewayCounters = metrics.COUNTERS,
    ) -> None:
        self.app = app
        self.settings = settings
        self.pool = pool
        self.counters = counters
        self._token = settings.token.encode("utf-8") if settings.token is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started_ns = time.perf_counter_ns()
        status = 500  # if the app fails before it answers
        template: str | None = None

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            served = None if tracing.ENABLED else self._plan(scope)
            if served is None:
                await self.app(scope, receive, send_status)
            else:
                template, call = served
                await self._serve(scope, call, receive, send_status)
        finally:
            if template is None:
                template = getattr(scope.get("route"), "path", None) or metrics.UNMATCHED_ROUTE
            metrics.record_request(
                self.counters, str(scope.get("method", "")), template, status, started_ns
            )

    def _plan(self, scope: Scope) -> tuple[str, Call] | None:
        """The route template and the call serving the request; None: FastAPI's."""
        path: str = scope["path"]
        if not path.startswith("/v1/namespaces/"):
            return None
        method: str = scope["method"]
        try:
            if match := _KEY_ROUTE.match(path):
                request = _Request(scope, match.groupdict())
                if method != "PUT":
                    request.declares_no_body_over(self.settings.max_json_body_bytes)
                if method == "GET":
                    return KEY_PATH, self._get_key(request)
                if method == "PUT":
                    return KEY_PATH, self._put_key(request)
                if method == "DELETE":
                    return KEY_PATH, self._delete_key(request)
            elif method == "GET" and (match := _KEYS_ROUTE.match(path)):
                request = _Request(scope, match.groupdict())
                request.declares_no_body_over(self.settings.max_json_body_bytes)
                return KEYS_PATH, self._page(request, records=False)
            elif method == "GET" and (match := _RECORDS_ROUTE.match(path)):
                request = _Request(scope, match.groupdict())
                request.declares_no_body_over(self.settings.max_json_body_bytes)
                return RECORDS_PATH, self._page(request, records=True)
        except (_Defer, HeaderError):
            return None
        return None

    async def _serve(self, scope: Scope, call: Call, receive: Receive, send: Send) -> None:
        """Authenticate, then serve; every error answered as its problem document."""
        try:
            self._authenticate(scope)
            await call(receive, send)
        except _ClientLeft:
            return
        except Exception as error:
            problem = problem_for_error(error, self.settings.retry_after_s)
            if problem is None:
                # A bug: logged with its traceback, answered as a problem all the same.
                log.error("%s %s failed", scope["method"], scope["path"], exc_info=error)
                detail = f"unexpected {type(error).__name__}; see the gateway's log"
                problem = Problem(Code.INTERNAL_ERROR, detail)
            await _answer_problem(send, problem)

    def _authenticate(self, scope: Scope) -> None:
        if self._token is None and not self.settings.auth.enabled:
            return
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
                break
        if self._token is not None:
            check_bearer(bearer_credentials(authorization), self._token)
        identify_caller(self.settings.auth, authorization, scope)

    # ---- the routes: each checks its parameters now (raising _Defer) and
    # returns the call that serves the request.

    def _get_key(self, request: _Request) -> Call:
        namespace, key = request.namespace(), request.key()
        request.defers(_KEY_READ_DEFERRED)
        partition_key = request.query_text("partition_key")
        if_none_match = request.matching_header(b"if-none-match", _TAGS_OR_ANY)
        accept = request.header(b"accept")
        pool = self.pool

        async def call(receive: Receive, send: Send) -> None:
            not_modified = parse_entity_tags(if_none_match) if if_none_match is not None else None
            async with pool.lease(namespace) as client:
                record = await client.get(key, partition_key=partition_key)
            version = record.version
            if not_modified is not None and not_modified.matches(version.version_id):
                await _answer(send, 304, [(b"etag", etag(version.version_id).encode("ascii"))])
                return
            found_headers = version_headers(record.key, version, record.secondary_index_key)
            headers = _header_pairs(found_headers)
            if prefers_json(accept):
                await _answer_json(send, 200, record_document(record), headers)
                return
            headers.append(_OCTET_TYPE)
            await _answer(send, 200, headers, record.value or b"")

        return call

    def _put_key(self, request: _Request) -> Call:
        namespace, key = request.namespace(), request.key()
        request.defers(_KEY_WRITE_DEFERRED)
        partition_key = request.query_text("partition_key")
        precondition = write_precondition(
            request.matching_header(b"if-match", _ONE_TAG_OR_ANY),
            request.matching_header(b"if-none-match", _ANY),
        )
        if precondition.condition in (WriteCondition.EXISTS, WriteCondition.NEVER):
            raise _Defer  # a read before the write, or a refusal: the router's
        expected = precondition.version_id
        if precondition.condition is WriteCondition.ABSENT:
            expected = EXPECTED_RECORD_DOES_NOT_EXIST
        declared = request.header(b"content-length")
        limit = self.settings.max_value_bytes
        pool = self.pool

        async def call(receive: Receive, send: Send) -> None:
            value = await _body(receive, declared, limit)
            async with pool.lease(namespace) as client:
                result = await client.put(
                    key, value, expected_version=expected, partition_key=partition_key
                )
            version = result.version
            headers = [(b"etag", etag(version.version_id).encode("ascii"))]
            # A record's first version has no modifications: this put created it.
            created = version.modifications_count == 0
            if created:
                location = key_location(namespace, result.key, partition_key)
                headers.append((b"location", location.encode("latin-1")))
            document = {"key": result.key, "version": version_document(version)}
            await _answer_json(send, 201 if created else 200, document, headers)

        return call

    def _delete_key(self, request: _Request) -> Call:
        namespace, key = request.namespace(), request.key()
        partition_key = request.query_text("partition_key")
        precondition = write_precondition(
            request.matching_header(b"if-match", _ONE_TAG_OR_ANY), None
        )
        pool = self.pool

        async def call(receive: Receive, send: Send) -> None:
            async with pool.lease(namespace) as client:
                # If-Match: * asks only that the record exist, as every delete does
                # (a missing record is a 404).
                await client.delete(
                    key, expected_version=precondition.version_id, partition_key=partition_key
                )
            await _answer(send, 204, [])

        return call

    def _page(self, request: _Request, *, records: bool) -> Call:
        namespace = request.namespace()
        request.defers(_PAGE_DEFERRED)
        end = request.query_text("end", required=True)
        start = request.query_text("start")
        partition_key = request.query_text("partition_key")
        limit = self._limit(request.query.get("limit"))
        cursor = request.query.get("cursor")
        if cursor is not None and not (
            1 <= len(cursor) <= MAX_TOKEN_CHARS and _TOKEN.fullmatch(cursor)
        ):
            raise _Defer
        settings, pool = self.settings, self.pool
        kind: ScanKind = "records" if records else "keys"

        async def call(receive: Receive, send: Send) -> None:
            query, decoded = query_of(namespace, kind, start, end, cursor, partition_key, None)
            async with pool.lease(namespace) as client:
                if records:
                    found, next_cursor = await read_records(
                        client, query, decoded, limit, settings.max_page_bytes
                    )
                    document: dict[str, Any] = {"records": [record_document(r) for r in found]}
                else:
                    keys, next_cursor = await read_keys(
                        client, query, decoded, limit, settings.max_page_bytes
                    )
                    document = {"keys": keys}
            document["nextCursor"] = next_cursor
            await _answer_json(send, 200, document, [])

        return call

    def _limit(self, text: str | None) -> int:
        if text is None:
            return self.settings.default_page_limit
        if not (text.isascii() and text.isdigit()):
            raise _Defer
        limit = int(text)
        if not 1 <= limit <= self.settings.max_page_limit:
            raise _Defer
        return limit


async def _body(receive: Receive, declared_length: str | None, limit: int) -> bytes:
    """The request body, refused (413) once over `limit`: by its declared length
    before reading, or as it arrives."""
    too_large = Problem(Code.PAYLOAD_TOO_LARGE, "the request body is over this endpoint's limit")
    if declared_length is not None and declared_length.isdigit() and int(declared_length) > limit:
        raise too_large
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientLeft
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
