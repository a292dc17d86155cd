"""Certificates for tests: a cluster CA in a temporary directory, component and
user certificates in cert-manager's layout, and gRPC credentials made of them."""

from __future__ import annotations

from pathlib import Path

import grpc

from cairn.common.certs import CertificateAuthority
from cairn.common.identity import Principal, Role


class TestCertificates:
    __test__ = False  # not a test class, whatever pytest thinks of the name

    def __init__(self, root: Path, common_name: str = "Cairn test CA") -> None:
        self.root = root
        self.authority = CertificateAuthority.create_or_load(root / "ca", common_name)

    def component(self, role: Role, name: str) -> Path:
        directory = self.root / f"{role}-{name}"
        if not (directory / "tls.crt").exists():
            self.authority.issue_component(Principal(role, name), directory)
        return directory

    def user(self, name: str) -> Path:
        directory = self.root / f"user-{name}"
        if not (directory / "tls.crt").exists():
            self.authority.issue_user(name, directory)
        return directory

    @property
    def ca_file(self) -> Path:
        return self.root / "ca" / "ca.crt"


def credentials(directory: Path, ca_file: Path | None = None) -> grpc.ChannelCredentials:
    """Mutual TLS credentials of a certificate directory (`ca_file` overrides its CA)."""
    return grpc.ssl_channel_credentials(
        root_certificates=(ca_file or directory / "ca.crt").read_bytes(),
        private_key=(directory / "tls.key").read_bytes(),
        certificate_chain=(directory / "tls.crt").read_bytes(),
    )


def server_only_credentials(ca_file: Path) -> grpc.ChannelCredentials:
    """TLS that checks the server but presents no certificate of its own."""
    return grpc.ssl_channel_credentials(root_certificates=ca_file.read_bytes())
