"""The auth configuration file, and who a call comes from.

One JSON file (`--auth-config`), read by the storage pods, the controller and
the gateway alike, so that all of them hold callers to the same rules:

    {
      "enabled": true,
      "tokens": [
        {"sha256": "<hex digest of the token>", "name": "alice"},
        {"sha256": "...", "name": "gateway", "role": "gateway"}
      ],
      "issuers": [
        {"issuer": "https://idp.example", "audience": "cairn",
         "algorithms": ["RS256"], "jwks_file": "idp-keys.json",
         "principal_claim": "sub", "leeway_s": 30}
      ],
      "rules": [
        {"principals": ["admin"], "access": "admin"},
        {"principals": ["alice"], "namespaces": ["a"], "access": "write"},
        {"principals": ["*"], "namespaces": ["shared"], "prefixes": ["/users/{name}/"],
         "access": "write"},
        {"principals": ["anonymous"], "namespaces": ["default"], "access": "write"}
      ]
    }

Relative file names are relative to the configuration file. `"enabled": false`
turns authentication and authorization off (every caller may do everything);
it must be written out, it is never a default. A token's role is `user` unless
it says `gateway`: a gateway may name the caller it acts for (the
`x-cairn-on-behalf-of` header), nobody else may.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt

from cairn.common.auth.rules import ANONYMOUS, ANONYMOUS_NAME, Policy, parse_rule
from cairn.common.auth.tokens import (
    ALLOWED_JWT_ALGORITHMS,
    DEFAULT_LEEWAY_S,
    Authenticator,
    InvalidToken,
    Issuer,
    bearer_token,
)
from cairn.common.identity import Principal, Role

ON_BEHALF_OF_HEADER = "x-cairn-on-behalf-of"
AUTHORIZATION_HEADER = "authorization"
# Roles a static token may carry: component roles come from certificates only.
TOKEN_ROLES = frozenset({Role.USER, Role.GATEWAY})


class AuthConfigError(ValueError):
    """The configuration file is unreadable or wrong; the message says where."""


class CallerRefused(Exception):
    """The call's credentials are refused; `unauthenticated` tells 401 from 403."""

    def __init__(self, message: str, unauthenticated: bool) -> None:
        super().__init__(message)
        self.message = message
        self.unauthenticated = unauthenticated


@dataclass(frozen=True, slots=True)
class AuthConfig:
    authenticator: Authenticator = field(default_factory=Authenticator)
    policy: Policy = field(default_factory=lambda: Policy(enabled=False))

    @property
    def enabled(self) -> bool:
        return self.policy.enabled

    def caller(
        self,
        authorization: str | None,
        certificate_principal: Principal | None,
        on_behalf_of: str | None,
        now_s: float,
    ) -> Principal:
        """Who a call comes from: a bearer token's principal, else the verified
        client certificate's, else ANONYMOUS; then, for a gateway only, the
        principal it names as the caller it acts for. CallerRefused otherwise."""
        if not self.enabled:
            return ANONYMOUS
        try:
            token = bearer_token(authorization)
            if token is not None:
                principal = self.authenticator.authenticate(token, now_s)
            else:
                principal = certificate_principal or ANONYMOUS
        except InvalidToken as error:
            raise CallerRefused(str(error), unauthenticated=True) from None
        if on_behalf_of is None:
            return principal
        if principal.role is not Role.GATEWAY:
            raise CallerRefused(
                f"{principal} may not act on behalf of others ({ON_BEHALF_OF_HEADER})",
                unauthenticated=False,
            )
        return parse_on_behalf_of(on_behalf_of)


def parse_on_behalf_of(value: str) -> Principal:
    """`user:<name>` (what `str(principal)` gives). A gateway vouches for users
    only: it cannot make a call pass for a component's."""
    role, sep, name = value.partition(":")
    if not sep or role != Role.USER.value or not name:
        raise CallerRefused(
            f"{ON_BEHALF_OF_HEADER} must name a user ('user:<name>')", unauthenticated=False
        )
    return Principal(Role.USER, name)


def disabled() -> AuthConfig:
    return AuthConfig()


def load_auth_config(path: Path) -> AuthConfig:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise AuthConfigError(f"{path}: {error}") from None
    try:
        return parse_auth_config(document, path.parent)
    except (ValueError, KeyError, TypeError, jwt.PyJWTError) as error:
        raise AuthConfigError(f"{path}: {error}") from None


def parse_auth_config(document: Any, base: Path) -> AuthConfig:
    if not isinstance(document, dict):
        raise ValueError("the auth configuration must be a JSON object")
    unknown = set(document) - {"enabled", "tokens", "issuers", "rules"}
    if unknown:
        raise ValueError(f"unknown fields: {', '.join(sorted(unknown))}")
    enabled = document.get("enabled")
    if not isinstance(enabled, bool):
        raise ValueError('"enabled" must be written out, true or false')
    tokens: dict[str, Principal] = {}
    for entry in document.get("tokens", []):
        digest = str(entry["sha256"]).lower()
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError("a token's sha256 must be 64 hex digits")
        name = str(entry["name"])
        role = Role(entry.get("role", Role.USER.value))
        if role not in TOKEN_ROLES or not name or name == ANONYMOUS_NAME:
            raise ValueError(f"a token may not name {role}:{name}")
        tokens[digest] = Principal(role, name)
    issuers = {}
    for entry in document.get("issuers", []):
        issuer = _issuer(entry, base)
        issuers[issuer.issuer] = issuer
    rules = tuple(parse_rule(rule) for rule in document.get("rules", []))
    return AuthConfig(Authenticator(tokens, issuers), Policy(rules, enabled))


def _issuer(entry: Mapping[str, Any], base: Path) -> Issuer:
    algorithms = tuple(entry["algorithms"])
    if not algorithms or not set(algorithms) <= ALLOWED_JWT_ALGORITHMS:
        raise ValueError(
            f"issuer algorithms must be among {', '.join(sorted(ALLOWED_JWT_ALGORITHMS))}"
        )
    keys: dict[str, Any] = {}
    if "jwks_file" in entry:
        jwks = jwt.PyJWKSet.from_json((base / entry["jwks_file"]).read_text(encoding="utf-8"))
        for key in jwks.keys:
            keys[key.key_id or ""] = key.key
    if "public_key_file" in entry:
        pem = (base / entry["public_key_file"]).read_bytes()
        keys[""] = pem
    if not keys:
        raise ValueError(f"issuer {entry['issuer']!r} needs jwks_file or public_key_file")
    return Issuer(
        issuer=str(entry["issuer"]),
        audience=str(entry["audience"]),
        algorithms=algorithms,
        keys=keys,
        principal_claim=str(entry.get("principal_claim", "sub")),
        leeway_s=float(entry.get("leeway_s", DEFAULT_LEEWAY_S)),
    )
