"""Who calls the public API, at the edge: credentials in, a `Caller` out.

The principal comes from a bearer token in the `authorization` metadata (what
Oxia's OIDC clients send), else from the verified client certificate
(`grpc_access.peer_principal`, the same reading as the internal port's role
checks; None on a plaintext port, or when the client sent no certificate), else it is
ANONYMOUS. A gateway may name the user it acts for in `x-cairn-on-behalf-of`
(see cairn.common.auth.config). Refusals are logged with the principal and
answered UNAUTHENTICATED (no valid credentials) or PERMISSION_DENIED.
"""

from __future__ import annotations

import logging
import time
from typing import NoReturn

import grpc

from cairn.common.auth.config import (
    AUTHORIZATION_HEADER,
    ON_BEHALF_OF_HEADER,
    AuthConfig,
    CallerRefused,
)
from cairn.common.auth.rules import ANONYMOUS
from cairn.common.errors import PermissionDenied, Unauthenticated
from cairn.common.grpc_access import peer_principal
from cairn.common.identity import DEFAULT_TRUST_DOMAIN
from cairn.storage.core.access import Caller

log = logging.getLogger(__name__)


def _header(context: grpc.aio.ServicerContext, name: str) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == name:
            return value if isinstance(value, str) else None
    return None


class AccessControl:
    def __init__(self, config: AuthConfig, trust_domain: str = DEFAULT_TRUST_DOMAIN) -> None:
        self.config = config
        self.trust_domain = trust_domain
        # Refusals since the process started, for the log's context and tests.
        self.refused = 0

    def caller(self, context: grpc.aio.ServicerContext, method: str) -> Caller:
        """The call's caller; Unauthenticated / PermissionDenied if its
        credentials are refused."""
        config = self.config
        if not config.enabled:
            return Caller(ANONYMOUS, config.policy)
        try:
            certificate = peer_principal(context, self.trust_domain)
            principal = config.caller(
                _header(context, AUTHORIZATION_HEADER),
                certificate,
                _header(context, ON_BEHALF_OF_HEADER),
                time.time(),
            )
        except CallerRefused as error:
            self.refused += 1
            log.warning("%s refused (%s): %s", method, context.peer(), error.message)
            if error.unauthenticated:
                raise Unauthenticated(error.message) from None
            raise PermissionDenied(error.message) from None
        return Caller(principal, config.policy)

    def refuse(self, caller: Caller, method: str, message: str) -> NoReturn:
        """Log and raise the refusal: an anonymous caller is told to authenticate."""
        self.refused += 1
        log.warning("%s by %s refused: %s", method, caller.principal, message)
        if caller.principal == ANONYMOUS:
            raise Unauthenticated(f"{message} (no credentials were presented)")
        raise PermissionDenied(message)
