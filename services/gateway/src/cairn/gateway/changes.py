"""The change feed as Server-Sent Events.

    GET /v1/namespaces/{ns}/changes     text/event-stream, one event per batch

Resume with the `Last-Event-ID` header (browsers' EventSource sends it when it
reconnects) or `?since=<event id>`; the header wins, since a reconnecting
EventSource repeats the original URL. A resume point older than the storage's
notification retention is a 410 (notifications-trimmed).

The stream pulls one batch from the client library at a time, only when the
previous one has been handed to the HTTP server, so a slow reader slows the
feed instead of growing a buffer. `max_events` and `max_duration_ms` end it
early (for clients that poll instead of keeping a stream open).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from asyncio import FIRST_COMPLETED
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from cairn.client.errors import ClientError
from cairn.client.records import NotificationBatch
from cairn.gateway import metrics
from cairn.gateway.feed import FeedOverflow, FeedState, comment, encode_all, error_event
from cairn.gateway.openapi import errors
from cairn.gateway.params import NamespaceParam
from cairn.gateway.pool import ClientPool
from cairn.gateway.problems import Code, Problem, problem_for_client_error
from cairn.gateway.settings import MAX_TOKEN_CHARS, GatewaySettings
from cairn.gateway.tokens import TOKEN_PATTERN, FeedPosition, TokenError

log = logging.getLogger(__name__)
EVENT_STREAM = "text/event-stream"
# One event of the stream, as the OpenAPI document states it (before OpenAPI
# 3.2's itemSchema, a text/event-stream schema describes each event).
EVENT_SCHEMA: dict[str, object] = {
    "oneOf": [
        {
            "type": "object",
            "properties": {
                "event": {"const": "message"},
                "id": {"type": "string", "description": "The position to resume after"},
                "data": {
                    "type": "string",
                    "contentMediaType": "application/json",
                    "contentSchema": {"$ref": "#/components/schemas/ChangeBatch"},
                },
            },
            "required": ["event", "id", "data"],
        },
        {
            "type": "object",
            "properties": {
                "event": {"const": "error"},
                "data": {
                    "type": "string",
                    "contentMediaType": "application/json",
                    "contentSchema": {"$ref": "#/components/schemas/ProblemDocument"},
                },
            },
            "required": ["event", "data"],
        },
    ]
}
# How long an EventSource waits before reconnecting after the stream ends.
RECONNECT_DELAY_MS = 1000
MAX_EVENTS = 1_000_000
MAX_DURATION_MS = 24 * 3600 * 1000


class _Feed:
    """One open stream: the client's iterator, its next batch being fetched,
    and the lease on the namespace's client (released when the stream ends)."""

    def __init__(
        self,
        lease: contextlib.AsyncExitStack,
        state: FeedState,
        batches: AsyncIterator[NotificationBatch],
    ) -> None:
        self.lease = lease
        self.state = state
        self.batches = batches
        self.next: asyncio.Future[NotificationBatch] | None = None
        self._closing: asyncio.Future[None] | None = None

    def fetch(self) -> asyncio.Future[NotificationBatch]:
        if self.next is None:
            self.next = asyncio.ensure_future(anext(self.batches))
        return self.next

    async def wait(
        self, timeout_s: float, interrupt: asyncio.Event | None = None
    ) -> NotificationBatch | None:
        """The next batch, or None if none came within `timeout_s` (or
        `interrupt` was set first). Raises StopAsyncIteration at the end, the
        client's errors as they come."""
        pending = self.fetch()
        waiting: set[asyncio.Future[Any]] = {pending}
        interrupted = None
        if interrupt is not None:
            interrupted = asyncio.ensure_future(interrupt.wait())
            waiting.add(interrupted)
        try:
            await asyncio.wait(waiting, timeout=max(0.0, timeout_s), return_when=FIRST_COMPLETED)
        finally:
            if interrupted is not None:
                interrupted.cancel()
        if not pending.done():
            return None
        self.next = None
        return pending.result()

    async def close(self) -> None:
        """Release everything, once. The work runs in a task of its own, so that
        a caller being cancelled (a stream ending inside a cancelled task group
        sees every await cancelled) cannot leave it half done."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        if self.next is not None:
            self.next.cancel()
            # Waits for the cancelled fetch without raising its outcome.
            await asyncio.wait({self.next})
            self.next = None
        close = getattr(self.batches, "aclose", None)
        if close is not None:
            with contextlib.suppress(ClientError):
                await close()
        await self.lease.aclose()


class _FeedResponse(StreamingResponse):
    """A stream that ends when its client leaves, and then closes its feed.

    The server reports a departed client only to `receive` (a write to it
    fails too, but an idle feed writes once per keep-alive interval), so the
    response watches `receive` beside the stream: Starlette does so itself
    only for servers of ASGI spec versions before 2.4. The feed is closed
    however the response ends: the stream's own `finally` does not run when
    the client leaves before the first chunk is asked for, and one running
    inside Starlette's cancelled task group has every await cancelled."""

    def __init__(self, feed: _Feed, content: AsyncIterator[str], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.feed = feed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def client_left() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        streaming = asyncio.ensure_future(super().__call__(scope, receive, send))
        watching = asyncio.ensure_future(client_left())
        try:
            await asyncio.wait({streaming, watching}, return_when=FIRST_COMPLETED)
        finally:
            # In a task of its own: this one may be cancelled (server shutdown).
            await asyncio.shield(asyncio.ensure_future(self._end(streaming, watching)))
        error = None if streaming.cancelled() else streaming.exception()
        if error is not None:
            raise error

    async def _end(self, streaming: asyncio.Future[None], watching: asyncio.Future[None]) -> None:
        for task in (streaming, watching):
            task.cancel()
        await asyncio.wait({streaming, watching})
        aclose = getattr(self.body_iterator, "aclose", None)
        if aclose is not None:
            await aclose()
        await self.feed.close()


def router(settings: GatewaySettings, pool: ClientPool, draining: asyncio.Event) -> APIRouter:
    """`draining`: set when the gateway shuts down; open streams end at once
    (their clients resume on another gateway with the last event id)."""
    api = APIRouter(tags=["changes"])

    open_feeds = 0

    def release_slot() -> None:
        nonlocal open_feeds
        open_feeds -= 1

    async def open_feed(
        namespace: str, token: str | None, prefixes: list[str], include_stat: bool
    ) -> _Feed:
        nonlocal open_feeds
        if open_feeds >= settings.max_open_feeds:
            raise Problem(
                Code.UNAVAILABLE,
                f"this gateway serves {settings.max_open_feeds} change feeds at once; "
                "retry later or on another gateway",
                {"Retry-After": str(settings.retry_after_s)},
            )
        open_feeds += 1
        lease = contextlib.AsyncExitStack()
        lease.callback(release_slot)
        try:
            client = await lease.enter_async_context(pool.lease(namespace))
            position = FeedPosition.decode(token, namespace) if token else None
            shards = client.shard_map.shard_ids()
            resumed = dict(position.offsets) if position is not None else {}
            unknown = set(resumed) - set(shards)
            if unknown:
                raise Problem(
                    Code.INVALID_ARGUMENT,
                    f"the event id names shards {sorted(unknown)} the namespace does not have",
                )
            state = FeedState(namespace, shards, resumed, settings.max_feed_pending_batches)
            batches = client.notifications(
                start_offsets=resumed or None, key_prefixes=prefixes, include_stat=include_stat
            )
        except TokenError as error:
            await lease.aclose()
            raise Problem(Code.INVALID_ARGUMENT, f"event id: {error}") from None
        except BaseException:
            await lease.aclose()
            raise
        return _Feed(lease, state, batches)

    @api.get(
        "/v1/namespaces/{namespace}/changes",
        summary="Follow the namespace's changes (Server-Sent Events)",
        response_class=StreamingResponse,
        responses={
            200: {
                "description": "One event per committed batch of changes of one shard "
                "(`id:` the resume token, `data:` a ChangeBatch); comment lines keep the "
                "connection alive; a stream ending on an error sends `event: error` with a "
                "problem document. The schema describes one event.",
                "content": {EVENT_STREAM: {"schema": EVENT_SCHEMA}},
            },
            **errors(
                Code.NAMESPACE_NOT_FOUND,
                Code.NOTIFICATIONS_TRIMMED,
                Code.UNAVAILABLE,
            ),
        },
    )
    async def changes(
        namespace: NamespaceParam,
        since: Annotated[
            str | None,
            Query(
                min_length=1,
                max_length=MAX_TOKEN_CHARS,
                pattern=TOKEN_PATTERN,
                description="Resume after this event id (the Last-Event-ID header wins)",
            ),
        ] = None,
        last_event_id: Annotated[
            str | None,
            Header(
                alias="Last-Event-ID",
                min_length=1,
                max_length=MAX_TOKEN_CHARS,
                pattern=TOKEN_PATTERN,
                description="Resume after this event id",
            ),
        ] = None,
        max_events: Annotated[
            int | None,
            Query(ge=1, le=MAX_EVENTS, description="End the stream after this many events"),
        ] = None,
        max_duration_ms: Annotated[
            int | None,
            Query(ge=0, le=MAX_DURATION_MS, description="End the stream after this long"),
        ] = None,
        prefix: Annotated[
            list[str] | None,
            Query(
                description="Only changes of keys with this prefix (repeatable; a range "
                "deletion that can cover such a key counts). Events with no change then "
                "still come now and then, to carry the resume position past what was "
                "filtered out.",
            ),
        ] = None,
        versions: Annotated[
            bool, Query(description="Whether each change carries its version id")
        ] = True,
    ) -> StreamingResponse:
        started = time.monotonic()
        feed = await open_feed(namespace, last_event_id or since, prefix or [], versions)
        # Wait briefly for the first batch, so that a resume point the storage
        # no longer has answers 410 rather than a 200 ending at once.
        first: list[NotificationBatch] = []
        try:
            batch = await feed.wait(
                min(
                    settings.feed_open_wait_s,
                    (max_duration_ms / 1000) if max_duration_ms is not None else float("inf"),
                )
            )
            if batch is not None:
                first.append(batch)
        except StopAsyncIteration:
            pass
        except ClientError as error:
            await feed.close()
            raise problem_for_client_error(error, settings.retry_after_s) from None
        except BaseException:
            await feed.close()
            raise
        deadline = started + max_duration_ms / 1000 if max_duration_ms is not None else None
        return _FeedResponse(
            feed,
            stream(feed, first, max_events, deadline),
            media_type=EVENT_STREAM,
            headers={
                "Cache-Control": "no-cache",
                # Tells nginx-style proxies not to buffer the stream.
                "X-Accel-Buffering": "no",
            },
        )

    async def stream(
        feed: _Feed,
        first: list[NotificationBatch],
        max_events: int | None,
        deadline: float | None,
    ) -> AsyncIterator[str]:
        sent = 0
        metrics.COUNTERS.sse_streams += 1
        try:
            yield f"retry: {RECONNECT_DELAY_MS}\n\n"
            backlog = list(first)
            while (max_events is None or sent < max_events) and not draining.is_set():
                if backlog:
                    batch: NotificationBatch | None = backlog.pop(0)
                else:
                    remaining = deadline - time.monotonic() if deadline is not None else None
                    if remaining is not None and remaining <= 0:
                        return
                    wait_s = settings.feed_keepalive_interval_s
                    batch = await feed.wait(
                        wait_s if remaining is None else min(wait_s, remaining), draining
                    )
                if batch is None:
                    if draining.is_set():
                        return
                    if deadline is None or time.monotonic() < deadline:
                        yield comment("keep-alive")
                    continue
                events = feed.state.push(batch)
                if max_events is not None:
                    # Events held back and released together may exceed the
                    # bound; the ids let the client resume after the last sent.
                    events = events[: max_events - sent]
                if events:
                    sent += len(events)
                    yield encode_all(events)
        except StopAsyncIteration:
            return
        except ClientError as error:
            problem = problem_for_client_error(error, settings.retry_after_s)
            yield error_event(json.dumps(problem.document()))
        except FeedOverflow as overflow:
            problem = Problem(Code.UNAVAILABLE, str(overflow))
            yield error_event(json.dumps(problem.document()))
        finally:
            metrics.COUNTERS.sse_streams -= 1
            await feed.close()

    return api
