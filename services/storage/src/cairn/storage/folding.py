"""Answering the writers of a fold (core/folding.py) from its entry's future: the
rules of folding (when, which requests, what fits) are the core's."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from cairn.common.errors import WriteOutcomeUnknown
from cairn.storage.core.folding import responses


def settle(writers: Sequence[asyncio.Future[bytes]], logged: asyncio.Future[Any]) -> None:
    """Done-callback of a fold's entry: answer each writer from the entry's
    result, or with its failure."""
    if logged.cancelled():
        fail(writers, WriteOutcomeUnknown("the folded write's entry was abandoned"))
        return
    error = logged.exception()
    if error is not None:
        fail(writers, error)
        return
    for writer, response in zip(writers, responses(logged.result()), strict=True):
        if not writer.done():
            writer.set_result(response)


def fail(writers: Sequence[asyncio.Future[bytes]], error: BaseException) -> None:
    for writer in writers:
        if not writer.done():
            writer.set_exception(error)
