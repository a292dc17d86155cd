"""Transport security with real processes (issue 39): a storage pod whose
internal port is mutual TLS, played against by a driver holding the controller's
certificate, and by callers holding no certificate, the wrong one, or one from
another CA.

Each attack of the issue is tried on the internal port (NewTerm at term 1000,
PushAssignments naming evil.example:6648, DeleteShard) and afterwards the shard
keeps its term, its shard map and its data.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography import x509

from cairn.common.certs import CertificateAuthority
from cairn.common.identity import Principal, Role
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc
from cairn.proto import replication_pb2 as rpb
from cairn.proto import replication_pb2_grpc as rpb_grpc
from support.driver import Driver
from support.processes import NodeProcess
from support.tls import TestCertificates, credentials, server_only_credentials

pytestmark = pytest.mark.e2e

SHARD = 0
CALL_TIMEOUT_S = 5.0
EVIL_LEADER = "evil.example:6648"


@dataclass
class SecurePod:
    node: NodeProcess
    certs: TestCertificates
    driver: Driver

    def public_channel(self) -> grpc.Channel:
        return grpc.secure_channel(self.node.address, server_only_credentials(self.certs.ca_file))

    def put(self, key: str, value: bytes) -> None:
        with self.public_channel() as channel:
            request = pb.WriteRequest(shard=SHARD, puts=[pb.PutRequest(key=key, value=value)])
            response = pb_grpc.OxiaClientStub(channel).Write(request, timeout=CALL_TIMEOUT_S)
        assert response.puts[0].status == pb.OK

    def get(self, key: str) -> bytes | None:
        with self.public_channel() as channel:
            request = pb.ReadRequest(shard=SHARD, gets=[pb.GetRequest(key=key, include_value=True)])
            (response,) = list(
                pb_grpc.OxiaClientStub(channel).Read(request, timeout=CALL_TIMEOUT_S)
            )
        (get,) = response.gets
        return get.value if get.status == pb.OK else None

    def leaders_in_map(self) -> set[str]:
        with self.public_channel() as channel:
            stream = pb_grpc.OxiaClientStub(channel).GetShardAssignments(
                pb.ShardAssignmentsRequest(namespace="default"), timeout=CALL_TIMEOUT_S
            )
            first = next(iter(stream))
            stream.cancel()
        return {a.leader for ns in first.namespaces.values() for a in ns.assignments}

    def term(self) -> int:
        return self.driver.status(self.node, SHARD).term


@pytest.fixture
def pod(tmp_path: Path) -> Iterator[SecurePod]:
    certs = TestCertificates(tmp_path / "certs")
    node = NodeProcess(tmp_path / "pod", tls_dir=certs.component(Role.STORAGE, "storage-0"))
    node.start()
    controller = credentials(certs.component(Role.CONTROLLER, "controller"))
    driver = Driver(credentials=controller)
    try:
        driver.elect(SHARD, [node])
        driver.push_map([node])
        secure = SecurePod(node, certs, driver)
        _wait_for(lambda: secure.leaders_in_map() == {node.address})
        secure.put("/kept", b"data")
        yield secure
    finally:
        driver.close()
        node.kill()


def _wait_for(condition: object, timeout_s: float = 30.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition():
                return
        except grpc.RpcError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def _attacks(stub: rpb_grpc.CoordinationStub) -> list[tuple[str, grpc.RpcError]]:
    """The issue's three attacks; each one's error (none may succeed)."""
    assignments = pb.ShardAssignments()
    namespace = assignments.namespaces["default"]
    namespace.shard_key_router = pb.XXHASH3
    entry = namespace.assignments.add(shard=SHARD, leader=EVIL_LEADER)
    entry.int32_hash_range.max_hash_inclusive = 0xFFFFFFFF
    calls = {
        "NewTerm": lambda: stub.NewTerm(
            rpb.NewTermRequest(shard=SHARD, term=1000, controller_epoch=1000),
            timeout=CALL_TIMEOUT_S,
        ),
        "PushAssignments": lambda: stub.PushAssignments(
            rpb.PushAssignmentsRequest(
                assignments=assignments, version=1_000_000, controller_epoch=1000
            ),
            timeout=CALL_TIMEOUT_S,
        ),
        "DeleteShard": lambda: stub.DeleteShard(
            rpb.DeleteShardRequest(shard=SHARD, controller_epoch=1000), timeout=CALL_TIMEOUT_S
        ),
    }
    errors = []
    for name, call in calls.items():
        with pytest.raises(grpc.RpcError) as refused:
            call()
        errors.append((name, refused.value))
    return errors


def _assert_untouched(pod: SecurePod, term: int) -> None:
    assert pod.term() == term
    assert pod.leaders_in_map() == {pod.node.address}
    assert pod.get("/kept") == b"data"
    # And the shard still takes writes: it was neither fenced nor deleted.
    pod.put("/after", b"still-leader")
    assert pod.get("/after") == b"still-leader"


def test_callers_without_a_certificate_change_nothing(pod: SecurePod) -> None:
    term = pod.term()
    internal = pod.node.internal_address
    with grpc.insecure_channel(internal) as plaintext:
        for name, error in _attacks(rpb_grpc.CoordinationStub(plaintext)):
            assert error.code() == grpc.StatusCode.UNAVAILABLE, name  # type: ignore[attr-defined]
    # TLS that checks the pod but presents no certificate: the handshake fails.
    tls_only = server_only_credentials(pod.certs.ca_file)
    with grpc.secure_channel(internal, tls_only) as anonymous:
        for name, error in _attacks(rpb_grpc.CoordinationStub(anonymous)):
            assert error.code() == grpc.StatusCode.UNAVAILABLE, name  # type: ignore[attr-defined]
    _assert_untouched(pod, term)


def test_a_storage_pods_certificate_cannot_coordinate(pod: SecurePod) -> None:
    term = pod.term()
    storage = credentials(pod.certs.component(Role.STORAGE, "storage-1"))
    with grpc.secure_channel(pod.node.internal_address, storage) as channel:
        stub = rpb_grpc.CoordinationStub(channel)
        for name, error in _attacks(stub):
            code = error.code()  # type: ignore[attr-defined]
            assert code == grpc.StatusCode.PERMISSION_DENIED, name
        # Nor may it read the pod's status (only the controller and sidecars do).
        with pytest.raises(grpc.RpcError) as refused:
            stub.GetStatus(rpb.GetStatusRequest(), timeout=CALL_TIMEOUT_S)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]
    _assert_untouched(pod, term)
    log = pod.node.log_text()
    for method in ("NewTerm", "PushAssignments", "DeleteShard"):
        assert f"refused /cairn.replication.v1.Coordination/{method} from storage:storage-1" in log


def test_a_sidecar_may_read_status_but_not_coordinate(pod: SecurePod) -> None:
    term = pod.term()
    sidecar = credentials(pod.certs.component(Role.SIDECAR, "storage-0"))
    with grpc.secure_channel(pod.node.internal_address, sidecar) as channel:
        stub = rpb_grpc.CoordinationStub(channel)
        status = stub.GetStatus(rpb.GetStatusRequest(shard=SHARD), timeout=CALL_TIMEOUT_S)
        assert status.shards[0].term == term
        for name, error in _attacks(stub):
            code = error.code()  # type: ignore[attr-defined]
            assert code == grpc.StatusCode.PERMISSION_DENIED, name
    _assert_untouched(pod, term)


def test_a_certificate_from_an_unknown_ca_is_refused(pod: SecurePod, tmp_path: Path) -> None:
    term = pod.term()
    # Another CA's certificate naming the controller, trusting our CA for the server.
    other = CertificateAuthority.create("Not this cluster's CA")
    forged = other.issue_component(Principal(Role.CONTROLLER, "controller"), tmp_path / "forged")
    forged_credentials = credentials(forged, ca_file=pod.certs.ca_file)
    with grpc.secure_channel(pod.node.internal_address, forged_credentials) as channel:
        for name, error in _attacks(rpb_grpc.CoordinationStub(channel)):
            assert error.code() == grpc.StatusCode.UNAVAILABLE, name  # type: ignore[attr-defined]
    _assert_untouched(pod, term)


def test_a_plaintext_client_is_refused_on_the_tls_client_port(pod: SecurePod) -> None:
    with grpc.insecure_channel(pod.node.address) as channel:
        request = pb.WriteRequest(shard=SHARD, puts=[pb.PutRequest(key="/p", value=b"x")])
        with pytest.raises(grpc.RpcError) as refused:
            pb_grpc.OxiaClientStub(channel).Write(request, timeout=CALL_TIMEOUT_S)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    assert pod.get("/p") is None


def _served_serial(address: str, ca_file: Path) -> int:
    """The serial number of the certificate a new TLS connection is served."""
    host, _, port = address.rpartition(":")
    context = ssl.create_default_context(cafile=str(ca_file))
    context.set_alpn_protocols(["h2"])  # gRPC servers speak HTTP/2 only
    import socket

    with (
        socket.create_connection((host, int(port)), timeout=CALL_TIMEOUT_S) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_a_certificate_rotated_on_disk_is_used_without_a_restart(pod: SecurePod) -> None:
    pod_dir = pod.certs.component(Role.STORAGE, "storage-0")
    before = _served_serial(pod.node.address, pod.certs.ca_file)
    assert (
        before == x509.load_pem_x509_certificate((pod_dir / "tls.crt").read_bytes()).serial_number
    )
    pod.certs.authority.issue_component(Principal(Role.STORAGE, "storage-0"), pod_dir)
    rotated = x509.load_pem_x509_certificate((pod_dir / "tls.crt").read_bytes()).serial_number
    assert rotated != before
    # The pod looks at its files at most once a second.
    _wait_for(lambda: _served_serial(pod.node.address, pod.certs.ca_file) == rotated)
    # The internal port too, and the controller still coordinates through it.
    pod.driver.close()
    pod.driver = Driver(credentials=credentials(pod.certs.component(Role.CONTROLLER, "controller")))
    assert pod.term() >= 1
    assert pod.get("/kept") == b"data"
