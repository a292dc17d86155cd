"""TLS material (cairn.common.tls, certs, tls_asgi): certificates the local CA
issues, reloading on change, gRPC and HTTP servers that follow rotated files,
and the ASGI TLS extension naming the verified peer."""

from __future__ import annotations

import asyncio
import socket
import ssl
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import httpx
import pytest
import uvicorn
from cryptography import x509

from cairn.common.certs import CertificateAuthority
from cairn.common.identity import (
    Principal,
    Role,
    asgi_peer_principal,
    grpc_peer_principal,
    principal_of_pem,
)
from cairn.common.tls import (
    ChannelCache,
    LiveSSLContext,
    TlsConfigError,
    TlsFiles,
    TlsSource,
    grpc_server_credentials,
)
from cairn.common.tls_asgi import uvicorn_tls_options

POD = Principal(Role.STORAGE, "storage-0")
CONTROLLER = Principal(Role.CONTROLLER, "controller")


@pytest.fixture
def authority(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority.create_or_load(tmp_path / "ca")


def _serial(directory: Path) -> int:
    return x509.load_pem_x509_certificate((directory / "tls.crt").read_bytes()).serial_number


# -- the local CA ---------------------------------------------------------------------


def test_component_certificates_name_the_component_and_the_host(
    authority: CertificateAuthority, tmp_path: Path
) -> None:
    directory = authority.issue_component(
        POD, tmp_path / "pod", hosts=("localhost", "127.0.0.1", "pod-0.svc")
    )
    certificate = x509.load_pem_x509_certificate((directory / "tls.crt").read_bytes())
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.UniformResourceIdentifier) == [
        "spiffe://cairn/storage/storage-0"
    ]
    assert set(names.get_values_for_type(x509.DNSName)) == {"localhost", "pod-0.svc"}
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert {u.dotted_string for u in usages} == {"1.3.6.1.5.5.7.3.1", "1.3.6.1.5.5.7.3.2"}
    assert principal_of_pem((directory / "tls.crt").read_bytes()) == POD
    assert (directory / "ca.crt").read_bytes() == authority.certificate_pem
    assert (directory / "tls.key").stat().st_mode & 0o077 == 0


def test_user_certificates_name_the_user(authority: CertificateAuthority, tmp_path: Path) -> None:
    directory = authority.issue_user("alice", tmp_path / "alice")
    assert principal_of_pem((directory / "tls.crt").read_bytes()) == Principal(Role.USER, "alice")


def test_the_ca_is_made_once_and_reused(tmp_path: Path) -> None:
    first = CertificateAuthority.create_or_load(tmp_path / "ca")
    again = CertificateAuthority.create_or_load(tmp_path / "ca")
    assert again.certificate == first.certificate


# -- reloading ------------------------------------------------------------------------


def test_changed_files_are_read_again(authority: CertificateAuthority, tmp_path: Path) -> None:
    directory = authority.issue_component(POD, tmp_path / "pod")
    now = [0.0]
    source = TlsSource.from_directory(directory, check_interval_s=1.0, clock=lambda: now[0])
    first = source.current()
    authority.issue_component(POD, directory)
    assert source.current() is first  # not looked at again within the interval
    now[0] = 1.5
    second = source.current()
    assert second.generation == first.generation + 1
    assert second.certificate_chain == (directory / "tls.crt").read_bytes()


def test_a_key_that_does_not_match_is_not_taken(
    authority: CertificateAuthority, tmp_path: Path
) -> None:
    directory = authority.issue_component(POD, tmp_path / "pod")
    other = authority.issue_component(POD, tmp_path / "other")
    source = TlsSource.from_directory(directory, check_interval_s=0)
    first = source.current()
    # A writer caught between its two writes: the new certificate, the old key.
    (directory / "tls.crt").write_bytes((other / "tls.crt").read_bytes())
    assert source.current() is first
    (directory / "tls.key").write_bytes((other / "tls.key").read_bytes())
    assert source.current().certificate_chain == (other / "tls.crt").read_bytes()


