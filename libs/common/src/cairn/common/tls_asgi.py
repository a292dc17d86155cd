"""uvicorn with TLS that tells the application who the peer is.

uvicorn terminates TLS but leaves the ASGI TLS extension
(`scope["extensions"]["tls"]`) empty, so an application cannot see the client's
certificate. The protocol classes here fill it, per connection, with the peer's
certificate once the handshake has verified it; `identity.asgi_peer_principal`
reads it from there. An unverified certificate (a context with CERT_NONE) is
never passed on: it would name whoever made it.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from cairn.common.tls import LiveSSLContext

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools is optional for uvicorn
    HttpToolsProtocol = H11Protocol  # type: ignore[misc,assignment]


def tls_extension(transport: asyncio.BaseTransport) -> dict[str, Any] | None:
    """The ASGI TLS extension for a connection, or None when it is not TLS."""
    ssl_object = transport.get_extra_info("ssl_object")
    if not isinstance(ssl_object, ssl.SSLObject):
        return None
    chain: list[str] = []
    if ssl_object.context.verify_mode != ssl.CERT_NONE:
        der = ssl_object.getpeercert(binary_form=True)
        if der:
            chain.append(ssl.DER_cert_to_PEM_cert(der))
    cipher = ssl_object.cipher()
    return {
        "server_cert": None,
        "client_cert_chain": chain,
        "client_cert_name": None,
        "client_cert_error": None,
        "tls_version": ssl_object.version(),
        "cipher_suite": cipher[0] if cipher else None,
    }


class _TlsScopeApp:
    """The application, with every request scope carrying the connection's TLS facts."""

    def __init__(self, app: Any, extension: dict[str, Any]) -> None:
        self.app = app
        self.extension = extension

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        extensions = dict(scope.get("extensions") or {})
        extensions["tls"] = self.extension
        await self.app({**scope, "extensions": extensions}, receive, send)


class TlsHttpToolsProtocol(HttpToolsProtocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        extension = tls_extension(transport)
        if extension is not None:
            self.app = _TlsScopeApp(self.app, extension)


class TlsH11Protocol(H11Protocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        extension = tls_extension(transport)
        if extension is not None:
            self.app = _TlsScopeApp(self.app, extension)


def uvicorn_tls_options(context: LiveSSLContext | None) -> dict[str, Any]:
    """Keyword arguments for `uvicorn.Config`: serve with the live context and
    fill the TLS extension. Empty (plaintext) when `context` is None."""
    if context is None:
        return {}
    live = context.context

    def factory(config: Any, default: Any) -> ssl.SSLContext:
        return live

    return {"ssl_context_factory": factory, "http": TlsHttpToolsProtocol}
