"""The embedded default's credentials: made once per cluster directory.

    <dir>/auth/auth.json       the --auth-config every process reads (token hashes, rules)
    <dir>/auth/admin.token     the operator's token: admin on everything
    <dir>/auth/gateway.token   the gateway's token to the pods (role gateway: it may act
                               for the callers it authenticated, nothing on its own)
    <dir>/auth/session.key     the key gateways sign their session tokens with

Tokens are 256 random bits (`secrets`); auth.json keeps only their SHA-256. The
files are readable by their owner only. Edit auth.json to add users and rules
(see the README); a restart of the processes reads it again.

docker compose makes the same files with this module's command line (its one-shot
`auth` service), the admin token kept apart from what the services mount:

    python -m cairn.controller.local.auth --dir DIR [--admin-token-file FILE]
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
ADMIN_TOKEN_FILE = "admin.token"


@dataclass(frozen=True, slots=True)
class LocalAuth:
    directory: Path
    # The operator's token: beside the rest by default; a deployment whose services
    # mount `directory` keeps it elsewhere, so that no service holds it.
    admin_token: Path

    @property
    def config(self) -> Path:
        return self.directory / "auth.json"

    @property
    def gateway_token(self) -> Path:
        return self.directory / "gateway.token"

    @property
    def session_key(self) -> Path:
        return self.directory / "session.key"


def _private_directory(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)


def _secret_file(path: Path, text: str) -> None:
    write_atomically(path, text + "\n")
    os.chmod(path, 0o600)


def ensure_local_auth(directory: Path, admin_token: Path | None = None) -> LocalAuth:
    """The cluster's credentials, created on the first start and kept after."""
    auth = LocalAuth(directory, admin_token or directory / ADMIN_TOKEN_FILE)
    if auth.config.exists():
        return auth
    _private_directory(directory)
    _private_directory(auth.admin_token.parent)
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


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="cairn-local-auth",
        description="make a cluster's auth configuration, gateway token, session key and "
        "admin token once (kept on later runs)",
    )
    parser.add_argument(
        "--dir", type=Path, required=True, help="auth.json, gateway.token, session.key"
    )
    parser.add_argument(
        "--admin-token-file",
        type=Path,
        default=None,
        help=f"where the admin token goes (default: DIR/{ADMIN_TOKEN_FILE})",
    )
    args = parser.parse_args(argv)
    auth = ensure_local_auth(args.dir, args.admin_token_file)
    print(f"cairn-local-auth: {auth.config} ready; admin token in {auth.admin_token}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