def test_a_directory_without_a_usable_pair_is_refused_at_start(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("not a certificate")
    (tmp_path / "tls.key").write_text("not a key")
    with pytest.raises(TlsConfigError):
        TlsSource.from_directory(tmp_path)
    with pytest.raises(TlsConfigError):
        TlsFiles(tmp_path / "tls.crt", None, None)


# -- gRPC: a server and a client that follow their files ------------------------------


def test_grpc_mutual_tls_names_the_peer_and_follows_rotations(
    authority: CertificateAuthority, tmp_path: Path
) -> None:
    asyncio.run(_grpc_mutual_tls_names_the_peer_and_follows_rotations(authority, tmp_path))


async def _grpc_mutual_tls_names_the_peer_and_follows_rotations(
    authority: CertificateAuthority, tmp_path: Path
) -> None:
    server_dir = authority.issue_component(POD, tmp_path / "pod")
    client_dir = authority.issue_component(CONTROLLER, tmp_path / "controller")
    seen: list[Principal | None] = []

    async def whoami(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        seen.append(grpc_peer_principal(context.auth_context()))
        return b""

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "t.T", {"M": grpc.unary_unary_rpc_method_handler(whoami)}
            )
        ]
    )
    source = TlsSource.from_directory(server_dir, check_interval_s=0)
    port = server.add_secure_port("127.0.0.1:0", grpc_server_credentials(source, True))
    await server.start()
    cache = ChannelCache(TlsSource.from_directory(client_dir, check_interval_s=0))
    try:
        address = f"127.0.0.1:{port}"
        first = cache.get(address)
        await first.unary_unary("/t.T/M")(b"", timeout=5)
        assert cache.get(address) is first  # unchanged files: the same channel
        # The client's certificate is rotated (to another identity, to tell them apart).
        authority.issue_component(Principal(Role.CONTROLLER, "controller-2"), client_dir)
        second = cache.get(address)
        assert second is not first
        await second.unary_unary("/t.T/M")(b"", timeout=5)
        assert seen == [CONTROLLER, Principal(Role.CONTROLLER, "controller-2")]
    finally:
        await cache.close()
        await server.stop(None)


# -- HTTP: uvicorn with a live context and the ASGI TLS extension ---------------------


async def _principal_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    principal = asgi_peer_principal(scope)
    body = str(principal).encode() if principal is not None else b"nobody"
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


def _served_serial(port: int, ca_file: Path) -> int:
    context = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_uvicorn_serves_the_verified_peer_and_a_rotated_certificate(
    authority: CertificateAuthority, tmp_path: Path
) -> None:
    asyncio.run(_uvicorn_serves_the_verified_peer_and_a_rotated_certificate(authority, tmp_path))


async def _uvicorn_serves_the_verified_peer_and_a_rotated_certificate(
    authority: CertificateAuthority, tmp_path: Path
) -> None:
    server_dir = authority.issue_component(POD, tmp_path / "server")
    client_dir = authority.issue_component(
        Principal(Role.SIDECAR, "storage-0"), tmp_path / "sidecar"
    )
    live = LiveSSLContext(TlsSource.from_directory(server_dir, check_interval_s=0), server=True)
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            _principal_app, lifespan="off", log_level="warning", **uvicorn_tls_options(live)
        )
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()  # it failed to start: say why
            await asyncio.sleep(0.01)
        client_tls = LiveSSLContext(TlsSource.from_directory(client_dir), server=False)
        async with httpx.AsyncClient(verify=client_tls.context) as http:
            answer = await http.get(f"https://127.0.0.1:{port}/")
        assert answer.text == "sidecar:storage-0"
        anonymous = LiveSSLContext(
            TlsSource(TlsFiles(None, None, server_dir / "ca.crt")), server=False
        )
        async with httpx.AsyncClient(verify=anonymous.context) as http:
            assert (await http.get(f"https://127.0.0.1:{port}/")).text == "nobody"
        ca_file = server_dir / "ca.crt"
        before = await asyncio.to_thread(_served_serial, port, ca_file)
        assert before == _serial(server_dir)
        authority.issue_component(POD, server_dir)
        assert live.maybe_reload()
        after = await asyncio.to_thread(_served_serial, port, ca_file)
        assert after == _serial(server_dir) != before
    finally:
        server.should_exit = True
        await task


def test_a_certificate_of_another_ca_fails_the_handshake(
    authority: CertificateAuthority, tmp_path: Path
) -> None:
    asyncio.run(_a_certificate_of_another_ca_fails_the_handshake(authority, tmp_path))


async def _a_certificate_of_another_ca_fails_the_handshake(
    authority: CertificateAuthority, tmp_path: Path
) -> None:
    server_dir = authority.issue_component(POD, tmp_path / "server")
    live = LiveSSLContext(TlsSource.from_directory(server_dir), server=True)
    foreign = CertificateAuthority.create("another").issue_component(
        CONTROLLER, tmp_path / "foreign"
    )
    (foreign / "ca.crt").write_bytes((server_dir / "ca.crt").read_bytes())
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            _principal_app, lifespan="off", log_level="critical", **uvicorn_tls_options(live)
        )
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()  # it failed to start: say why
            await asyncio.sleep(0.01)
        client = LiveSSLContext(TlsSource.from_directory(foreign), server=False)
        async with httpx.AsyncClient(verify=client.context) as http:
            with pytest.raises(httpx.HTTPError):
                await http.get(f"https://127.0.0.1:{port}/")
    finally:
        server.should_exit = True
        await task
