"""Sessions over REST, for ephemeral records, held by no gateway.

    POST   /v1/namespaces/{ns}/sessions                   create: 201 + token
    POST   /v1/namespaces/{ns}/sessions/{token}/keepalive 204; 404 session-expired
    DELETE /v1/namespaces/{ns}/sessions/{token}           close: 204; its records are deleted

Storage sessions live on one shard each, so a REST session is one storage
session on every shard of the namespace, and its token lists their ids; any
gateway can keep it alive, use it (`PUT .../keys/{key}?session=<token>`) or
close it. The parts live and die together: when one has expired, a keepalive
closes the others and answers 404, so a client never holds a session whose
records survive on some shards only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Body, Path, Response
from fastapi.responses import JSONResponse

from cairn.client.client import AsyncClient
from cairn.client.errors import SessionExpired
from cairn.gateway.callers import caller_owner, decode_session
from cairn.gateway.models import SessionAnswer, SessionRequest
from cairn.gateway.openapi import errors
from cairn.gateway.params import NamespaceParam
from cairn.gateway.pool import ClientPool
from cairn.gateway.problems import Code, Problem
from cairn.gateway.settings import MAX_TOKEN_CHARS, GatewaySettings
from cairn.gateway.tokens import TOKEN_PATTERN, SessionToken, TokenError

TokenParam = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_TOKEN_CHARS,
        pattern=TOKEN_PATTERN,
        description="The session token",
    ),
]


async def _each_shard(
    session: SessionToken, call: Callable[[int, int], Awaitable[None]]
) -> dict[int, BaseException | None]:
    """`call(shard, session_id)` on every part at once; each part's outcome."""
    shards = sorted(session.session_ids)
    outcomes = await asyncio.gather(
        *(call(shard, session.session_ids[shard]) for shard in shards),
        return_exceptions=True,
    )
    answer: dict[int, BaseException | None] = {}
    for shard, outcome in zip(shards, outcomes, strict=True):
        if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
            raise outcome  # cancellation and the like: not a part's outcome
        answer[shard] = outcome if isinstance(outcome, BaseException) else None
    return answer


def _first_failure(outcomes: dict[int, BaseException | None]) -> BaseException | None:
    """The failure to report: an unexpected one before an expiry."""
    failures = [outcome for outcome in outcomes.values() if outcome is not None]
    others = [f for f in failures if not isinstance(f, SessionExpired)]
    ranked = others or failures
    return ranked[0] if ranked else None


def _decode(token: str, namespace: str, key: bytes | None) -> SessionToken:
    """The session a path names. A token that is none (or forged) names no
    session: 404, as for any other unknown resource in a path."""
    try:
        return decode_session(token, namespace, key)
    except TokenError as error:
        raise Problem(Code.SESSION_EXPIRED, f"no such session: {error}") from None


def router(settings: GatewaySettings, pool: ClientPool) -> APIRouter:
    api = APIRouter(tags=["sessions"])

    def check_shards(client: AsyncClient, session: SessionToken) -> None:
        if set(session.session_ids) != set(client.shard_map.shard_ids()):
            raise Problem(
                Code.INVALID_ARGUMENT,
                "the session was made for another shard map of this namespace",
            )

    @api.post(
        "/v1/namespaces/{namespace}/sessions",
        summary="Create a session (for ephemeral records)",
        status_code=201,
        response_model=SessionAnswer,
        responses={
            201: {
                "description": "Created; keep it alive more often than its timeout",
                "headers": {"Location": {"schema": {"type": "string"}}},
            },
            **errors(Code.NAMESPACE_NOT_FOUND, Code.UNAVAILABLE),
        },
    )
    async def create_session(
        namespace: NamespaceParam,
        body: Annotated[SessionRequest | None, Body()] = None,
    ) -> JSONResponse:
        request = body or SessionRequest()
        timeout_ms = request.timeoutMs or settings.default_session_timeout_ms
        async with pool.lease(namespace) as client:
            shards = client.shard_map.shard_ids()
            results = await asyncio.gather(
                *(
                    client.create_session(
                        shard, timeout_ms=timeout_ms, client_identity=request.clientIdentity
                    )
                    for shard in shards
                ),
                return_exceptions=True,
            )
            created = {
                shard: result
                for shard, result in zip(shards, results, strict=True)
                if isinstance(result, int)
            }
            failure = next((r for r in results if isinstance(r, BaseException)), None)
            if failure is not None:
                # All or nothing: the parts made are closed again.
                await asyncio.gather(
                    *(client.close_session(shard, sid) for shard, sid in created.items()),
                    return_exceptions=True,
                )
                raise failure
        token = SessionToken(namespace, created, request.clientIdentity, caller_owner()).encode(
            settings.session_key
        )
        answer = SessionAnswer(
            session=token,
            timeoutMs=timeout_ms,
            clientIdentity=request.clientIdentity,
            shards=len(created),
        )
        location = f"/v1/namespaces/{quote(namespace, safe='')}/sessions/{token}"
        return JSONResponse(answer.model_dump(), status_code=201, headers={"Location": location})

    @api.post(
        "/v1/namespaces/{namespace}/sessions/{token}/keepalive",
        summary="Keep a session alive",
        status_code=204,
        response_class=Response,
        responses={
            204: {"description": "Kept alive"},
            **errors(Code.SESSION_EXPIRED, Code.NAMESPACE_NOT_FOUND, Code.UNAVAILABLE),
        },
    )
    async def keep_alive(namespace: NamespaceParam, token: TokenParam) -> Response:
        session = _decode(token, namespace, settings.session_key)
        async with pool.lease(namespace) as client:
            check_shards(client, session)
            outcomes = await _each_shard(session, client.keep_alive)
            failure = _first_failure(outcomes)
            if isinstance(failure, SessionExpired):
                # A part expired and its records are gone: end the rest too.
                alive = SessionToken(
                    namespace,
                    {s: session.session_ids[s] for s, outcome in outcomes.items() if not outcome},
                )
                # Their own outcomes do not matter: the answer is 404 either way.
                await _each_shard(alive, client.close_session)
        if failure is not None:
            raise failure
        return Response(status_code=204)

    @api.delete(
        "/v1/namespaces/{namespace}/sessions/{token}",
        summary="Close a session (its ephemeral records are deleted)",
        status_code=204,
        response_class=Response,
        responses={
            204: {"description": "Closed"},
            **errors(Code.SESSION_EXPIRED, Code.NAMESPACE_NOT_FOUND, Code.UNAVAILABLE),
        },
    )
    async def close_session(namespace: NamespaceParam, token: TokenParam) -> Response:
        session = _decode(token, namespace, settings.session_key)
        async with pool.lease(namespace) as client:
            check_shards(client, session)
            outcomes = await _each_shard(session, client.close_session)
        failure = _first_failure(outcomes)
        expired = [o for o in outcomes.values() if isinstance(o, SessionExpired)]
        if failure is not None and not isinstance(failure, SessionExpired):
            raise failure
        if len(expired) == len(outcomes):
            # Nothing was open any more: closed (or expired) before.
            raise SessionExpired("the session was closed or expired before")
        return Response(status_code=204)

    return api
