"""TLS material in cert-manager's layout, reloaded when the files change.

A directory holds `tls.crt` (the certificate chain, leaf first), `tls.key` (its
private key) and `ca.crt` (the certificate authorities to trust for peers), as a
cert-manager `Certificate`'s secret is mounted. cert-manager renews certificates
before they expire by rewriting the secret; the kubelet swaps the mounted files
in one rename. So every consumer re-reads the files when they change:

- gRPC servers: `grpc_server_credentials`, whose certificate-configuration
  fetcher gRPC calls at each new handshake;
- gRPC clients: `ChannelCache`, whose channels are re-created when the files
  change (a channel's credentials are fixed when it is made);
- HTTP servers (uvicorn, prometheus_client) and clients (httpx): `LiveSSLContext`,
  one `ssl.SSLContext` whose certificate is replaced in place
  (`load_cert_chain` on the live context; new handshakes use it).

Changes are noticed by `os.stat` of the three files (size, mtime, inode), at
most once per `check_interval_s`. A new certificate and key that do not belong
together (a writer caught between its two writes) are not taken: the previous
pair stays in use until the files agree again.

uvicorn does not fill the ASGI TLS extension; `uvicorn_tls_options` makes it do so
(see cairn.common.tls_asgi) so that `identity.asgi_peer_principal` works.
"""

from __future__ import annotations

import argparse
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from cryptography import x509
from cryptography.hazmat.primitives import serialization

log = logging.getLogger(__name__)

CERTIFICATE_FILE = "tls.crt"
KEY_FILE = "tls.key"
CA_FILE = "ca.crt"
# How often the files' metadata is looked at, at most: rotation is rare, a
# handshake is not, so a handshake need not pay three stat calls.
DEFAULT_CHECK_INTERVAL_S = 1.0


class TlsConfigError(ValueError):
    """The TLS files are missing or do not form a usable certificate and key."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Where the PEM files are. `certificate`/`key` None: no identity of our own
    (a client that only checks the server); `ca` None: the system's roots."""

    certificate: Path | None
    key: Path | None
    ca: Path | None

    def __post_init__(self) -> None:
        if (self.certificate is None) != (self.key is None):
            raise TlsConfigError("a certificate needs its key and a key its certificate")

    @classmethod
    def in_directory(cls, directory: Path) -> TlsFiles:
        """cert-manager's layout; `tls.crt`/`tls.key` may be absent for a client."""
        certificate = directory / CERTIFICATE_FILE
        has_identity = certificate.exists() or (directory / KEY_FILE).exists()
        return cls(
            certificate if has_identity else None,
            directory / KEY_FILE if has_identity else None,
            directory / CA_FILE,
        )

    def paths(self) -> tuple[Path, ...]:
        return tuple(path for path in (self.certificate, self.key, self.ca) if path is not None)


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """One consistent reading of the files; `generation` grows at each change."""

    certificate_chain: bytes | None
    private_key: bytes | None
    ca_certificates: bytes | None
    generation: int


def _signature(paths: Sequence[Path]) -> tuple[tuple[int, int, int], ...]:
    result = []
    for path in paths:
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            result.append((-1, -1, -1))
            continue
        result.append((stat.st_ino, stat.st_size, stat.st_mtime_ns))
    return tuple(result)


def _check_pair(certificate_chain: bytes, private_key: bytes) -> None:
    """Raise TlsConfigError unless the key is the leaf certificate's."""
    try:
        leaf = x509.load_pem_x509_certificate(certificate_chain)
        key = serialization.load_pem_private_key(private_key, password=None)
    except ValueError as error:
        raise TlsConfigError(f"unreadable certificate or key: {error}") from None
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if leaf.public_key().public_bytes(der, spki) != key.public_key().public_bytes(der, spki):
        raise TlsConfigError("the key does not belong to the certificate")


def _read(files: TlsFiles, generation: int) -> TlsMaterial:
    try:
        chain = files.certificate.read_bytes() if files.certificate is not None else None
        key = files.key.read_bytes() if files.key is not None else None
        ca = files.ca.read_bytes() if files.ca is not None else None
    except OSError as error:
        raise TlsConfigError(f"cannot read TLS files: {error}") from None
    if chain is not None and key is not None:
        _check_pair(chain, key)
    if ca is not None:
        try:
            x509.load_pem_x509_certificates(ca)
        except ValueError as error:
            raise TlsConfigError(f"unreadable CA certificates: {error}") from None
    return TlsMaterial(chain, key, ca, generation)


