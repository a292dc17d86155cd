"""The pure parts of authentication and authorization: rules, tokens, callers."""

from __future__ import annotations

import json
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from cairn.common.auth.config import (
    AuthConfigError,
    CallerRefused,
    load_auth_config,
    parse_auth_config,
)
from cairn.common.auth.rules import ANONYMOUS, Access, Policy, parse_rule
from cairn.common.auth.tokens import InvalidToken, bearer_token, token_digest
from cairn.common.identity import Principal, Role

ALICE = Principal(Role.USER, "alice")
BOB = Principal(Role.USER, "bob")
GATEWAY = Principal(Role.GATEWAY, "gw")


def policy(*rules: dict[str, object]) -> Policy:
    return Policy(tuple(parse_rule(r) for r in rules))


def test_rules_grant_by_name_namespace_and_prefix() -> None:
    p = policy(
        {"principals": ["alice"], "namespaces": ["a"], "access": "write"},
        {
            "principals": ["*"],
            "namespaces": ["shared"],
            "prefixes": ["/u/{name}/"],
            "access": "write",
        },
        {"principals": ["user:admin"], "access": "admin"},
    )
    assert p.allows_key(ALICE, Access.WRITE, "a", "/anything")
    assert p.allows_key(ALICE, Access.READ, "a", "/anything")  # write includes read
    assert not p.allows_key(ALICE, Access.ADMIN, "a", "/anything")
    assert not p.allows_key(ALICE, Access.READ, "b", "/x")
    assert p.allows_key(BOB, Access.WRITE, "shared", "/u/bob/k")
    assert not p.allows_key(BOB, Access.READ, "shared", "/u/alice/k")
    assert not p.allows_namespace(BOB, Access.READ, "shared")
    assert p.allows_some(BOB, Access.READ, "shared")
    # `*` is any authenticated principal, not the anonymous one.
    assert not p.allows_some(ANONYMOUS, Access.READ, "shared")
    admin = Principal(Role.USER, "admin")
    assert p.allows_namespace(admin, Access.ADMIN, "*")
    assert p.allows_namespace(admin, Access.WRITE, "anything")


def test_anonymous_only_by_explicit_rule_and_roles() -> None:
    p = policy(
        {"principals": ["anonymous"], "namespaces": ["default"], "access": "read"},
        {"roles": ["gateway"], "namespaces": ["g"], "access": "read"},
    )
    assert p.allows_namespace(ANONYMOUS, Access.READ, "default")
    assert not p.allows_namespace(ANONYMOUS, Access.WRITE, "default")
    assert p.allows_namespace(GATEWAY, Access.READ, "g")
    assert not p.allows_some(ALICE, Access.READ, "g")


def test_disabled_policy_allows_everything() -> None:
    assert Policy(enabled=False).allows_namespace(ANONYMOUS, Access.ADMIN, "*")


@pytest.mark.parametrize(
    "rule",
    [
        {"access": "read"},
        {"principals": ["a"], "access": "owner"},
        {"principals": "a", "access": "read"},
        {"principals": ["a"], "access": "read", "prefix": "/x"},
        {"roles": ["root"], "access": "read"},
    ],
)
def test_bad_rules_are_refused(rule: dict[str, object]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the messages differ per case
        parse_rule(rule)


def test_bearer_header() -> None:
    assert bearer_token(None) is None
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    for bad in ("Basic abc", "Bearer", "abc"):
        with pytest.raises(InvalidToken):
            bearer_token(bad)


def _rsa_pem() -> tuple[rsa.RSAPrivateKey, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return key, public


def _config(tmp_path: Path, public_pem: bytes, **extra: object) -> Path:
    (tmp_path / "idp.pem").write_bytes(public_pem)
    document = {
        "enabled": True,
        "tokens": [
            {"sha256": token_digest("alice-secret"), "name": "alice"},
            {"sha256": token_digest("gw-secret"), "name": "gw", "role": "gateway"},
        ],
        "issuers": [
            {
                "issuer": "https://idp.example",
                "audience": "cairn",
                "algorithms": ["RS256"],
                "public_key_file": "idp.pem",
                "leeway_s": 5,
            }
        ],
        "rules": [{"principals": ["alice"], "access": "write"}],
        **extra,
    }
    path = tmp_path / "auth.json"
    path.write_text(json.dumps(document))
    return path


def test_static_tokens_and_jwts(tmp_path: Path) -> None:
    key, public = _rsa_pem()
    config = load_auth_config(_config(tmp_path, public))
    now = time.time()
    assert config.caller("Bearer alice-secret", None, None, now) == ALICE
    claims = {"iss": "https://idp.example", "aud": "cairn", "sub": "carol", "exp": now + 60}
    good = jwt.encode(claims, key, algorithm="RS256")
    assert config.caller(f"Bearer {good}", None, None, now) == Principal(Role.USER, "carol")
    # No credentials: anonymous; a certificate's principal when there is one.
    assert config.caller(None, None, None, now) == ANONYMOUS
    assert config.caller(None, BOB, None, now) == BOB

    def refused(token: str) -> CallerRefused:
        with pytest.raises(CallerRefused) as caught:
            config.caller(f"Bearer {token}", None, None, now)
        return caught.value

    expired = jwt.encode({**claims, "exp": now - 60}, key, algorithm="RS256")
    assert refused(expired).unauthenticated
    other_key, _ = _rsa_pem()
    assert refused(jwt.encode(claims, other_key, algorithm="RS256")).unauthenticated
    stranger = jwt.encode({**claims, "iss": "https://evil.example"}, key, algorithm="RS256")
    assert refused(stranger).unauthenticated
    assert refused(jwt.encode({**claims, "aud": "other"}, key, algorithm="RS256")).unauthenticated
    # HS256 signed with the public key as the secret (the classic confusion): refused.
    assert refused(
        jwt.encode(claims, "a-shared-secret-of-at-least-32-bytes!", algorithm="HS256")
    ).unauthenticated
    assert refused("unknown-static-token").unauthenticated
    anonymous_sub = jwt.encode({**claims, "sub": "anonymous"}, key, algorithm="RS256")
    assert refused(anonymous_sub).unauthenticated


def test_only_a_gateway_speaks_for_others(tmp_path: Path) -> None:
    _, public = _rsa_pem()
    config = load_auth_config(_config(tmp_path, public))
    now = time.time()
    assert config.caller("Bearer gw-secret", None, "user:bob", now) == BOB
    assert config.caller(None, GATEWAY, "user:bob", now) == BOB
    with pytest.raises(CallerRefused) as caught:
        config.caller("Bearer alice-secret", None, "user:bob", now)
    assert not caught.value.unauthenticated
    with pytest.raises(CallerRefused):
        config.caller("Bearer gw-secret", None, "controller:controller", now)


def test_config_must_say_enabled(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="enabled"):
        parse_auth_config({"rules": []}, tmp_path)
    path = tmp_path / "bad.json"
    path.write_text("{")
    with pytest.raises(AuthConfigError):
        load_auth_config(path)
    off = parse_auth_config({"enabled": False}, tmp_path)
    assert off.caller("Bearer whatever", None, None, 0.0) == ANONYMOUS
