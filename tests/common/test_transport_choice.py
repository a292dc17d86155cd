"""Every program chooses its transport explicitly: `--tls-dir` or `--insecure`,
never a silent plaintext default (issue 39)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from cairn.client.cli import build_parser, tls_files
from cairn.common.tls import TlsFiles
from cairn.storage.__main__ import main as storage_main


@pytest.mark.parametrize(
    "argv",
    [
        ["node", "--data-dir", "d"],
        ["standalone", "--data-dir", "d"],
        ["node", "--data-dir", "d", "--insecure", "--tls-dir", "certs"],
        ["node", "--data-dir", "d", "--insecure", "--public-plaintext"],
    ],
)
def test_a_storage_pod_without_a_transport_choice_does_not_start(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        storage_main(argv)
    assert exit_info.value.code == 2
    assert "--insecure" in capsys.readouterr().err


def _cli(*argv: str) -> argparse.Namespace:
    return build_parser({}).parse_args([*argv, "get", "/k"])


def test_the_cli_speaks_plaintext_only_without_tls_options() -> None:
    assert tls_files(_cli()) is None


def test_the_cli_takes_a_directory_or_single_files(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("")
    assert tls_files(_cli("--tls-dir", str(tmp_path))) == TlsFiles(None, None, tmp_path / "ca.crt")
    files = tls_files(_cli("--tls-ca", "ca.pem", "--tls-cert", "c.pem", "--tls-key", "k.pem"))
    assert files == TlsFiles(Path("c.pem"), Path("k.pem"), Path("ca.pem"))
    with pytest.raises(SystemExit):
        tls_files(_cli("--tls-cert", "c.pem"))  # a certificate without its key
    with pytest.raises(SystemExit):
        tls_files(_cli("--tls-dir", str(tmp_path), "--tls-ca", "ca.pem"))
