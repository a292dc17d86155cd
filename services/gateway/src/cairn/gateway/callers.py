"""Who calls the gateway, and how the gateway tells the pods.

With an auth configuration (`--auth-config`, the same file the pods read), each
request's caller is its bearer token's principal, else its verified client
certificate's, else anonymous; a bad token is a 401 problem here, before any
storage call. The gateway then calls the pods with its own credential (its
token, `--pod-token-file`, of role gateway; or its certificate once the
transport has TLS) and names the caller in `x-cairn-on-behalf-of`: the pods
accept that header from a gateway only, and hold the caller to the rules. So
the gateway decides nothing itself: pods and controller do.

The caller lives in a context variable for the length of the request, so the
client pool (`pool.py`) and the controller proxy (`admin.py`) pick the right
identity without every route passing it along.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar

from fastapi import Request
from starlette.types import Scope

from cairn.common.auth.config import (
    AUTHORIZATION_HEADER,
    ON_BEHALF_OF_HEADER,
    AuthConfig,
    CallerRefused,
)
from cairn.common.identity import Principal, asgi_peer_principal
from cairn.gateway.problems import Code, Problem
from cairn.gateway.tokens import ForeignToken, SessionToken

log = logging.getLogger(__name__)
CURRENT_CALLER: ContextVar[Principal | None] = ContextVar("cairn_gateway_caller", default=None)


def current_caller() -> Principal | None:
    """The request's caller; None when the gateway runs without auth."""
    return CURRENT_CALLER.get()


def on_behalf_of_metadata(principal: Principal) -> tuple[tuple[str, str], ...]:
    return ((ON_BEHALF_OF_HEADER, str(principal)),)


def identify_caller(config: AuthConfig, authorization: str | None, scope: Scope) -> None:
    """Name the request's caller for the rest of the request (a 401 problem for a
    bad token); nothing without auth."""
    if not config.enabled:
        return
    try:
        # Callers cannot name someone else: only the gateway speaks for others.
        principal = config.caller(authorization, asgi_peer_principal(scope), None, time.time())
    except CallerRefused as error:
        raise Problem(
            Code.UNAUTHORIZED,
            error.message,
            {"WWW-Authenticate": 'Bearer realm="cairn", error="invalid_token"'},
        ) from None
    CURRENT_CALLER.set(principal)


def caller_dependency(config: AuthConfig) -> Callable[[Request], Awaitable[None]]:
    async def identify(request: Request) -> None:
        identify_caller(config, request.headers.get(AUTHORIZATION_HEADER), request.scope)

    return identify


def caller_owner() -> str:
    caller = current_caller()
    return str(caller) if caller is not None else ""


def decode_session(token: str, namespace: str, key: bytes | None) -> SessionToken:
    """The caller's session a token names. Another principal's: 403 (logged)."""
    try:
        return SessionToken.decode(token, namespace, key, caller_owner())
    except ForeignToken as error:
        log.warning("session token of another principal refused for %s", caller_owner())
        raise Problem(Code.FORBIDDEN, str(error)) from None
