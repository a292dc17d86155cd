"""Helpers for the health sidecar's tests: a fake controller that collects
heartbeats, and the sidecar as a child process (`python -m cairn.health`)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from cairn.common.heartbeat import Heartbeat, parse_heartbeat
from support.processes import PipedProcess

SIDECAR_LISTENING_PREFIX = "cairn-health listening on "
# Fast timings, so that every transition takes well under a second or two.
FAST_TIMINGS = (
    "--probe-interval-ms", "100",
    "--probe-timeout-ms", "500",
    "--heartbeat-interval-ms", "100",
    "--heartbeat-timeout-ms", "500",
)  # fmt: skip


def wait_until(what: str, condition: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    """The first truthy value of `condition()`, polled until `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


# -- fake controller -----------------------------------------------------------------


@dataclass(frozen=True)
class Received:
    at_s: float
    heartbeat: Heartbeat


class FakeController:
    """Accepts POST /v1/heartbeats on 127.0.0.1 and keeps what arrives. `answer`
    is the status code it replies with (the heartbeat is recorded either way)."""

    def __init__(self, port: int = 0) -> None:
        self.received: list[Received] = []
        self.answer = 200
        self._lock = threading.Lock()
        controller = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path != "/v1/heartbeats":
                    self.send_error(404)
                    return
                heartbeat = parse_heartbeat(json.loads(body))
                with controller._lock:
                    controller.received.append(Received(time.monotonic(), heartbeat))
                    answer = controller.answer
                reply = b'{"ok": true}' if answer == 200 else b'{"error": "test"}'
                self.send_response(answer)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def heartbeats(self, node: str | None = None, since_s: float = 0.0) -> list[Heartbeat]:
        with self._lock:
            return [
                r.heartbeat
                for r in self.received
                if r.at_s >= since_s and (node is None or r.heartbeat.node == node)
            ]

    def wait_for(
        self,
        node: str,
        condition: Callable[[Heartbeat], bool] = lambda _: True,
        since_s: float = 0.0,
        timeout_s: float = 10.0,
    ) -> Heartbeat:
        """The first heartbeat of `node` received since `since_s` that satisfies
        `condition`."""

        def find() -> Heartbeat | None:
            return next((h for h in self.heartbeats(node, since_s) if condition(h)), None)

        heartbeat: Heartbeat = wait_until(f"a heartbeat of {node}", find, timeout_s)
        return heartbeat


# -- the sidecar ---------------------------------------------------------------------


class SidecarProcess(PipedProcess):
    """`python -m cairn.health` in a child process, its HTTP server on a free port."""

    def __init__(self, node_name: str, storage_internal: str, *extra: str) -> None:
        super().__init__()
        self.node_name = node_name
        self.args = (
            "--node-name", node_name, "--storage-internal", storage_internal,
            "--port", "0", "--log-level", "INFO", "--metrics-port", "0",
            *([] if "--tls-dir" in extra else ["--insecure"]), *extra,
        )  # fmt: skip
        self.url = ""

    def start(self, timeout_s: float = 30.0) -> str:
        self.spawn([sys.executable, "-m", "cairn.health", *self.args])
        line = self.wait_for(lambda text: text.startswith(SIDECAR_LISTENING_PREFIX), timeout_s)
        self.url = line[len(SIDECAR_LISTENING_PREFIX) :].strip()
        return self.url

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, timeout=5.0)
