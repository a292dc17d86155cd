"""Helpers for the health sidecar's tests: a fake controller that collects
heartbeats, and the sidecar as a child process (`python -m cairn.health`)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from cairn.common.heartbeat import Heartbeat, parse_heartbeat

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


class SidecarProcess:
    """`python -m cairn.health` in a child process, its HTTP server on a free port."""

    def __init__(self, node_name: str, storage_internal: str, *extra: str) -> None:
        self.node_name = node_name
        self.args = (
            "--node-name", node_name, "--storage-internal", storage_internal,
            "--port", "0", "--log-level", "INFO", *extra,
        )  # fmt: skip
        self.process: subprocess.Popen[str] | None = None
        self.url = ""
        self.output: list[str] = []
        self._pump: threading.Thread | None = None

    def start(self, timeout_s: float = 30.0) -> str:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cairn.health", *self.args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        stdout = self.process.stdout
        assert stdout is not None
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            with stdout:
                for line in stdout:
                    self.output.append(line)
                    lines.put(line)
            lines.put(None)

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise TimeoutError("sidecar did not start:\n" + self.log_text()) from None
            if line is None:
                raise RuntimeError("sidecar exited before listening:\n" + self.log_text())
            if line.startswith(SIDECAR_LISTENING_PREFIX):
                self.url = line[len(SIDECAR_LISTENING_PREFIX) :].strip()
                return self.url

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, timeout=5.0)

    def log_text(self) -> str:
        return "".join(self.output)

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM; the exit status."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout_s)
        finally:
            self.kill()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        if self._pump is not None:
            self._pump.join(timeout=30)
            self._pump = None
