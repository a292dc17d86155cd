"""Sessions over REST and their ephemeral records, used through both gateways:
a session made on one is kept alive and written through on the other."""

from __future__ import annotations

import time

import httpx
import pytest

from gateway.helpers import problem, wait_until

pytestmark = pytest.mark.e2e

SESSIONS = "/v1/namespaces/default/sessions"


def create(client: httpx.Client, **body: object) -> str:
    answer = client.post(SESSIONS, json=body)
    assert answer.status_code == 201, answer.text
    document = answer.json()
    assert answer.headers["location"] == f"{SESSIONS}/{document['session']}"
    token: str = document["session"]
    return token


def test_ephemeral_records_live_with_their_session(
    g1: httpx.Client, g2: httpx.Client, prefix: str
) -> None:
    answer = g1.post(SESSIONS, json={"timeoutMs": 10_000, "clientIdentity": "worker-1"})
    assert answer.status_code == 201
    document = answer.json()
    assert document["timeoutMs"] == 10_000 and document["clientIdentity"] == "worker-1"
    assert document["shards"] == 3
    token = document["session"]
    # Records on every shard, written through both gateways.
    keys = [f"{prefix}eph/{i}" for i in range(12)]
    for i, key in enumerate(keys):
        written = (g1, g2)[i % 2].put(
            f"/v1/namespaces/default/keys/{key}", params={"session": token}, content=b"e"
        )
        # 201, or 200 when the client library retried the put after a lost
        # answer (an unconditional put is idempotent; the retry modified it).
        assert written.status_code in (200, 201), written.text
        assert written.json()["version"]["ephemeral"] is True
    ephemeral = g2.get(f"/v1/namespaces/default/keys/{keys[0]}")
    assert ephemeral.headers["cairn-ephemeral"] == "true"
    assert int(ephemeral.headers["cairn-session-id"]) >= 0
    # The session's identity, not the gateway's.
    assert ephemeral.headers["cairn-client-identity"] == "worker-1"
    # Kept alive through the other gateway, past the timeout.
    for _ in range(3):
        assert g2.post(f"{SESSIONS}/{token}/keepalive").status_code == 204
    assert g1.get(f"/v1/namespaces/default/keys/{keys[-1]}").status_code == 200
    # Closed through the other gateway: the records go.
    closed = g2.delete(f"{SESSIONS}/{token}")
    assert closed.status_code == 204 and closed.content == b""
    for key in keys:
        problem(g1.get(f"/v1/namespaces/default/keys/{key}"), 404, "key-not-found")
    problem(g1.post(f"{SESSIONS}/{token}/keepalive"), 404, "session-expired")
    problem(g1.delete(f"{SESSIONS}/{token}"), 404, "session-expired")
    problem(
        g1.put(f"/v1/namespaces/default/keys/{keys[0]}", params={"session": token}, content=b"x"),
        404,
        "session-expired",
    )


def test_a_session_not_kept_alive_expires_with_its_records(
    g1: httpx.Client, g2: httpx.Client, prefix: str
) -> None:
    token = create(g1, timeoutMs=2_000)
    key = f"{prefix}short-lived"
    assert (
        g2.put(f"/v1/namespaces/default/keys/{key}", params={"session": token}).status_code == 201
    )
    started = time.monotonic()
    wait_until(lambda: g1.get(f"/v1/namespaces/default/keys/{key}").status_code == 404, 15)
    assert time.monotonic() - started > 1.0
    problem(g2.post(f"{SESSIONS}/{token}/keepalive"), 404, "session-expired")


def test_sequence_puts_in_a_session(g1: httpx.Client, prefix: str) -> None:
    token = create(g1)
    answer = g1.post(
        f"/v1/namespaces/default/sequences/{prefix}lock",
        params={"partition_key": prefix, "session": token},
        content=b"me",
    )
    assert answer.status_code == 201, answer.text
    key = answer.json()["key"]
    assert answer.json()["version"]["ephemeral"] is True
    assert g1.delete(f"{SESSIONS}/{token}").status_code == 204
    problem(
        g1.get(f"/v1/namespaces/default/keys/{key}", params={"partition_key": prefix}),
        404,
        "key-not-found",
    )


def test_defaults_and_validation(g1: httpx.Client) -> None:
    answer = g1.post(SESSIONS)
    assert answer.status_code == 201
    assert answer.json()["timeoutMs"] == 30_000 and answer.json()["clientIdentity"] is None
    # Without an identity of its own, its records carry the gateway's.
    token = answer.json()["session"]
    written = g1.put("/v1/namespaces/default/keys/defaults/eph", params={"session": token})
    assert written.status_code in (200, 201), written.text
    read = g1.get("/v1/namespaces/default/keys/defaults/eph")
    assert read.headers["cairn-client-identity"] == "cairn-gateway"
    assert g1.delete(f"{SESSIONS}/{token}").status_code == 204
    for body in ({"timeoutMs": 1_999}, {"timeoutMs": 300_001}, {"timeoutMs": "soon"},
                 {"clientIdentity": ""}, {"clientIdentity": "x" * 257}, [1, 2]):  # fmt: skip
        problem(g1.post(SESSIONS, json=body), 400, "invalid-argument")
    problem(
        g1.post(SESSIONS, content=b"{not json", headers={"content-type": "application/json"}),
        400,
        "invalid-argument",
    )
    problem(
        g1.post(
            SESSIONS, content=b"x" * (64 * 1024 + 1), headers={"content-type": "application/json"}
        ),
        413,
        "payload-too-large",
    )
    problem(g1.post("/v1/namespaces/nope/sessions", json={}), 404, "namespace-not-found")


def test_malformed_and_foreign_tokens(g1: httpx.Client, prefix: str) -> None:
    token = create(g1)
    try:
        # A token that is none names no session (404, like any unknown resource).
        for bad in ("garbage", token[:-3], "eJyrVipTsjJUqgUABnQB3Q"):
            problem(g1.post(f"{SESSIONS}/{bad}/keepalive"), 404, "session-expired")
            problem(g1.delete(f"{SESSIONS}/{bad}"), 404, "session-expired")
            problem(
                g1.put(f"/v1/namespaces/default/keys/{prefix}x", params={"session": bad}),
                400,
                "invalid-argument",
            )
        # A token is bound to its namespace.
        problem(
            g1.post(f"/v1/namespaces/natural/sessions/{token}/keepalive"), 404, "session-expired"
        )
        problem(
            g1.put(
                f"/v1/namespaces/natural/keys/{prefix}x", params={"session": token}, content=b""
            ),
            400,
            "invalid-argument",
        )
        # A cursor or an event id is not a session token.
        cursor = g1.get(
            "/v1/namespaces/default/keys", params={"start": "", "end": "~", "limit": 1}
        ).json()["nextCursor"]
        if cursor:
            problem(g1.post(f"{SESSIONS}/{cursor}/keepalive"), 404, "session-expired")
    finally:
        g1.delete(f"{SESSIONS}/{token}")
