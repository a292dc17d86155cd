"""TLS for the benchmark's spawned servers and pods, and for its own channels.

`cairn-bench --tls` makes a throwaway CA for the run: a spawned standalone
server serves TLS; spawned pods serve mutual TLS on their internal ports and
TLS on their client ports (`--tls internal`: client ports in plaintext, so only
the pod-to-pod and coordination traffic pays for TLS). The benchmark dials with
a controller certificate, which the pods accept for coordination.
`--tls-dir DIR` instead dials a running server (`--address`) with DIR's CA
(and client certificate, if there is one).

The choice is process-wide (one benchmark run, one transport), so the load
loops ask this module for their channels instead of threading it through.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from cairn.common.certs import CertificateAuthority
from cairn.common.identity import Principal, Role
from cairn.common.tls import TlsFiles, TlsSource, grpc_channel_credentials

TLS_MODES = ("all", "internal")


@dataclass
class _Transport:
    public: grpc.ChannelCredentials | None = None
    internal: grpc.ChannelCredentials | None = None
    authority: CertificateAuthority | None = None
    root: Path | None = None
    public_plaintext: bool = False


_transport = _Transport()


def enable_spawned_tls(mode: str) -> Path:
    """A CA for this run's spawned processes; the benchmark's own certificate."""
    assert mode in TLS_MODES, mode
    root = Path(tempfile.mkdtemp(prefix="cairn-bench-tls-"))
    authority = CertificateAuthority.create_or_load(root / "ca")
    mine = authority.issue_component(Principal(Role.CONTROLLER, "bench"), root / "bench")
    credentials = grpc_channel_credentials(TlsSource.from_directory(mine).current())
    _transport.internal = credentials
    _transport.public_plaintext = mode == "internal"
    _transport.public = None if _transport.public_plaintext else credentials
    _transport.authority = authority
    _transport.root = root
    return root


def enable_client_tls(directory: Path) -> None:
    """Dial a running server with `directory`'s CA (and certificate, if any)."""
    credentials = grpc_channel_credentials(TlsSource(TlsFiles.in_directory(directory)).current())
    _transport.public = _transport.internal = credentials


def spawned_args(name: str, standalone: bool = False) -> list[str]:
    """Command-line arguments for a spawned pod (or standalone server) named `name`."""
    if _transport.authority is None or _transport.root is None:
        return []
    if standalone and _transport.public_plaintext:
        return []  # a standalone server has no internal port to secure
    directory = _transport.root / name
    if not (directory / "tls.crt").exists():
        _transport.authority.issue_component(Principal(Role.STORAGE, name), directory)
    plaintext = ["--public-plaintext"] if _transport.public_plaintext else []
    return ["--tls-dir", str(directory), *plaintext]


def describe() -> str:
    if _transport.internal is None and _transport.public is None:
        return "plaintext"
    if _transport.public is None:
        return "internal mTLS, client port plaintext"
    return "TLS" if _transport.authority is None else "TLS, internal mTLS"


def channel(
    address: str, options: Sequence[tuple[str, Any]] = (), internal: bool = False
) -> grpc.aio.Channel:
    credentials = _transport.internal if internal else _transport.public
    if credentials is None:
        return grpc.aio.insecure_channel(address, options=list(options))
    return grpc.aio.secure_channel(address, credentials, options=list(options))
