"""The hot routes' fast path (fastpath.py) and the server around it: answers equal
to the routers' for the same request, the request head bounded, and
`--workers N` processes serving one port with sessions usable through any, and
an answer's head and body leaving in one write."""

from __future__ import annotations

import asyncio
import re
import select
import socket
from pathlib import Path

import httpx
import pytest

from cairn.client.records import Record, Version
from cairn.gateway.http_server import CoalescingTransport
from cairn.gateway.models import RecordModel, VersionModel, record_document, version_document
from gateway.helpers import GatewayProcess, problem, wait_until
from support.processes import StandaloneProcess

MiB = 1024 * 1024


def key_url(key: str) -> str:
    return f"/v1/namespaces/default/keys/{key}"


def test_the_documents_are_the_models_dumps() -> None:
    plain = Version(7, 0, 1, 2)
    owned = Version(8, 3, 1, 5, session_id=12, client_identity="worker-1")
    for version in (plain, owned):
        assert version_document(version) == VersionModel.of(version).model_dump()
    for record in (
        Record("/a", b"\x00value", plain),
        Record("/b", None, owned, "secondary"),
    ):
        assert record_document(record) == RecordModel.of(record).model_dump()


def _same_answer(fast: httpx.Response, routed: httpx.Response) -> None:
    def headers(response: httpx.Response) -> dict[str, str]:
        return {name: value for name, value in response.headers.items() if name != "date"}

    assert fast.status_code == routed.status_code
    assert headers(fast) == headers(routed)
    assert fast.content == routed.content


@pytest.mark.e2e
def test_fast_and_routed_answers_agree(g1: httpx.Client, prefix: str) -> None:
    """`comparison=equal` means what no comparison means, and sends the read to
    the router: both answers must be the same, byte for byte."""
    key = f"{prefix}same"
    written = g1.put(key_url(key), content=b"\x00value")
    assert written.status_code == 201, written.text
    tag = written.headers["etag"]
    for headers in ({}, {"Accept": "application/json"}, {"If-None-Match": tag}):
        fast = g1.get(key_url(key), headers=headers)
        routed = g1.get(key_url(key), params={"comparison": "equal"}, headers=headers)
        _same_answer(fast, routed)
    missing = key_url(f"{prefix}missing")
    _same_answer(g1.get(missing), g1.get(missing, params={"comparison": "equal"}))
    problem(g1.get(missing), 404, "key-not-found")
    # A conditional write at a stale version: the same problem either way
    # (`If-Match: *` is the router's, a version the fast path's).
    other_version = f'"{int(tag.strip(chr(34))) + 1000}"'
    stale = g1.put(key_url(key), content=b"v", headers={"If-Match": other_version})
    problem(stale, 412, "version-mismatch")


@pytest.mark.e2e
def test_the_request_head_is_bounded(g1: httpx.Client, prefix: str) -> None:
    # The gateway's bound is 1 MiB of request line and headers.
    near = g1.get(key_url(f"{prefix}k"), headers={"X-Padding": "p" * (MiB - 4096)})
    problem(near, 404, "key-not-found")
    with httpx.Client(base_url=str(g1.base_url), timeout=30.0) as fresh:
        over = fresh.get(key_url(f"{prefix}k"), headers={"X-Padding": "p" * (MiB + 1)})
        document = problem(over, 400, "invalid-argument")
        assert "head" in document["detail"]
        over_put = fresh.put(
            key_url(f"{prefix}k"), content=b"v", headers={"X-Padding": "p" * (MiB + 1)}
        )
        problem(over_put, 400, "invalid-argument")
    problem(g1.get(key_url(f"{prefix}k")), 404, "key-not-found")


def _worker_metrics(gateway: GatewayProcess) -> list[str]:
    pattern = re.compile(r"cairn-gateway: metrics on (\S+)")
    return [m.group(1) for line in gateway.output if (m := pattern.search(line))]


