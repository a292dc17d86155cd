"""Real gateway and cluster processes for the gateway's end-to-end tests, and
small HTTP helpers (a Server-Sent Events reader, waiting)."""

from __future__ import annotations

import json
import re
import ssl
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

import httpx

from support.processes import PipedProcess, auth_args

GATEWAY_LISTENING = "cairn-gateway: listening on "


class GatewayProcess(PipedProcess):
    """`cairn-gateway` on an ephemeral port."""

    def __init__(
        self,
        storage: Sequence[str],
        controller_url: str | None = None,
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.storage = list(storage)
        self.controller_url = controller_url
        self.extra_args = list(extra_args)
        self.env = env
        self.url = ""

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "cairn.gateway",
            "--address", ",".join(self.storage), "--port", "0", "--log-level", "WARNING",
            "--metrics-port", "0",
            *([] if "--tls-dir" in self.extra_args else ["--insecure"]),
            *(["--controller-url", self.controller_url] if self.controller_url else []),
            *auth_args(self.extra_args),
            *self.extra_args,
        ]  # fmt: skip

    def start(self, timeout_s: float = 30.0) -> str:
        self.spawn(self.command(), self.env)
        line = self.wait_for(lambda text: text.startswith(GATEWAY_LISTENING), timeout_s)
        self.url = line[len(GATEWAY_LISTENING) :].strip()
        return self.url

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30.0, **kwargs)


@dataclass
class Banner:
    client_address: str = ""
    admin_url: str = ""
    gateway_url: str = ""
    addresses: list[str] = field(default_factory=list)


class LocalClusterProcess(PipedProcess):
    """`cairn-local` (the launcher) in a child process, on free ports, with
    failure detection tuned for a test machine; in plaintext (`--insecure`) unless
    `tls`, when it runs as `./dev run` does: its local CA and a certificate per
    process, and TLS on every port, /metrics too."""

    CONTROLLER_ARGS = (
        "--heartbeat-timeout-ms=1000",
        "--status-interval-ms=500",
        "--replace-after-ms=60000",
        "--rebalance-after-ms=2000",
        "--startup-grace-ms=1500",
    )
    SIDECAR_ARGS = (
        "--probe-interval-ms=100",
        "--probe-timeout-ms=300",
        "--heartbeat-interval-ms=200",
        "--heartbeat-timeout-ms=500",
    )

    def __init__(
        self, directory: Path, pods: int = 3, shards: int = 3, auth: bool = False, tls: bool = False
    ) -> None:
        super().__init__()
        self.auth = auth
        self.directory = directory
        self.pods = pods
        self.shards = shards
        self.tls = tls
        self.banner = Banner()

    @property
    def client_tls_dir(self) -> Path:
        """The launcher's certificates for clients: the local CA's `ca.crt`, and the
        user certificate `tls.crt`/`tls.key` (made on the first start with `tls`)."""
        assert self.tls, "a cluster started with --insecure has no certificates"
        return self.directory / "tls" / "client"

    @property
    def ca_file(self) -> Path:
        return self.client_tls_dir / "ca.crt"

    def client_ssl_context(self) -> ssl.SSLContext:
        """Checks a server by the local CA and presents the user certificate."""
        context = ssl.create_default_context(cafile=self.ca_file)
        context.load_cert_chain(self.client_tls_dir / "tls.crt", self.client_tls_dir / "tls.key")
        return context

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "cairn.controller.local",
            "--dir", str(self.directory), "--free-ports", "--log-level", "WARNING",
            *([] if self.tls else ["--insecure"]),
            "--pods", str(self.pods), "--shards", str(self.shards),
            *(f"--controller-arg={arg}" for arg in self.CONTROLLER_ARGS),
            *(f"--sidecar-arg={arg}" for arg in self.SIDECAR_ARGS),
            *([] if self.auth else ["--no-auth"]),
        ]  # fmt: skip

    def start(self, timeout_s: float = 120.0) -> Banner:
        self.spawn(self.command())
        self.wait_for(lambda text: text.startswith("Ctrl-C stops it"), timeout_s)
        text = "".join(self.output)
        banner = Banner()
        match = re.search(
            r"client address:\s+(\S+)\s+\(any pod serves the shard map: ([^)]*)\)", text
        )
        assert match, text
        banner.client_address = match.group(1)
        banner.addresses = [a.strip() for a in match.group(2).split(",")]
        match = re.search(r"admin API:\s+(\S+)\s+\(docs: \S+/docs\)", text)
        assert match, text
        banner.admin_url = match.group(1)
        match = re.search(r"gateway:\s+(\S+)\s+\(docs: (\S+)\)", text)
        assert match, text
        banner.gateway_url = match.group(1)
        assert match.group(2) == f"{banner.gateway_url}/docs"
        self.banner = banner
        return banner

    def processes(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads((self.directory / "processes.json").read_text())
        return document


def wait_until(
    predicate: Callable[[], Any], timeout_s: float = 30.0, interval_s: float = 0.1
) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(interval_s)


@dataclass
class SseEvent:
    id: str | None
    data: str
    event: str = "message"

    def json(self) -> Any:
        return json.loads(self.data)


@dataclass
class SseStream:
    """Reads a text/event-stream response: events, comments, the retry field."""

    lines: Iterator[str]
    comments: list[str] = field(default_factory=list)
    retry_ms: int | None = None

    def next_event(self) -> SseEvent:
        event_id: str | None = None
        data: list[str] = []
        kind = "message"
        for line in self.lines:
            if line == "":
                if data:
                    return SseEvent(event_id, "\n".join(data), kind)
                continue
            if line.startswith(":"):
                self.comments.append(line[1:].strip())
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "id":
                event_id = value
            elif name == "data":
                data.append(value)
            elif name == "event":
                kind = value
            elif name == "retry":
                self.retry_ms = int(value)
        raise EOFError("the stream ended")

    def rest(self) -> list[SseEvent]:
        """Every event until the stream ends."""
        events = []
        while True:
            try:
                events.append(self.next_event())
            except EOFError:
                return events

    def events_until(self, predicate: Callable[[SseEvent], bool]) -> list[SseEvent]:
        """Events up to and including the first that satisfies `predicate`."""
        events = []
        while True:
            event = self.next_event()
            events.append(event)
            if predicate(event):
                return events


def sse(response: httpx.Response) -> SseStream:
    assert response.headers["content-type"].startswith("text/event-stream"), response.headers
    return SseStream(response.iter_lines())


def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """Asserts an RFC 9457 problem document with this status and code."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"] == "application/problem+json", response.headers
    document: dict[str, Any] = response.json()
    assert document["status"] == status
    assert document["code"] == code, document
    assert document["type"] == "about:blank"
    assert document["title"] == HTTPStatus(status).phrase and document["detail"]
    return document