class TlsSource:
    """The current material of one set of files, re-read when they change.

    Thread-safe: gRPC calls its fetcher from its own threads."""

    def __init__(
        self,
        files: TlsFiles,
        check_interval_s: float = DEFAULT_CHECK_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.files = files
        self._check_interval_s = check_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._signature = _signature(files.paths())
        # The first reading must succeed: a process does not start without its identity.
        self._material = _read(files, 0)
        self._checked_at = clock()

    @classmethod
    def from_directory(cls, directory: Path, **kwargs: Any) -> TlsSource:
        return cls(TlsFiles.in_directory(directory), **kwargs)

    @property
    def has_identity(self) -> bool:
        return self.files.certificate is not None

    def current(self) -> TlsMaterial:
        with self._lock:
            now = self._clock()
            if now - self._checked_at < self._check_interval_s:
                return self._material
            self._checked_at = now
            signature = _signature(self.files.paths())
            if signature == self._signature:
                return self._material
            try:
                material = _read(self.files, self._material.generation + 1)
            except TlsConfigError as error:
                # Keep the old pair; the files are looked at again next interval.
                log.warning("TLS files in %s changed but are not usable yet: %s",
                            self._where(), error)  # fmt: skip
                return self._material
            self._signature = signature
            self._material = material
            log.info("TLS files in %s reloaded (generation %d)", self._where(), material.generation)
            return material

    def _where(self) -> str:
        return ", ".join(sorted({str(path.parent) for path in self.files.paths()}))


# -- gRPC ---------------------------------------------------------------------------


def _server_configuration(material: TlsMaterial) -> Any:
    assert material.certificate_chain is not None
    assert material.private_key is not None
    return grpc.ssl_server_certificate_configuration(
        [(material.private_key, material.certificate_chain)],
        root_certificates=material.ca_certificates,
    )


def grpc_server_credentials(source: TlsSource, require_client_cert: bool) -> grpc.ServerCredentials:
    """Server credentials that follow the files. `require_client_cert`: mutual TLS,
    the peer must present a certificate the CA file vouches for (gRPC's Python API
    has no "optional client certificate": without it none is asked for)."""
    if not source.has_identity:
        raise TlsConfigError("a server needs tls.crt and tls.key")
    first = source.current()
    served = [first.generation]

    def fetch() -> Any:
        material = source.current()
        if material.generation == served[0]:
            return None  # gRPC keeps the configuration it has
        served[0] = material.generation
        return _server_configuration(material)

    return grpc.dynamic_ssl_server_credentials(
        _server_configuration(first), fetch, require_client_authentication=require_client_cert
    )


def grpc_channel_credentials(material: TlsMaterial) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=material.ca_certificates,
        private_key=material.private_key,
        certificate_chain=material.certificate_chain,
    )


def aio_channel(
    address: str, source: TlsSource | None, options: Sequence[tuple[str, Any]] = ()
) -> grpc.aio.Channel:
    """A channel with the files' current credentials, or plaintext when `source` is None."""
    if source is None:
        return grpc.aio.insecure_channel(address, options=list(options))
    credentials = grpc_channel_credentials(source.current())
    return grpc.aio.secure_channel(address, credentials, options=list(options))


class ChannelCache:
    """One aio channel per address, made again when the TLS files change (new
    connections then present the new certificate). Plaintext when `source` is None.

    A replaced channel is not closed until the cache is: its calls (a health
    watch, a replication stream) go on undisturbed on their established
    connection, and whoever calls `get` again gets the new channel. Rotations are
    rare (cert-manager renews every few weeks), so the retired channels are few."""

    def __init__(self, source: TlsSource | None, options: Sequence[tuple[str, Any]] = ()) -> None:
        self.source = source
        self._options = list(options)
        self._channels: dict[str, tuple[int, grpc.aio.Channel]] = {}
        self._retired: list[grpc.aio.Channel] = []

    def __len__(self) -> int:
        return len(self._channels)

    def get(self, address: str) -> grpc.aio.Channel:
        generation = self.source.current().generation if self.source is not None else 0
        cached = self._channels.get(address)
        if cached is not None and cached[0] == generation:
            return cached[1]
        if cached is not None:
            self._retired.append(cached[1])
        channel = aio_channel(address, self.source, self._options)
        self._channels[address] = (generation, channel)
        return channel

    async def close(self) -> None:
        channels = [channel for _, channel in self._channels.values()] + self._retired
        self._channels, self._retired = {}, []
        for channel in channels:
            await channel.close(None)