def _puts_served(metrics_url: str) -> float:
    page = httpx.get(metrics_url, timeout=10.0).text
    total = 0.0
    for line in page.splitlines():
        if (
            line.startswith("http_server_request_duration_seconds_count{")
            and 'http_request_method="PUT"' in line
            and 'http_response_status_code="201"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.e2e
def test_workers_share_the_port_and_sessions(
    storage: StandaloneProcess, tmp_path: Path, prefix: str
) -> None:
    key_file = tmp_path / "session.key"
    key_file.write_text("a secret every worker reads")
    gateway = GatewayProcess(
        [storage.address], extra_args=["--workers", "2", "--session-key-file", str(key_file)]
    )
    # Two processes start (each imports the gateway): a longer bound than one's.
    gateway.start(timeout_s=120.0)
    try:
        # Each worker serves its own metrics.
        metrics = wait_until(
            lambda: len(_worker_metrics(gateway)) == 2 and _worker_metrics(gateway)
        )
        with gateway.client() as client:
            created = client.post("/v1/namespaces/default/sessions", json={})
            assert created.status_code == 201, created.text
            token = created.json()["session"]
        written = 0

        def both_workers_served() -> bool:
            # A connection of its own per put, so that the kernel hands them to
            # either worker; every put is under the session made above.
            nonlocal written
            with gateway.client() as client:
                answer = client.put(
                    key_url(f"{prefix}w{written}"), params={"session": token}, content=b"v"
                )
            assert answer.status_code == 201, answer.text
            assert answer.json()["version"]["ephemeral"] is True
            written += 1
            return all(_puts_served(url) > 0 for url in metrics)

        wait_until(both_workers_served, timeout_s=60.0, interval_s=0.0)

        # A burst of connections, as a load generator opens them, is spread over
        # the workers rather than taken in by whichever woke first.
        before = [_puts_served(url) for url in metrics]
        _put_over_a_burst_of_connections(
            gateway.url, [key_url(f"{prefix}burst{n}") for n in range(64)]
        )
        served = [_puts_served(url) - earlier for url, earlier in zip(metrics, before, strict=True)]
        assert sum(served) == 64 and min(served) >= 8, served
    finally:
        assert gateway.stop() == 0, gateway.log_text()


def _put_over_a_burst_of_connections(url: str, paths: list[str]) -> None:
    """PUT each path over a connection of its own, every connection opened before
    any request is sent (non-blocking connects, completed by the kernel)."""
    address = httpx.URL(url)
    assert address.host and address.port
    connections = [socket.socket() for _ in paths]
    try:
        for connection in connections:
            connection.setblocking(False)
            connection.connect_ex((address.host, address.port))
        for connection, path in zip(connections, paths, strict=True):
            select.select([], [connection], [], 30.0)
            connection.setblocking(True)
            connection.settimeout(30.0)
            connection.sendall(
                f"PUT {path} HTTP/1.1\r\nHost: {address.host}\r\n"
                "Content-Type: application/octet-stream\r\nContent-Length: 1\r\n"
                "Connection: close\r\n\r\nv".encode()
            )
        for connection in connections:
            answer = b""
            while chunk := connection.recv(65536):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 201 "), answer[:200]
    finally:
        for connection in connections:
            connection.close()


class _RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0


def test_the_writes_of_one_loop_turn_leave_together() -> None:
    async def main() -> None:
        inner = _RecordingTransport()
        transport = CoalescingTransport(inner, asyncio.get_running_loop())
        transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        transport.write(b"body")
        assert inner.writes == [] and transport.get_write_buffer_size() == 23
        await asyncio.sleep(0)
        assert inner.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
        # Closing sends what is pending first.
        transport.write(b"last")
        transport.close()
        assert inner.writes[1:] == [b"last"] and inner.closed
        await asyncio.sleep(0)
        assert len(inner.writes) == 2

    asyncio.run(main())
