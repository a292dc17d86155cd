"""cairn-audit reads the cluster from the admin API with the token it is given."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cairn.spark.jobs import audit

TOKEN = "s3cret"


class _AdminApi(BaseHTTPRequestHandler):
    """Answers the views only to the right bearer token; no shards."""

    def do_GET(self) -> None:
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.send_response(401)
            self.end_headers()
            return
        body = json.dumps([]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def admin_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AdminApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_token_file_authenticates_the_admin_api_calls(
    admin_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token_file = tmp_path / "admin.token"
    token_file.write_text(TOKEN + "\n")
    command = ["--controller", admin_url, "--insecure", "--timeout-s", "5"]
    assert audit.main([*command, "--token-file", str(token_file)]) == 0
    assert audit.main(command) == 2
    assert "answered HTTP 401" in capsys.readouterr().err
