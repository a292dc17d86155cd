"""How the `cairn` command line prints: plain text for people, JSON (lines, for
streams) for programs, notes on stderr."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any, TextIO

from cairn.client.records import Notification, NotificationBatch, Record, Version

# The command line's exit statuses (`cairn --help` lists them).
EXIT_OK = 0
EXIT_NOT_FOUND = 1
EXIT_USAGE = 2
EXIT_UNEXPECTED_VERSION = 3
EXIT_UNAVAILABLE = 4
EXIT_FAILED = 5
EXIT_INTERRUPTED = 130


class Output:
    """Where answers go (stdout) and remarks go (stderr)."""

    def __init__(self, out: TextIO, err: TextIO, as_json: bool) -> None:
        self.out = out
        self.err = err
        self.as_json = as_json

    def line(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def json(self, document: Any) -> None:
        self.line(json.dumps(document, ensure_ascii=False))

    def note(self, text: str) -> None:
        self.err.write(text + "\n")
        self.err.flush()

    def raw(self, value: bytes) -> None:
        """A value as it is; a terminal also gets a final newline."""
        self.out.flush()
        buffer = getattr(self.out, "buffer", None)
        if buffer is not None:
            buffer.write(value)
            buffer.flush()
        else:  # a text-only stream (tests): what text there is
            self.out.write(value.decode("utf-8", errors="backslashreplace"))
        if self.out.isatty() and not value.endswith(b"\n"):
            self.out.write("\n")
        self.out.flush()


def value_fields(value: bytes | None) -> dict[str, Any]:
    if value is None:
        return {}
    try:
        return {"value": value.decode("utf-8")}
    except UnicodeDecodeError:
        return {"value_base64": base64.b64encode(value).decode("ascii")}


def version_document(version: Version) -> dict[str, Any]:
    document: dict[str, Any] = {
        "version_id": version.version_id,
        "modifications_count": version.modifications_count,
        "created_timestamp_ms": version.created_timestamp_ms,
        "modified_timestamp_ms": version.modified_timestamp_ms,
    }
    if version.session_id is not None:
        document["session_id"] = version.session_id
    if version.client_identity is not None:
        document["client_identity"] = version.client_identity
    return document


def record_document(record: Record) -> dict[str, Any]:
    document: dict[str, Any] = {"key": record.key, **value_fields(record.value)}
    document["version"] = version_document(record.version)
    if record.secondary_index_key is not None:
        document["secondary_index_key"] = record.secondary_index_key
    return document


def notification_document(batch: NotificationBatch, item: Notification) -> dict[str, Any]:
    document: dict[str, Any] = {
        "shard": batch.shard,
        "offset": batch.offset,
        "timestamp_ms": batch.timestamp_ms,
        "type": item.type.name.lower(),
        "key": item.key,
    }
    if item.version_id is not None:
        document["version_id"] = item.version_id
    if item.key_range_last is not None:
        document["key_range_end"] = item.key_range_last
    return document


def notification_line(batch: NotificationBatch, item: Notification) -> str:
    text = f"shard {batch.shard} offset {batch.offset}: {item.type.name.lower()} {item.key}"
    if item.version_id is not None:
        text += f" (version {item.version_id})"
    if item.key_range_last is not None:
        text += f" .. {item.key_range_last}"
    return text


def text_of(value: bytes | None) -> str:
    """A value on one line of text: UTF-8, undecodable bytes and newlines escaped."""
    if value is None:
        return ""
    text = value.decode("utf-8", errors="backslashreplace")
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )
