"""The certificate expiry gauge: a scrape of a Telemetry with a TLS directory shows
each file's notAfter, follows a rotation, and leaves out a file it cannot read."""

from __future__ import annotations

import datetime
import logging
import time
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from cairn.common.certificate_expiry import CertificateExpiry
from cairn.common.certs import CertificateAuthority
from cairn.common.identity import Principal, Role
from cairn.common.telemetry import Telemetry
from support.promtool import check_metrics, samples

POD = Principal(Role.STORAGE, "storage-0")
METRIC = "cairn_tls_certificate_expiry_seconds"
# Issued certificates are stamped from the clock at issue: allow for the test's run time.
SLACK_S = 60.0


def _expiries(telemetry: Telemetry) -> dict[str, float]:
    text = generate_latest(telemetry.registry).decode()
    check_metrics(text)
    return {dict(labels)["certificate"]: value for labels, value in samples(text, METRIC).items()}


def _issue(authority: CertificateAuthority, directory: Path, days: int) -> float:
    """Issues a certificate valid for `days`; returns the notAfter it should have."""
    issued_at = time.time()
    authority.issue_component(POD, directory, validity=datetime.timedelta(days=days))
    return issued_at + days * 86400


def test_scrape_shows_expiry_and_follows_rotation(tmp_path: Path) -> None:
    authority = CertificateAuthority.create()
    expected = _issue(authority, tmp_path, days=30)
    telemetry = Telemetry("cairn-test", "pod-0", tls_dir=tmp_path)
    try:
        found = _expiries(telemetry)
        assert set(found) == {"tls.crt", "ca.crt"}
        # X.509 times have whole seconds: the value is within a second of issue + 30 days.
        assert expected - 1 <= found["tls.crt"] <= expected + SLACK_S
        ca_expiry = authority.certificate.not_valid_after_utc.timestamp()
        assert found["ca.crt"] == ca_expiry

        rotated = _issue(authority, tmp_path, days=90)
        found = _expiries(telemetry)
        assert rotated - 1 <= found["tls.crt"] <= rotated + SLACK_S
        assert found["ca.crt"] == ca_expiry
    finally:
        telemetry.shutdown()


def test_missing_file_gives_no_series_and_logs_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    authority = CertificateAuthority.create()
    _issue(authority, tmp_path, days=30)
    (tmp_path / "tls.crt").unlink()
    telemetry = Telemetry("cairn-test", tls_dir=tmp_path)
    try:
        with caplog.at_level(logging.WARNING, logger="cairn.common.certificate_expiry"):
            assert set(_expiries(telemetry)) == {"ca.crt"}
            assert set(_expiries(telemetry)) == {"ca.crt"}
        assert len([r for r in caplog.records if "tls.crt" in r.getMessage()]) == 1
    finally:
        telemetry.shutdown()


def test_no_tls_dir_no_series() -> None:
    telemetry = Telemetry("cairn-test")
    try:
        assert _expiries(telemetry) == {}
    finally:
        telemetry.shutdown()


def test_unparseable_file_is_skipped_then_read_once_fixed(tmp_path: Path) -> None:
    authority = CertificateAuthority.create()
    _issue(authority, tmp_path, days=30)
    good = (tmp_path / "tls.crt").read_bytes()
    (tmp_path / "tls.crt").write_bytes(b"not a certificate")
    expiry = CertificateExpiry(tmp_path)
    assert set(expiry.expiries()) == {"ca.crt"}
    (tmp_path / "tls.crt").write_bytes(good + b"\n")  # a new size: a new signature
    assert set(expiry.expiries()) == {"tls.crt", "ca.crt"}
