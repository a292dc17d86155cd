"""`python -m cairn.common.certs`: what compose's one-shot certs service runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cryptography import x509

from cairn.common.certs import Request, main
from cairn.common.identity import Principal, Role, principal_of_pem


def _names(path: Path) -> tuple[list[str], list[str]]:
    certificate = x509.load_pem_x509_certificate(path.read_bytes())
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dns = names.get_values_for_type(x509.DNSName)
    addresses = [str(address) for address in names.get_values_for_type(x509.IPAddress)]
    return dns, addresses


def test_it_issues_each_requested_certificate_once(tmp_path: Path) -> None:
    arguments = [
        f"--dir={tmp_path}",
        "pod=storage/cairn-storage-0@cairn-storage-0,localhost,127.0.0.1",
        "client=user/alice",
    ]
    assert main(arguments) == 0
    pod = (tmp_path / "pod" / "tls.crt").read_bytes()
    assert principal_of_pem(pod) == Principal(Role.STORAGE, "cairn-storage-0")
    assert _names(tmp_path / "pod" / "tls.crt") == (["cairn-storage-0", "localhost"], ["127.0.0.1"])
    assert principal_of_pem((tmp_path / "client" / "tls.crt").read_bytes()) == Principal(
        Role.USER, "alice"
    )
    assert (tmp_path / "pod" / "ca.crt").read_bytes() == (tmp_path / "ca" / "ca.crt").read_bytes()
    # Again (compose runs it at every `up`): nothing changes.
    assert main(arguments) == 0
    assert (tmp_path / "pod" / "tls.crt").read_bytes() == pod


@pytest.mark.parametrize(
    "text",
    ["pod", "pod=storage", "pod=nobody/x", "a/b=storage/x", "pod=storage/a/b", "c=user/bob@host"],
)
def test_a_malformed_request_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(text))):
        Request.parse(text)
