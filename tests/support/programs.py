"""Each Cairn program's own command-line parser, by image name: the manifests'
and the compose file's arguments are read as the programs would read them (a
misspelt or removed flag exits with status 2, which fails the test)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from cairn.controller.__main__ import _parser as controller_parser
from cairn.gateway.__main__ import _parser as gateway_parser
from cairn.health.settings import parse_settings
from cairn.storage.__main__ import _parser as storage_parsers


def _storage(args: list[str]) -> argparse.Namespace:
    return storage_parsers()[0].parse_args(args)


def _health(args: list[str]) -> argparse.Namespace:
    settings = parse_settings(args)
    return argparse.Namespace(**vars(settings))


PARSERS: dict[str, Callable[[list[str]], argparse.Namespace]] = {
    "cairn/storage": _storage,
    "cairn/controller": lambda args: controller_parser().parse_args(args),
    "cairn/gateway": lambda args: gateway_parser().parse_args(args),
    "cairn/health": _health,
}


def image_name(image: str) -> str:
    """`cairn/storage:0.1.0` -> `cairn/storage`."""
    return image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image


def parse(image: str, args: list[str]) -> argparse.Namespace:
    return PARSERS[image_name(image)](args)
