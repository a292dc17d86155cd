"""A local certificate authority, for the embedded default and for tests.

Production clusters get their certificates from cert-manager; a cluster run as
plain processes (`cairn-local`) makes its own CA with this module and issues
every component a certificate in the same layout (`tls.crt`, `tls.key`,
`ca.crt`), so the same code paths serve both. Everything cryptographic is done
by `cryptography`: keys are ECDSA P-256 (cheap handshakes), signatures SHA-256.

A component certificate is good for both ends of a connection (serverAuth and
clientAuth): a storage pod serves its peers and also dials them. It names the
component by a SPIFFE URI (`identity.Principal.spiffe_id`), and the host by DNS
and IP subject alternative names, which clients check against the address they
dialed. A user certificate names its holder by common name, clientAuth only.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from cairn.common.files import write_atomically
from cairn.common.identity import DEFAULT_TRUST_DOMAIN, Principal, Role
from cairn.common.tls import CA_FILE, CERTIFICATE_FILE, KEY_FILE

CA_KEY_FILE = "ca.key"
CA_VALIDITY_DAYS = 3650
CERTIFICATE_VALIDITY_DAYS = 365
# Issued a little in the past: a peer whose clock is slightly behind accepts it.
BACKDATE = datetime.timedelta(minutes=5)
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _certificate_pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def _write_private(path: Path, data: bytes) -> None:
    """A key file readable by its owner only, written whole or not at all."""
    temporary = path.with_name(path.name + ".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def _subject_names(hosts: Iterable[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


@dataclass(frozen=True)
class CertificateAuthority:
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def certificate_pem(self) -> bytes:
        return _certificate_pem(self.certificate)

    @classmethod
    def create(cls, common_name: str = "Cairn local CA") -> CertificateAuthority:
        key = _new_key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + datetime.timedelta(days=CA_VALIDITY_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        return cls(certificate, key)

    @classmethod
    def create_or_load(
        cls, directory: Path, common_name: str = "Cairn local CA"
    ) -> CertificateAuthority:
        """The CA kept in `directory` (`ca.crt`, `ca.key`), made on first use."""
        certificate_path, key_path = directory / CA_FILE, directory / CA_KEY_FILE
        if certificate_path.exists() and key_path.exists():
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise ValueError(f"{key_path} is not an EC key")
            return cls(x509.load_pem_x509_certificate(certificate_path.read_bytes()), key)
        directory.mkdir(parents=True, exist_ok=True)
        authority = cls.create(common_name)
        _write_private(key_path, _key_pem(authority.key))
        write_atomically(certificate_path, authority.certificate_pem.decode("ascii"))
        return authority

    def _issue(
        self,
        subject: x509.Name,
        names: list[x509.GeneralName],
        usages: list[x509.ObjectIdentifier],
        validity: datetime.timedelta,
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=True,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), False
            )
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(self.key, hashes.SHA256()), key

    def issue_component(
        self,
        principal: Principal,
        directory: Path,
        hosts: Iterable[str] = LOCAL_HOSTS,
        trust_domain: str = DEFAULT_TRUST_DOMAIN,
        validity: datetime.timedelta = datetime.timedelta(days=CERTIFICATE_VALIDITY_DAYS),
    ) -> Path:
        """A component's certificate (server and client) written to `directory`."""
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, str(principal))])
        names: list[x509.GeneralName] = [
            x509.UniformResourceIdentifier(principal.spiffe_id(trust_domain))
        ]
        names += _subject_names(hosts)
        usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
        certificate, key = self._issue(subject, names, usages, validity)
        return self.write(directory, certificate, key)

    def issue_user(
        self,
        name: str,
        directory: Path,
        validity: datetime.timedelta = datetime.timedelta(days=CERTIFICATE_VALIDITY_DAYS),
    ) -> Path:
        """A user's client certificate (common name = the user) written to `directory`."""
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        certificate, key = self._issue(subject, [], [ExtendedKeyUsageOID.CLIENT_AUTH], validity)
        return self.write(directory, certificate, key)

    def write(
        self, directory: Path, certificate: x509.Certificate, key: ec.EllipticCurvePrivateKey
    ) -> Path:
        """cert-manager's layout. The key first, then the certificate: a reader
        that sees the new certificate finds its key already there (a reader
        between the two writes sees a mismatched pair and keeps its old one)."""
        directory.mkdir(parents=True, exist_ok=True)
        write_atomically(directory / CA_FILE, self.certificate_pem.decode("ascii"))
        _write_private(directory / KEY_FILE, _key_pem(key))
        write_atomically(
            directory / CERTIFICATE_FILE, _certificate_pem(certificate).decode("ascii")
        )
        return directory


def has_certificate(directory: Path) -> bool:
    return all((directory / name).exists() for name in (CERTIFICATE_FILE, KEY_FILE, CA_FILE))


USAGE = """python -m cairn.common.certs --dir DIR SUBDIR=ROLE/NAME[@HOST,...] ...

Makes (once) a local CA in DIR/ca and, for each argument, a certificate in
DIR/SUBDIR in cert-manager's layout (tls.crt, tls.key, ca.crt): a component's
(ROLE controller, storage, sidecar or gateway; its SPIFFE URI
spiffe://cairn/ROLE/NAME, its DNS names and addresses the HOSTs) or, for ROLE
user, a user's client certificate. A directory that already holds one is kept,
so running it again (a compose one-shot service at every `up`) changes nothing.
"""


@dataclass(frozen=True, slots=True)
class Request:
    """One certificate asked for on the command line."""

    directory: str
    principal: Principal
    hosts: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Request:
        directory, separator, rest = text.partition("=")
        identity, _, hosts = rest.partition("@")
        role_name, _, name = identity.partition("/")
        if not separator or not directory or "/" in directory or not name or "/" in name:
            raise ValueError(f"{text!r} is not SUBDIR=ROLE/NAME[@HOST,...]")
        try:
            role = Role(role_name)
        except ValueError:
            raise ValueError(f"{text!r}: no role {role_name!r}") from None
        if role is Role.USER and hosts:
            raise ValueError(f"{text!r}: a user certificate names no hosts")
        return cls(directory, Principal(role, name), tuple(h for h in hosts.split(",") if h))


def issue_requested(root: Path, requests: Iterable[Request]) -> list[Path]:
    """Issue what `requests` ask for that `root` does not hold yet; the directories issued."""
    authority = CertificateAuthority.create_or_load(root / "ca")
    issued = []
    for request in requests:
        directory = root / request.directory
        if has_certificate(directory):
            continue
        if request.principal.role is Role.USER:
            authority.issue_user(request.principal.name, directory)
        else:
            authority.issue_component(request.principal, directory, request.hosts)
        issued.append(directory)
    return issued


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="cairn-certs", usage=USAGE)
    parser.add_argument("--dir", type=Path, required=True, help="where the CA and certificates go")
    parser.add_argument("certificates", nargs="+", metavar="SUBDIR=ROLE/NAME[@HOST,...]")
    args = parser.parse_args(argv)
    try:
        requests = [Request.parse(text) for text in args.certificates]
    except ValueError as error:
        parser.error(str(error))
    for directory in issue_requested(args.dir, requests):
        print(f"cairn-certs: issued {directory}", flush=True)
    print(f"cairn-certs: certificates ready in {args.dir}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
