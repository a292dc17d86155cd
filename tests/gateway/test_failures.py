"""The failure answers a healthy storage does not give on demand, over real
HTTP: a trimmed resume point (410), storage that does not answer (503 with
Retry-After), no storage at all, no controller, an unreachable controller; and
bearer-token auth."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from gateway.fake_storage import FakeStorage
from gateway.helpers import GatewayProcess, problem, sse, wait_until
from support.processes import StandaloneProcess

pytestmark = pytest.mark.e2e


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
def fake_storage() -> Iterator[FakeStorage]:
    storage = FakeStorage()
    storage.start()
    yield storage
    storage.stop()


@pytest.fixture
def gateway_factory() -> Iterator[type[GatewayProcess]]:
    started: list[GatewayProcess] = []

    class Started(GatewayProcess):
        def start(self, timeout_s: float = 30.0) -> str:
            started.append(self)
            return super().start(timeout_s)

    yield Started
    for gateway in started:
        gateway.stop()


def test_trimmed_resume_point_is_410(
    fake_storage: FakeStorage, gateway_factory: type[GatewayProcess]
) -> None:
    gateway = gateway_factory([fake_storage.address])
    gateway.start()
    with gateway.client() as http:
        with http.stream(
            "GET", "/v1/namespaces/default/changes", params={"max_events": 1}
        ) as answer:
            event = sse(answer).next_event()
        assert event.json()["shard"] == 0 and event.id
        document = problem(
            http.get("/v1/namespaces/default/changes", headers={"Last-Event-ID": event.id}),
            410,
            "notifications-trimmed",
        )
        assert "trimmed" in document["detail"]


def test_storage_that_does_not_answer_is_503_with_retry_after(
    fake_storage: FakeStorage, gateway_factory: type[GatewayProcess]
) -> None:
    gateway = gateway_factory([fake_storage.address], extra_args=["--request-timeout-s", "1"])
    gateway.start()
    with gateway.client() as http:
        reads_before = fake_storage.reads
        started = time.monotonic()
        answer = http.get("/v1/namespaces/default/keys/a")
        problem(answer, 503, "unavailable")
        assert answer.headers["retry-after"] == "1"
        # Retried, then answered within the request timeout and its last backoff.
        # (How long it retried is not asserted: the backoff has full jitter.)
        assert time.monotonic() - started < 10
        assert fake_storage.reads - reads_before > 1


def test_no_storage_is_503_and_not_ready(gateway_factory: type[GatewayProcess]) -> None:
    gateway = gateway_factory(
        [f"127.0.0.1:{closed_port()}"], extra_args=["--connect-timeout-s", "0.5"]
    )
    gateway.start()
    with gateway.client() as http:
        assert http.get("/livez").status_code == 200
        problem(http.get("/readyz"), 503, "unavailable")
        answer = http.get("/v1/namespaces/default/keys/a")
        problem(answer, 503, "unavailable")
        assert "retry-after" in answer.headers


def test_admin_without_a_controller(
    storage: StandaloneProcess, gateway_factory: type[GatewayProcess]
) -> None:
    gateway = gateway_factory([storage.address])
    gateway.start()
    with gateway.client() as http:
        document = problem(http.get("/v1/admin/shards"), 503, "controller-unavailable")
        assert "--controller-url" in document["detail"]
        problem(
            http.put("/v1/admin/storage-pods", json={"replicas": 2}), 503, "controller-unavailable"
        )


def test_admin_with_an_unreachable_controller(
    storage: StandaloneProcess, gateway_factory: type[GatewayProcess]
) -> None:
    gateway = gateway_factory([storage.address], f"http://127.0.0.1:{closed_port()}")
    gateway.start()
    with gateway.client() as http:
        for path in ("cluster", "namespaces", "shards", "nodes", "elections"):
            answer = http.get(f"/v1/admin/{path}")
            problem(answer, 503, "controller-unavailable")
            assert answer.headers["retry-after"] == "1"


class FakeController:
    """An admin API that answers what a real controller should not (or only
    when it is not leading): the gateway must pass on problems, never garbage."""

    ANSWERS: dict[tuple[str, str], tuple[int, str, bytes]] = {
        ("GET", "/v1/cluster"): (200, "text/plain", b"not json"),
        ("GET", "/v1/shards"): (200, "application/json", b'[{"id": "zero"}]'),
        ("GET", "/v1/nodes"): (
            503,
            "application/problem+json",
            b'{"title": "Not leading", "status": 503, "detail": "not the leader (yet)"}',
        ),
        ("GET", "/v1/elections"): (500, "text/plain", b"Internal Server Error"),
        ("PUT", "/v1/storage-pods"): (
            422,
            "application/problem+json",
            b'{"title": "Invalid change", "status": 422, "detail": "pods must cover rf"}',
        ),
    }

    def __init__(self) -> None:
        answers = self.ANSWERS

        class Handler(BaseHTTPRequestHandler):
            def answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                status, kind, body = answers.get(
                    (self.command, self.path), (404, "application/json", b'{"detail": "no"}')
                )
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PUT = answer

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def test_admin_passes_on_controller_problems_never_garbage(
    storage: StandaloneProcess, gateway_factory: type[GatewayProcess]
) -> None:
    controller = FakeController()
    try:
        gateway = gateway_factory([storage.address], controller.url)
        gateway.start()
        with gateway.client() as http:
            # Not JSON, or not the documented shape: a 502, not a pass-through.
            problem(http.get("/v1/admin/cluster"), 502, "controller-error")
            document = problem(http.get("/v1/admin/shards"), 502, "controller-error")
            assert "does not fit" in document["detail"]
            problem(http.get("/v1/admin/elections"), 502, "controller-error")
            # A controller not (yet) leading.
            document = problem(http.get("/v1/admin/nodes"), 503, "controller-unavailable")
            assert "not the leader" in document["detail"]
            # A change the controller refuses.
            document = problem(
                http.put("/v1/admin/storage-pods", json={"replicas": 2}), 422, "invalid-change"
            )
            assert "pods must cover rf" in document["detail"]
            problem(http.get("/v1/admin/namespaces"), 404, "not-found")
    finally:
        controller.stop()


def test_change_feeds_are_bounded_and_release_their_slots(
    storage: StandaloneProcess, gateway_factory: type[GatewayProcess]
) -> None:
    """Two streams at most; a stream whose client leaves frees its slot at once
    (the idle stream itself would notice only at its next keep-alive, 15 s)."""
    gateway = gateway_factory([storage.address], extra_args=["--max-open-feeds", "2"])
    gateway.start()
    changes = "/v1/namespaces/default/changes"
    with gateway.client() as http:
        for read_first_event in (True, False, True):
            with contextlib.ExitStack() as streams:
                started = time.monotonic()
                # The slots of the previous round's streams come back as the
                # gateway sees their clients leave, within moments.
                first, second = wait_until(lambda: _two_streams(http, changes, streams), 10)
                assert time.monotonic() - started < 5
                # (Held in a name: a line iterator collected early would close
                # its connection.)
                reading = sse(first)
                if read_first_event:
                    reading.next_event()
                refused = http.get(changes)
                problem(refused, 503, "unavailable")
                assert refused.headers["retry-after"] == "1"
                assert second.status_code == 200


def _two_streams(
    http: httpx.Client, path: str, streams: contextlib.ExitStack
) -> tuple[httpx.Response, httpx.Response] | None:
    """Two open streams (kept open by `streams`), or None if one was refused."""
    with contextlib.ExitStack() as attempt:
        opened = [attempt.enter_context(http.stream("GET", path)) for _ in range(2)]
        if any(response.status_code != 200 for response in opened):
            return None
        streams.push(attempt.pop_all())
        return opened[0], opened[1]


@pytest.mark.parametrize("source", ["file", "env"])
def test_bearer_token_auth(
    storage: StandaloneProcess,
    gateway_factory: type[GatewayProcess],
    tmp_path: Path,
    source: str,
) -> None:
    token = "s3cret-token"
    if source == "file":
        (tmp_path / "token").write_text(token + "\n")
        gateway = gateway_factory(
            [storage.address], extra_args=["--token-file", str(tmp_path / "token")]
        )
    else:
        gateway = gateway_factory([storage.address], env={"CAIRN_GATEWAY_TOKEN": token})
    gateway.start()
    with gateway.client() as http:
        # Probes stay open.
        assert http.get("/livez").status_code == 200
        assert http.get("/readyz").status_code == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {token}"}):
            answer = http.get("/v1/namespaces/default/keys/a", headers=headers)
            problem(answer, 401, "unauthorized")
            assert answer.headers["www-authenticate"].startswith("Bearer")
        problem(http.post("/v1/namespaces/default/sessions"), 401, "unauthorized")
        problem(http.get("/v1/admin/shards"), 401, "unauthorized")
        authorized = {"Authorization": f"Bearer {token}"}
        written = http.put(
            "/v1/namespaces/default/keys/auth-test", content=b"v", headers=authorized
        )
        assert written.status_code in (200, 201)
        assert http.get("/v1/namespaces/default/keys/auth-test", headers=authorized).content == b"v"
        # The document declares the scheme and requires it everywhere but the probes.
        document = http.get("/openapi.json").json()
        schemes = document["components"]["securitySchemes"]
        assert schemes == {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": schemes["bearer"]["description"],
            }
        }
        for path, item in document["paths"].items():
            for operation in item.values():
                if path in ("/livez", "/readyz"):
                    assert "security" not in operation
                else:
                    assert operation["security"] == [{"bearer": []}], path
                    assert "401" in operation["responses"], path


def test_refuses_an_empty_token_file(tmp_path: Path, storage: StandaloneProcess) -> None:
    (tmp_path / "token").write_text("\n")
    gateway = GatewayProcess(
        [storage.address], extra_args=["--token-file", str(tmp_path / "token")]
    )
    with pytest.raises(RuntimeError, match="holds no token"):
        gateway.start()
    gateway.kill()


def test_sigterm_ends_open_streams_and_exits_cleanly(
    storage: StandaloneProcess, gateway_factory: type[GatewayProcess]
) -> None:
    gateway = gateway_factory([storage.address])
    gateway.start()
    with gateway.client() as http, http.stream("GET", "/v1/namespaces/default/changes") as answer:
        stream = sse(answer)
        stream.next_event()
        started = time.monotonic()
        assert gateway.stop(timeout_s=20) == 0
        # Well within the 5 s grace: the stream ended as the drain began,
        # rather than holding the shutdown until the grace ran out.
        assert time.monotonic() - started < 4
        stream.rest()
