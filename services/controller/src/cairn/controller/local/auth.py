"""The embedded default's credentials: made once per cluster directory.

    <dir>/auth/auth.json       the --auth-config every process reads (token hashes, rules)
    <dir>/auth/admin.token     the operator's token: admin on everything
    <dir>/auth/gateway.token   the gateway's token to the pods (role gateway: it may act
                               for the callers it authenticated, nothing on its own)
    <dir>/auth/session.key     the key gateways sign their session tokens with

Tokens are 256 random bits (`secrets`); auth.json keeps only their SHA-256. The
files are readable by their owner only. Edit auth.json to add users and rules
(see the README); a restart of the processes reads it again.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cairn.common.auth.tokens import token_digest
from cairn.common.files import write_atomically

ADMIN_NAME = "admin"
GATEWAY_NAME = "gateway"


@dataclass(frozen=True, slots=True)
class LocalAuth:
    directory: Path

    @property
    def config(self) -> Path:
        return self.directory / "auth.json"

    @property
    def admin_token(self) -> Path:
        return self.directory / "admin.token"

    @property
    def gateway_token(self) -> Path:
        return self.directory / "gateway.token"

    @property
    def session_key(self) -> Path:
        return self.directory / "session.key"


def _secret_file(path: Path, text: str) -> None:
    write_atomically(path, text + "\n")
    os.chmod(path, 0o600)


def ensure_local_auth(directory: Path) -> LocalAuth:
    """The cluster's credentials, created on the first start and kept after."""
    auth = LocalAuth(directory)
    if auth.config.exists():
        return auth
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    admin, gateway = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    _secret_file(auth.admin_token, admin)
    _secret_file(auth.gateway_token, gateway)
    _secret_file(auth.session_key, secrets.token_urlsafe(32))
    document = {
        "enabled": True,
        "tokens": [
            {"sha256": token_digest(admin), "name": ADMIN_NAME},
            {"sha256": token_digest(gateway), "name": GATEWAY_NAME, "role": "gateway"},
        ],
        "rules": [{"principals": [ADMIN_NAME], "access": "admin"}],
    }
    # Last: its presence says the rest is complete.
    _secret_file(auth.config, json.dumps(document, indent=2))
    return auth
