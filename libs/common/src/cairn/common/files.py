"""Small durable-file helpers shared by every component's metadata files."""

from __future__ import annotations

import os
from pathlib import Path

TEMP_SUFFIX = ".tmp"


def fsync_directory(directory: Path) -> None:
    """Make creations/deletions of entries in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path(path: Path) -> Path:
    """Where `write_atomically` stages `path` (a crash may leave it behind)."""
    return path.with_name(path.name + TEMP_SUFFIX)


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` with `text` durably: a crash leaves the old file or the new
    one, never a mix (temp file, fsync, rename, fsync of the directory)."""
    temporary = temp_path(path)
    with temporary.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(path)
    fsync_directory(path.parent)