# -- ssl.SSLContext (HTTP servers and clients) ---------------------------------------


class LiveSSLContext:
    """An `ssl.SSLContext` that follows the files: `maybe_reload` loads a changed
    certificate into the same context, so a server or client holding it needs no
    restart. CA certificates can be added in place but not removed (a CA taken
    out of `ca.crt` stays trusted until the process restarts)."""

    def __init__(
        self,
        source: TlsSource,
        server: bool,
        require_client_cert: bool = False,
        context: ssl.SSLContext | None = None,
    ) -> None:
        """`context`: one made elsewhere from the same files, to keep fresh."""
        self.source = source
        self.server = server
        if context is not None:
            self.context = context
            self._generation = source.current().generation
            self._lock = threading.Lock()
            return
        if server:
            if not source.has_identity:
                raise TlsConfigError("a server needs tls.crt and tls.key")
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            # CERT_OPTIONAL still fails a handshake whose certificate does not verify.
            context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
        else:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = True
            context.verify_mode = ssl.CERT_REQUIRED
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context = context
        material = source.current()
        self._load(material)
        if material.ca_certificates is None and not server:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        self._generation = material.generation
        self._lock = threading.Lock()

    def _load(self, material: TlsMaterial) -> None:
        files = self.source.files
        if files.certificate is not None and files.key is not None:
            # From the paths: the ssl module takes no certificate bytes. A pair that
            # changed again since `material` was read fails here, and is retried.
            self.context.load_cert_chain(files.certificate, files.key)
        if material.ca_certificates is not None:
            self.context.load_verify_locations(cadata=material.ca_certificates.decode("ascii"))

    def maybe_reload(self) -> bool:
        """Load changed files into the context; True when it did."""
        material = self.source.current()
        with self._lock:
            if material.generation == self._generation:
                return False
            try:
                self._load(material)
            except (ssl.SSLError, OSError) as error:
                log.warning("TLS reload failed, keeping the previous certificate: %s", error)
                return False
            self._generation = material.generation
            return True

    async def keep_fresh(self, interval_s: float = DEFAULT_CHECK_INTERVAL_S) -> None:
        """Reload in the event loop's thread (where its handshakes run) until cancelled."""
        import asyncio

        while True:
            await asyncio.sleep(interval_s)
            self.maybe_reload()

    def keep_fresh_in_thread(self, interval_s: float = DEFAULT_CHECK_INTERVAL_S) -> None:
        """For threaded servers (prometheus_client): a daemon thread reloads."""

        def loop() -> None:
            while True:
                time.sleep(interval_s)
                self.maybe_reload()

        threading.Thread(target=loop, name="tls-reload", daemon=True).start()

    async def httpx_request_hook(self, request: Any) -> None:
        """An httpx `event_hooks["request"]` entry: new connections use changed files."""
        self.maybe_reload()


def server_ssl_context(directory: Path | None, require_client_cert: bool) -> LiveSSLContext | None:
    if directory is None:
        return None
    return LiveSSLContext(TlsSource.from_directory(directory), True, require_client_cert)


def client_ssl_context(directory: Path | None) -> LiveSSLContext | None:
    if directory is None:
        return None
    return LiveSSLContext(TlsSource.from_directory(directory), False)


def add_transport_arguments(
    parser: argparse.ArgumentParser,
    insecure_help: str = "plaintext everywhere (development only)",
    tls_dir_help: str = "",
) -> None:
    """`--tls-dir DIR` or `--insecure`, one of them required: no program falls back
    to plaintext silently. The help texts say what each means for that program."""
    security = parser.add_mutually_exclusive_group(required=True)
    security.add_argument(
        "--tls-dir",
        type=Path,
        default=None,
        help="certificate directory (tls.crt, tls.key, ca.crt; reloaded when they change)"
        + tls_dir_help,
    )
    security.add_argument("--insecure", action="store_true", help=insecure_help)
