"""Bearer tokens: who a token names. Pure (time comes in as an argument).

Two kinds, tried in this order:
- static tokens, for small setups: the configuration holds the SHA-256 of each
  token (never the token), so a leaked configuration file lets nobody in;
- JWTs from configured issuers, OIDC style (what Oxia's clients send): the
  unverified `iss` claim picks the issuer, whose pinned algorithms and keys
  (a JWKS document or one PEM public key) then verify the signature, `aud`,
  `exp` and `nbf` (with a small leeway for clock skew). The principal is the
  issuer's configured claim (default `sub`).

Everything else (malformed, unknown issuer, bad signature, expired) is
`InvalidToken`, which the servers answer as UNAUTHENTICATED.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jwt

from cairn.common.auth.rules import ANONYMOUS_NAME
from cairn.common.identity import Principal, Role

BEARER = "bearer"
# Tokens longer than this are refused unread (a JWT with a few claims is ~1 KiB).
MAX_TOKEN_CHARS = 16 * 1024
DEFAULT_LEEWAY_S = 30.0
# Asymmetric algorithms only: a shared secret in every pod's configuration would
# let any pod mint tokens.
ALLOWED_JWT_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)


class InvalidToken(ValueError):
    """A token that names nobody: say so to the caller, without details that
    help a guesser (the reason goes to the log)."""


def bearer_token(header_value: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` value; None if there is no
    such header; InvalidToken if it is there but is not a bearer token."""
    if header_value is None:
        return None
    scheme, _, token = header_value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != BEARER or not token:
        raise InvalidToken("the authorization header is not 'Bearer <token>'")
    if len(token) > MAX_TOKEN_CHARS:
        raise InvalidToken("the bearer token is too long")
    return token


def token_digest(token: str) -> str:
    """What the configuration stores for a static token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Issuer:
    issuer: str
    audience: str
    algorithms: tuple[str, ...]
    # kid -> key (a JWKS file's keys); a key under "" is used when the token names no kid.
    keys: Mapping[str, Any]
    principal_claim: str = "sub"
    leeway_s: float = DEFAULT_LEEWAY_S

    def key_for(self, kid: str | None) -> Any:
        if kid is not None and kid in self.keys:
            return self.keys[kid]
        if kid is None and len(self.keys) == 1:
            return next(iter(self.keys.values()))
        if "" in self.keys:
            return self.keys[""]
        raise InvalidToken(f"issuer {self.issuer!r} has no key {kid!r}")


@dataclass(frozen=True, slots=True)
class Authenticator:
    # sha256 hex digest -> principal
    static_tokens: Mapping[str, Principal] = field(default_factory=dict)
    issuers: Mapping[str, Issuer] = field(default_factory=dict)

    def authenticate(self, token: str, now_s: float) -> Principal:
        """The principal `token` names; InvalidToken if it names none."""
        digest = token_digest(token)
        for known, principal in self.static_tokens.items():
            # Constant time per comparison: how much of a guess matched stays hidden.
            if hmac.compare_digest(known, digest):
                return principal
        if token.count(".") != 2:
            raise InvalidToken("unknown token")
        return self._jwt(token, now_s)

    def _jwt(self, token: str, now_s: float) -> Principal:
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError as error:
            raise InvalidToken(f"malformed JWT: {error}") from None
        issuer = self.issuers.get(str(unverified.get("iss", "")))
        if issuer is None:
            raise InvalidToken("a JWT of an unknown issuer")
        algorithm = header.get("alg")
        if algorithm not in issuer.algorithms:
            raise InvalidToken(f"a JWT signed with {algorithm!r}, not an algorithm of its issuer")
        kid = header.get("kid")
        key = issuer.key_for(kid if isinstance(kid, str) else None)
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=list(issuer.algorithms),
                audience=issuer.audience,
                issuer=issuer.issuer,
                leeway=issuer.leeway_s,
                options={"require": ["exp", "iss", "aud"], "verify_iat": False},
                # PyJWT reads the clock itself; `now_s` checks it is the caller's too.
            )
        except jwt.PyJWTError as error:
            raise InvalidToken(f"JWT refused: {error}") from None
        # PyJWT checked exp/nbf against its own clock; check them against ours too
        # (tests and simulations pass theirs).
        if float(claims["exp"]) + issuer.leeway_s < now_s:
            raise InvalidToken("JWT refused: expired")
        name = claims.get(issuer.principal_claim)
        if not isinstance(name, str) or not name or name == ANONYMOUS_NAME:
            raise InvalidToken(f"the JWT's {issuer.principal_claim!r} claim names nobody")
        return Principal(Role.USER, name)
