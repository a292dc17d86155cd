"""Who may use the controller's admin API.

Views (GET /v1/...) need `read` on every namespace (a rule whose namespaces
include `*`): they show all of them. Actions (PUT/POST/DELETE /v1/...) need
`admin` on every namespace. Probes and the OpenAPI page are open; the sidecars'
heartbeats are left to the transport (mutual TLS names the sidecar; see
issue 39's TLS half). The caller is the bearer token's principal, else the
verified client certificate's, else anonymous; a gateway may name the caller it
acts for. Refusals are logged with the principal: 401 without valid
credentials, 403 otherwise.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from cairn.common.auth.config import (
    AUTHORIZATION_HEADER,
    ON_BEHALF_OF_HEADER,
    AuthConfig,
    CallerRefused,
)
from cairn.common.auth.rules import ANONYMOUS, ANY_NAMESPACE, Access
from cairn.common.identity import Principal, asgi_peer_principal

log = logging.getLogger(__name__)
OPEN_PATHS = frozenset({"/livez", "/readyz", "/docs", "/openapi.json", "/v1/heartbeats"})
READ_METHODS = frozenset({"GET", "HEAD"})


class Refusal(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def required_access(method: str, path: str) -> Access | None:
    """What a request needs; None: nothing (open paths)."""
    if path in OPEN_PATHS or not path.startswith("/v1/"):
        return None
    return Access.READ if method in READ_METHODS else Access.ADMIN


def check_request(
    config: AuthConfig,
    method: str,
    path: str,
    headers: Mapping[str, str],
    scope: Mapping[str, Any],
) -> Principal | None:
    """The caller if it may make this request; Refusal otherwise."""
    access = required_access(method, path)
    if access is None or not config.enabled:
        return None
    try:
        principal = config.caller(
            headers.get(AUTHORIZATION_HEADER),
            asgi_peer_principal(scope),
            headers.get(ON_BEHALF_OF_HEADER),
            time.time(),
        )
    except CallerRefused as error:
        log.warning("%s %s refused: %s", method, path, error.message)
        raise Refusal(401 if error.unauthenticated else 403, error.message) from None
    policy = config.policy
    allowed = (
        policy.allows_some(principal, access, ANY_NAMESPACE)
        if access is Access.READ
        else policy.allows_namespace(principal, access, ANY_NAMESPACE)
    )
    if not allowed:
        detail = f"{principal} may not {access.name.lower()} the cluster (needs a rule on '*')"
        log.warning("%s %s by %s refused: %s", method, path, principal, detail)
        if principal == ANONYMOUS:
            raise Refusal(401, "this API needs a bearer token (Authorization: Bearer <token>)")
        raise Refusal(403, detail)
    return principal
