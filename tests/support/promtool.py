"""`promtool check metrics` for the tests that scrape `/metrics` endpoints.

promtool comes with Debian's `prometheus` package. When it is not on PATH and this
runs as root with apt-get (as CI does), it is installed; otherwise the test fails
with what to do: a missing checker must never pass for a checked endpoint.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import urllib.request
from pathlib import Path

import pytest

INSTALL_TIMEOUT_S = 600.0
_found: str | None = None


def _apt_install() -> str:
    """Install `prometheus` with apt-get; the reason when that cannot be done."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "not root with apt-get, so it cannot be installed here"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "prometheus"]
    for command in (install, ["apt-get", "update", "-q"], install):
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S
        )
        if done.returncode == 0 and command is install and shutil.which("promtool"):
            return ""
    return f"apt-get could not install prometheus: {done.stderr.strip()[-500:]}"


def promtool() -> str:
    """The promtool executable; installs it if it can, else fails the test."""
    global _found
    if _found is None:
        path = shutil.which("promtool")
        if path is None:
            problem = _apt_install()
            path = shutil.which("promtool")
            if path is None:
                pytest.fail(
                    "promtool (Debian package prometheus) is needed to check /metrics "
                    f"endpoints and was not found: {problem}"
                )
        _found = path
    return _found


def scrape(address: str, timeout_s: float = 10.0, ca_file: Path | None = None) -> str:
    """The text of `http://address/metrics`; of `https://address/metrics`, the
    server checked against `ca_file`, when given."""
    if ca_file is None:
        url, context = f"http://{address}/metrics", None
    else:
        url, context = f"https://{address}/metrics", ssl.create_default_context(cafile=ca_file)
    with urllib.request.urlopen(url, timeout=timeout_s, context=context) as response:
        body: bytes = response.read()
        return body.decode()


def check_metrics(text: str) -> None:
    """Fails the test unless `promtool check metrics` accepts `text` (lint included)."""
    done = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"promtool check metrics: {done.stdout}{done.stderr}"


def samples(text: str, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """The samples of metric `name` in exposition `text`, by label set."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[frozenset[tuple[str, str]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[frozenset(sample.labels.items())] = sample.value
    return found
