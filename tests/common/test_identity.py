"""The principal a certificate names: SPIFFE ids of our trust domain, else a user's CN."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from cairn.common.identity import (
    Principal,
    Role,
    asgi_peer_principal,
    grpc_peer_principal,
    principal_of_certificate,
    principal_of_spiffe_id,
)


def certificate(common_name: str | None, uris: list[str]) -> x509.Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, common_name)] if common_name else []
    )
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test ca")]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if uris:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(u) for u in uris]),
            critical=False,
        )
    return builder.sign(key, hashes.SHA256())


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def test_a_component_is_named_by_its_spiffe_id() -> None:
    cert = certificate("pod-0", ["spiffe://cairn/storage/pod-0"])
    assert principal_of_certificate(cert) == Principal(Role.STORAGE, "pod-0")


def test_a_spiffe_id_of_another_trust_domain_names_nobody() -> None:
    cert = certificate("controller", ["spiffe://other/controller/controller"])
    assert principal_of_certificate(cert) is None
    assert principal_of_certificate(cert, "other") == Principal(Role.CONTROLLER, "controller")


def test_two_spiffe_ids_are_ambiguous_and_name_nobody() -> None:
    cert = certificate(None, ["spiffe://cairn/storage/a", "spiffe://cairn/controller/b"])
    assert principal_of_certificate(cert) is None


@pytest.mark.parametrize(
    "uri", ["spiffe://cairn/admin/x", "spiffe://cairn/storage/", "spiffe://cairn/storage/a/b"]
)
def test_malformed_spiffe_ids_name_nobody(uri: str) -> None:
    assert principal_of_spiffe_id(uri, "cairn") is None


def test_a_client_certificate_without_a_spiffe_id_names_a_user() -> None:
    cert = certificate("alice", ["https://example.com/alice"])
    assert principal_of_certificate(cert) == Principal(Role.USER, "alice")
    assert principal_of_certificate(certificate(None, [])) is None


def test_the_peer_principal_comes_from_grpc_and_asgi_contexts() -> None:
    cert_pem = pem(certificate("c", ["spiffe://cairn/controller/c"]))
    expected = Principal(Role.CONTROLLER, "c")
    assert grpc_peer_principal({"x509_pem_cert": [cert_pem]}) == expected
    assert grpc_peer_principal({"transport_security_type": [b"ssl"]}) is None
    scope = {"extensions": {"tls": {"client_cert_chain": [cert_pem.decode()]}}}
    assert asgi_peer_principal(scope) == expected
    assert asgi_peer_principal({"extensions": {}}) is None
    assert str(expected) == "controller:c"
    assert expected.spiffe_id() == "spiffe://cairn/controller/c"
