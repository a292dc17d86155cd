"""The command-line choice every server makes: `--auth-config FILE` or
`--no-auth`, one of them required. There is no default, so that a process
never runs open because a flag was forgotten; the choice is printed at start."""

from __future__ import annotations

import argparse
from pathlib import Path

from cairn.common.auth.config import AuthConfig, AuthConfigError, disabled, load_auth_config

AUTH_OFF_LINE = "authentication and authorization are OFF (--no-auth): every caller may do anything"


def add_auth_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument(
        "--auth-config",
        type=Path,
        default=None,
        metavar="FILE",
        help="tokens, JWT issuers and authorization rules (JSON; see the README)",
    )
    group.add_argument(
        "--no-auth",
        action="store_true",
        help="accept every caller without credentials and allow everything",
    )


def auth_config_from(args: argparse.Namespace, program: str) -> AuthConfig:
    if args.no_auth:
        print(f"{program}: {AUTH_OFF_LINE}", flush=True)
        return disabled()
    try:
        config = load_auth_config(args.auth_config)
    except AuthConfigError as error:
        raise SystemExit(f"{program}: {error}") from None
    state = "on" if config.enabled else "OFF (the file says enabled: false)"
    print(f"{program}: authentication and authorization {state} ({args.auth_config})", flush=True)
    return config
