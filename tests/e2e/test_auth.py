"""Authentication and authorization with real processes: a standalone storage
server and a REST gateway, both reading one auth configuration (static tokens,
a JWT issuer, rules). Each attack of issue 39 on the public side is refused and
changes nothing; direct gRPC clients and the gateway are held to the same rules.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from cairn.common.auth.tokens import token_digest
from cairn.gateway.tokens import SessionToken
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc
from gateway.helpers import GatewayProcess, problem
from support.processes import StandaloneProcess

pytestmark = pytest.mark.e2e

TOKENS = {"alice": "alice-token", "bob": "bob-token", "admin": "admin-token"}
GATEWAY_TOKEN = "gateway-token"
ISSUER = "https://idp.example"
SESSION_CAP = 3
STREAM_CAP = 2


@dataclass
class Setup:
    storage: StandaloneProcess
    gateway: GatewayProcess
    idp_key: rsa.RSAPrivateKey
    session_key: bytes


def _write_config(directory: Path) -> tuple[Path, rsa.RSAPrivateKey]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (directory / "idp.pem").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    document = {
        "enabled": True,
        "tokens": [
            *({"sha256": token_digest(t), "name": n} for n, t in TOKENS.items()),
            {"sha256": token_digest(GATEWAY_TOKEN), "name": "gw", "role": "gateway"},
        ],
        "issuers": [
            {
                "issuer": ISSUER,
                "audience": "cairn",
                "algorithms": ["RS256"],
                "public_key_file": "idp.pem",
                "leeway_s": 1,
            }
        ],
        "rules": [
            {"principals": ["admin"], "access": "admin"},
            {"principals": ["alice"], "namespaces": ["a"], "access": "write"},
            {"principals": ["bob"], "namespaces": ["b"], "access": "write"},
            # Everyone a home under /users/<name>/ and a common /locks/ in `shared`.
            {
                "principals": ["*"],
                "namespaces": ["shared"],
                "prefixes": ["/users/{name}/", "/locks/"],
                "access": "write",
            },
            # What the released oxia client (no token) may use.
            {"principals": ["anonymous"], "namespaces": ["default"], "access": "write"},
        ],
    }
    path = directory / "auth.json"
    path.write_text(json.dumps(document))
    return path, key


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    directory = tmp_path_factory.mktemp("auth")
    config, key = _write_config(directory)
    session_key = b"a-test-session-key-of-enough-bytes"
    (directory / "session.key").write_bytes(session_key)
    (directory / "gateway.token").write_text(GATEWAY_TOKEN)
    storage = StandaloneProcess(
        directory / "data",
        None,
        (
            "--namespace-spec", "default:1", "--namespace-spec", "a:1",
            "--namespace-spec", "b:1", "--namespace-spec", "shared:1",
            "--auth-config", str(config),
            "--max-sessions-per-principal", str(SESSION_CAP),
            "--max-notification-streams-per-principal", str(STREAM_CAP),
            "--log-level", "WARNING",
        ),
    )  # fmt: skip
    storage.start()
    gateway = GatewayProcess(
        [storage.address],
        extra_args=[
            "--auth-config", str(config),
            "--pod-token-file", str(directory / "gateway.token"),
            "--session-key-file", str(directory / "session.key"),
        ],
    )  # fmt: skip
    try:
        gateway.start()
        yield Setup(storage, gateway, key, session_key)
    finally:
        gateway.stop()
        storage.kill()


def http(setup: Setup, who: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {TOKENS[who]}"} if who else {}
    return setup.gateway.client(headers=headers)


def metadata(who: str | None, **extra: str) -> list[tuple[str, str]]:
    found = [("authorization", f"Bearer {TOKENS[who]}")] if who else []
    return found + [(k.replace("_", "-"), v) for k, v in extra.items()]


@pytest.fixture(scope="module")
def stub(setup: Setup) -> Iterator[pb_grpc.OxiaClientStub]:
    with grpc.insecure_channel(setup.storage.address) as channel:
        yield pb_grpc.OxiaClientStub(channel)


def shard_of(stub: pb_grpc.OxiaClientStub, namespace: str) -> int:
    call = stub.GetShardAssignments(
        pb.ShardAssignmentsRequest(namespace=namespace), metadata=metadata("admin"), timeout=10
    )
    try:
        message = next(call)
    finally:
        call.cancel()
    return int(message.namespaces[namespace].assignments[0].shard)


def _complete(call: Any) -> None:
    """Make the call, reading a streamed answer to its end."""
    result = call()
    if hasattr(result, "__iter__") and not isinstance(result, (bytes, str)):
        list(result)


def refused(call: Any, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.RpcError) as caught:
        _complete(call)
    assert caught.value.code() == code, caught.value
    details: str = caught.value.details() or ""
    return details


def key_url(namespace: str, key: str) -> str:
    return f"/v1/namespaces/{namespace}/keys/{key}"


# ---- namespaces and prefixes --------------------------------------------------------


def test_a_token_for_one_namespace_cannot_touch_another(
    setup: Setup, stub: pb_grpc.OxiaClientStub
) -> None:
    with http(setup, "alice") as alice, http(setup, "bob") as bob:
        assert alice.put(key_url("a", "/k"), content=b"mine").status_code == 201
        assert bob.put(key_url("b", "/k"), content=b"bob's").status_code == 201
        problem(alice.get(key_url("b", "/k")), 403, "forbidden")
        problem(alice.put(key_url("b", "/k"), content=b"x"), 403, "forbidden")
        problem(alice.delete(key_url("b", "/k")), 403, "forbidden")
        problem(alice.get("/v1/namespaces/b/keys", params={"end": "~"}), 403, "forbidden")
        # Nothing changed.
        assert bob.get(key_url("b", "/k")).content == b"bob's"
    # The same rules for a direct gRPC client.
    b_shard = shard_of(stub, "b")
    write = pb.WriteRequest(shard=b_shard, puts=[pb.PutRequest(key="/k", value=b"x")])
    refused(
        lambda: stub.Write(write, metadata=metadata("alice")), grpc.StatusCode.PERMISSION_DENIED
    )
    read = pb.ReadRequest(shard=b_shard, gets=[pb.GetRequest(key="/k", include_value=True)])
    refused(lambda: stub.Read(read, metadata=metadata("alice")), grpc.StatusCode.PERMISSION_DENIED)
    refused(
        lambda: stub.GetShardAssignments(
            pb.ShardAssignmentsRequest(namespace="b"), metadata=metadata("alice"), timeout=10
        ),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    # Without credentials: told to authenticate.
    refused(lambda: stub.Read(read), grpc.StatusCode.UNAUTHENTICATED)
    with http(setup, None) as anonymous:
        problem(anonymous.get(key_url("b", "/k")), 401, "unauthorized")


def test_another_principals_prefix_is_out_of_reach(setup: Setup) -> None:
    with http(setup, "alice") as alice, http(setup, "bob") as bob:
        assert alice.put(key_url("shared", "/users/alice/x"), content=b"a").status_code == 201
        assert bob.put(key_url("shared", "/users/bob/y"), content=b"b").status_code == 201
        problem(bob.get(key_url("shared", "/users/alice/x")), 403, "forbidden")
        problem(bob.put(key_url("shared", "/users/alice/x"), content=b"!"), 403, "forbidden")
        problem(bob.delete(key_url("shared", "/users/alice/x")), 403, "forbidden")
        # A range delete could reach any key: it needs the whole namespace.
        problem(
            bob.delete("/v1/namespaces/shared/keys", params={"start": "/users/", "end": "/users0"}),
            403,
            "forbidden",
        )
        # A listing answers only the caller's keys.
        # (hierarchical order: a range over both users' keys of four segments)
        span = {"start": "/users/alice/", "end": "/users/bob/~"}
        listed = bob.get("/v1/namespaces/shared/keys", params=span)
        assert listed.status_code == 200, listed.text
        keys = [item if isinstance(item, str) else item["key"] for item in listed.json()["keys"]]
        assert "/users/bob/y" in keys and "/users/alice/x" not in keys
        with http(setup, "admin") as admin:
            everything = admin.get("/v1/namespaces/shared/keys", params=span).json()["keys"]
            assert len(everything) == len(keys) + 1
        assert alice.get(key_url("shared", "/users/alice/x")).content == b"a"


def test_the_anonymous_rule_serves_plaintext_clients_without_tokens(setup: Setup) -> None:
    with http(setup, None) as anonymous:
        assert anonymous.put(key_url("default", "/open"), content=b"o").status_code == 201
        assert anonymous.get(key_url("default", "/open")).content == b"o"
        problem(anonymous.get(key_url("a", "/k")), 401, "unauthorized")


# ---- tokens -------------------------------------------------------------------------


def _jwt(key: rsa.RSAPrivateKey, **claims: Any) -> str:
    base = {"iss": ISSUER, "aud": "cairn", "sub": "alice", "exp": time.time() + 60}
    return jwt.encode({**base, **claims}, key, algorithm="RS256")


def test_jwts_are_checked(setup: Setup, stub: pb_grpc.OxiaClientStub) -> None:
    good = _jwt(setup.idp_key)
    expired = _jwt(setup.idp_key, exp=time.time() - 30)
    forged = _jwt(rsa.generate_private_key(public_exponent=65537, key_size=2048))
    with setup.gateway.client(headers={"Authorization": f"Bearer {good}"}) as client:
        assert client.put(key_url("a", "/jwt"), content=b"j").status_code == 201
    for bad in (expired, forged, "not-a-token"):
        with setup.gateway.client(headers={"Authorization": f"Bearer {bad}"}) as client:
            problem(client.get(key_url("a", "/jwt")), 401, "unauthorized")
        read = pb.ReadRequest(shard=shard_of(stub, "a"), gets=[pb.GetRequest(key="/jwt")])
        refused(
            lambda bad=bad, read=read: stub.Read(
                read, metadata=[("authorization", f"Bearer {bad}")]
            ),
            grpc.StatusCode.UNAUTHENTICATED,
        )


def test_only_a_gateway_may_speak_for_someone_else(
    setup: Setup, stub: pb_grpc.OxiaClientStub
) -> None:
    read = pb.ReadRequest(shard=shard_of(stub, "a"), gets=[pb.GetRequest(key="/k")])
    # Bob claims to be alice: refused.
    details = refused(
        lambda: stub.Read(read, metadata=metadata("bob", x_cairn_on_behalf_of="user:alice")),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    assert "on behalf" in details
    # The gateway naming alice reads as alice.
    answer = list(
        stub.Read(
            read,
            metadata=[
                ("authorization", f"Bearer {GATEWAY_TOKEN}"),
                ("x-cairn-on-behalf-of", "user:alice"),
            ],
        )
    )
    assert answer[0].gets[0].status == pb.Status.OK


# ---- sessions -----------------------------------------------------------------------

SESSIONS = "/v1/namespaces/shared/sessions"


def test_a_forged_session_token_cannot_end_anothers_session(setup: Setup) -> None:
    with http(setup, "alice") as alice, http(setup, "bob") as bob:
        created = alice.post(SESSIONS, json={"timeoutMs": 10_000})
        assert created.status_code == 201, created.text
        token = created.json()["session"]
        lock = key_url("shared", "/locks/leader")
        taken = alice.put(lock, params={"session": token}, content=b"alice")
        assert taken.status_code == 201, taken.text
        # Tokens bob could make: unsealed, sealed with a guessed key, another's ids.
        genuine = SessionToken.decode(token, "shared", setup.session_key, "user:alice")
        forgeries = [
            SessionToken("shared", genuine.session_ids, None, "user:bob").encode(None),
            SessionToken("shared", genuine.session_ids, None, "user:bob").encode(b"guess"),
            token[:-1] + ("A" if token[-1] != "A" else "B"),
        ]
        for forged in forgeries:
            problem(bob.delete(f"{SESSIONS}/{forged}"), 404, "session-expired")
            problem(bob.post(f"{SESSIONS}/{forged}/keepalive"), 404, "session-expired")
            assert bob.put(lock, params={"session": forged}, content=b"bob").status_code == 400
        # Alice's genuine token in bob's hands: refused as his is not hers.
        problem(bob.delete(f"{SESSIONS}/{token}"), 403, "forbidden")
        problem(bob.put(lock, params={"session": token}, content=b"bob"), 403, "forbidden")
        # The session lives, and its lock with it.
        assert alice.post(f"{SESSIONS}/{token}/keepalive").status_code == 204
        held = alice.get(lock)
        assert held.content == b"alice" and held.headers["cairn-ephemeral"] == "true"
        assert alice.delete(f"{SESSIONS}/{token}").status_code == 204
        problem(alice.get(lock), 404, "key-not-found")


def test_sessions_belong_to_their_creator_at_the_pod(
    setup: Setup, stub: pb_grpc.OxiaClientStub
) -> None:
    shard = shard_of(stub, "shared")
    session_id = stub.CreateSession(
        pb.CreateSessionRequest(shard=shard, session_timeout_ms=10_000, client_identity="bob"),
        metadata=metadata("alice"),
    ).session_id
    # client_identity says "bob": ownership comes from the credentials, not from it.
    mine = pb.PutRequest(key="/locks/pod", value=b"alice", session_id=session_id)
    assert stub.Write(pb.WriteRequest(shard=shard, puts=[mine]), metadata=metadata("alice"))
    heartbeat = pb.SessionHeartbeat(shard=shard, session_id=session_id)
    close = pb.CloseSessionRequest(shard=shard, session_id=session_id)
    theirs = pb.PutRequest(key="/locks/other", value=b"bob", session_id=session_id)
    for who in ("bob", None):
        code = grpc.StatusCode.PERMISSION_DENIED if who else grpc.StatusCode.UNAUTHENTICATED
        refused(lambda who=who: stub.KeepAlive(heartbeat, metadata=metadata(who)), code)
        refused(lambda who=who: stub.CloseSession(close, metadata=metadata(who)), code)
        refused(
            lambda who=who: stub.Write(
                pb.WriteRequest(shard=shard, puts=[theirs]), metadata=metadata(who)
            ),
            code,
        )
    # Through the gateway's identity, naming bob: still bob.
    refused(
        lambda: stub.CloseSession(
            close,
            metadata=[
                ("authorization", f"Bearer {GATEWAY_TOKEN}"),
                ("x-cairn-on-behalf-of", "user:bob"),
            ],
        ),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    stub.KeepAlive(heartbeat, metadata=metadata("alice"))
    stub.CloseSession(close, metadata=metadata("alice"))


# ---- limits -------------------------------------------------------------------------


def test_caps_on_sessions_and_streams_answer_clearly(
    setup: Setup, stub: pb_grpc.OxiaClientStub
) -> None:
    shard = shard_of(stub, "a")
    request = pb.CreateSessionRequest(shard=shard, session_timeout_ms=10_000)
    made = [stub.CreateSession(request, metadata=metadata("alice")).session_id for _ in range(3)]
    details = refused(
        lambda: stub.CreateSession(request, metadata=metadata("alice")),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    )
    assert "user:alice holds 3 sessions" in details
    # Another principal is not starved.
    bob_shard = shard_of(stub, "b")
    stub.CreateSession(
        pb.CreateSessionRequest(shard=bob_shard, session_timeout_ms=10_000),
        metadata=metadata("bob"),
    )
    for session_id in made:
        stub.CloseSession(
            pb.CloseSessionRequest(shard=shard, session_id=session_id), metadata=metadata("alice")
        )
    # Notification streams: the cap per principal, then the stream of another.
    notifications = pb.NotificationsRequest(shard=shard)
    streams = [stub.GetNotifications(notifications, metadata=metadata("alice")) for _ in range(2)]
    try:
        for stream in streams:
            next(stream)  # open: the first (empty) batch came
        details = refused(
            lambda: stub.GetNotifications(notifications, metadata=metadata("alice")),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        )
        assert "notification streams" in details
        admin = stub.GetNotifications(notifications, metadata=metadata("admin"))
        next(admin)
        admin.cancel()
    finally:
        for stream in streams:
            stream.cancel()


# ---- compatibility ------------------------------------------------------------------


def test_the_released_oxia_client_works_where_a_rule_lets_anonymous_in(setup: Setup) -> None:
    """The `oxia` 0.2.1 package sends no token: the operator's rule for the
    anonymous principal on `default` is what lets it work on an auth-enabled pod."""
    import oxia

    with oxia.Client(setup.storage.address) as client:
        key, version = client.put("/oxia-compat", b"v")
        assert client.get(key)[1] == b"v"
        assert client.list("/", "/~") == ["/oxia-compat"] or "/oxia-compat" in client.list(
            "/", "/~"
        )
        client.delete(key, expected_version_id=version.version_id())


def test_the_change_feed_needs_the_whole_namespace(setup: Setup) -> None:
    with http(setup, "alice") as alice:
        with alice.stream("GET", "/v1/namespaces/a/changes") as feed:
            assert feed.status_code == 200
        problem(alice.get("/v1/namespaces/shared/changes"), 403, "forbidden")
