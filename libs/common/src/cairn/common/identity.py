"""Who is calling: the principal that a peer's certificate names.

Every Cairn component holds a certificate whose subject alternative names include
a SPIFFE-style URI, `spiffe://<trust domain>/<role>/<name>`, for example
`spiffe://cairn/storage/pod-0` or `spiffe://cairn/controller/controller`. The role
is what internal authorization checks (only the controller may coordinate, only
storage pods may replicate); the name is what logs and per-principal limits use.
A client certificate without such a URI names a user by its subject's common name.

A URI of another trust domain names nobody here: a certificate signed by a CA that
this cluster trusts but issued for another cluster must not pass for one of ours.
Bearer tokens name users too; they are checked elsewhere (the token is not a
transport property).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID

DEFAULT_TRUST_DOMAIN = "cairn"
SPIFFE_SCHEME = "spiffe://"


class Role(StrEnum):
    CONTROLLER = "controller"
    STORAGE = "storage"
    SIDECAR = "sidecar"
    GATEWAY = "gateway"
    USER = "user"


COMPONENT_ROLES = frozenset({Role.CONTROLLER, Role.STORAGE, Role.SIDECAR, Role.GATEWAY})


@dataclass(frozen=True, slots=True)
class Principal:
    role: Role
    name: str

    def __str__(self) -> str:
        return f"{self.role}:{self.name}"

    def spiffe_id(self, trust_domain: str = DEFAULT_TRUST_DOMAIN) -> str:
        return f"{SPIFFE_SCHEME}{trust_domain}/{self.role}/{self.name}"

    @property
    def is_component(self) -> bool:
        return self.role in COMPONENT_ROLES


def principal_of_spiffe_id(uri: str, trust_domain: str) -> Principal | None:
    """The principal `spiffe://<trust_domain>/<role>/<name>` names, else None."""
    prefix = f"{SPIFFE_SCHEME}{trust_domain}/"
    if not uri.startswith(prefix):
        return None
    role_name, _, name = uri[len(prefix) :].partition("/")
    if not name or "/" in name:
        return None
    try:
        role = Role(role_name)
    except ValueError:
        return None
    return Principal(role, name)


def principal_of_certificate(
    certificate: x509.Certificate, trust_domain: str = DEFAULT_TRUST_DOMAIN
) -> Principal | None:
    """The principal a (verified) peer certificate names, or None if it names none."""
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        uris = names.value.get_values_for_type(x509.UniformResourceIdentifier)
    except x509.ExtensionNotFound:
        uris = []
    spiffe_uris = [uri for uri in uris if uri.startswith(SPIFFE_SCHEME)]
    if spiffe_uris:
        # One identity per certificate: several SPIFFE ids are ambiguous, so none counts.
        if len(spiffe_uris) != 1:
            return None
        return principal_of_spiffe_id(spiffe_uris[0], trust_domain)
    common_names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(common_names) != 1:
        return None
    common_name = common_names[0].value
    if not isinstance(common_name, str) or not common_name:
        return None
    return Principal(Role.USER, common_name)


def principal_of_pem(pem: bytes, trust_domain: str = DEFAULT_TRUST_DOMAIN) -> Principal | None:
    return principal_of_certificate(x509.load_pem_x509_certificate(pem), trust_domain)


def grpc_peer_principal(
    auth_context: Mapping[str, Sequence[bytes]], trust_domain: str = DEFAULT_TRUST_DOMAIN
) -> Principal | None:
    """The principal of a gRPC call's verified client certificate.

    `auth_context` is `ServicerContext.auth_context()`. gRPC puts the peer's PEM
    there only once the TLS handshake verified it against the server's CA.
    """
    pems = auth_context.get("x509_pem_cert")
    if not pems:
        return None
    return principal_of_pem(pems[0], trust_domain)


def asgi_peer_principal(
    scope: Mapping[str, Any], trust_domain: str = DEFAULT_TRUST_DOMAIN
) -> Principal | None:
    """The principal of an HTTP request's verified client certificate.

    Read from the ASGI TLS extension (`scope["extensions"]["tls"]`), whose
    `client_cert_chain` lists PEM strings, the peer's own certificate first. The
    server fills it only after the handshake verified the chain.
    """
    tls = (scope.get("extensions") or {}).get("tls") or {}
    chain = tls.get("client_cert_chain") or []
    if not chain:
        return None
    first = chain[0]
    return principal_of_pem(first.encode() if isinstance(first, str) else first, trust_domain)
