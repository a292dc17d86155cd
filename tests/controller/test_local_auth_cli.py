"""`python -m cairn.controller.local.auth`: what compose's one-shot auth service
runs; the files `./dev run` makes, with the admin token where it is told."""

from __future__ import annotations

import json
from pathlib import Path

from cairn.common.auth.config import load_auth_config
from cairn.common.auth.rules import Access
from cairn.common.auth.tokens import token_digest
from cairn.controller.local.auth import main


def test_it_makes_the_credentials_once_with_the_admin_token_apart(tmp_path: Path) -> None:
    config_dir, admin_file = tmp_path / "config", tmp_path / "admin" / "admin.token"
    arguments = [f"--dir={config_dir}", f"--admin-token-file={admin_file}"]
    assert main(arguments) == 0
    assert sorted(p.name for p in config_dir.iterdir()) == [
        "auth.json",
        "gateway.token",
        "session.key",
    ]
    admin = admin_file.read_text(encoding="utf-8").strip()
    for path in (*config_dir.iterdir(), admin_file, config_dir, admin_file.parent):
        assert path.stat().st_mode & 0o077 == 0, path
    document = json.loads((config_dir / "auth.json").read_text(encoding="utf-8"))
    assert {"sha256": token_digest(admin), "name": "admin"} in document["tokens"]
    # What the servers read: the admin may do everything, the gateway token is a gateway's.
    config = load_auth_config(config_dir / "auth.json")
    admin_principal = config.authenticator.authenticate(admin, 0.0)
    assert config.policy.allows_namespace(admin_principal, Access.ADMIN, "*")
    gateway = (config_dir / "gateway.token").read_text(encoding="utf-8").strip()
    assert str(config.authenticator.authenticate(gateway, 0.0)) == "gateway:gateway"
    # Again (compose runs it at every `up`): nothing changes.
    before = {p.name: p.read_bytes() for p in config_dir.iterdir()}
    assert main(arguments) == 0
    assert {p.name: p.read_bytes() for p in config_dir.iterdir()} == before
    assert admin_file.read_text(encoding="utf-8").strip() == admin


def test_the_admin_token_defaults_to_beside_the_configuration(tmp_path: Path) -> None:
    assert main([f"--dir={tmp_path}"]) == 0
    assert (tmp_path / "admin.token").exists()
