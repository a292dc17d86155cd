"""When the certificates of a TLS directory expire, for the expiry gauge a scrape reads.

cert-manager renews a certificate at 2/3 of its lifetime and rewrites the files in
place; a process reloads them (`cairn.common.tls`). If renewal keeps failing, the
files' notAfter is what tells an operator in time. A scrape calls `expiries()`
on the endpoint's thread, so parsing is cached by each file's stat signature
(inode, size, mtime): an unchanged file is never parsed twice, a rewritten one is
parsed at the next scrape.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from cairn.common.tls import CA_FILE, CERTIFICATE_FILE

log = logging.getLogger(__name__)

# (inode, size, mtime_ns); None when the file cannot be stat'ed.
_Signature = tuple[int, int, int] | None


@dataclass
class _Cached:
    signature: _Signature
    not_after_s: float | None  # None: unreadable or not a certificate


def _signature(path: Path) -> _Signature:
    try:
        stat = os.stat(path)  # follows cert-manager's ..data symlinks to the real file
    except OSError:
        return None
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)


def not_after_s(pem: bytes) -> float:
    """The earliest notAfter (Unix time) of the PEM certificates in `pem`.

    For `tls.crt` that is the leaf's (or an intermediate's if it expires first);
    for a `ca.crt` bundle, the first authority whose expiry breaks trust."""
    certificates = x509.load_pem_x509_certificates(pem)
    return min(c.not_valid_after_utc.timestamp() for c in certificates)


class CertificateExpiry:
    """The notAfter of each certificate file of a TLS directory, parsed on change."""

    def __init__(self, directory: Path, files: Sequence[str] = (CERTIFICATE_FILE, CA_FILE)) -> None:
        self.directory = directory
        self.files = tuple(files)
        # A scrape and an OTLP export may collect at once, each on its own thread.
        self._lock = threading.Lock()
        self._cache: dict[str, _Cached] = {}

    def expiries(self) -> dict[str, float]:
        """File name -> notAfter as Unix time, for the files that parse now."""
        with self._lock:
            return {
                name: value for name in self.files if (value := self._not_after(name)) is not None
            }

    def _not_after(self, name: str) -> float | None:
        path = self.directory / name
        signature = _signature(path)
        cached = self._cache.get(name)
        if cached is not None and cached.signature == signature:
            return cached.not_after_s
        value: float | None = None
        if signature is None:
            log.warning("no expiry for %s: cannot read it", path)
        else:
            try:
                value = not_after_s(path.read_bytes())
            except (OSError, ValueError) as error:
                # A file half-written by a rotation reads as unparseable: the next
                # scrape, seeing a new signature, tries again.
                log.warning("no expiry for %s: %s", path, error)
        # Cached either way, so a bad file is logged once per change, not per scrape.
        self._cache[name] = _Cached(signature, value)
        return value
