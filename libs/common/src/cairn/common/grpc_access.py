"""Enforce cairn.common.access's internal rules on a grpc.aio server.

An interceptor cannot see the caller's certificate (gRPC hands it the method
name and metadata only), so it wraps the method's handler: the wrapped behaviour
reads `context.auth_context()` first and aborts a refused call before the
servicer runs, so a refused call changes nothing. Refusals are logged with the
principal (or its absence) and the method.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import grpc
import grpc.aio

from cairn.common.access import INTERNAL_GRPC_RULES, Verdict, decide_internal_call
from cairn.common.identity import DEFAULT_TRUST_DOMAIN, Principal, Role, principal_of_pem

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=256)
def _principal_of_pem(pem: bytes, trust_domain: str) -> Principal | None:
    # Peers are few and their certificates long-lived: parse each one once.
    return principal_of_pem(pem, trust_domain)


def peer_principal(
    context: grpc.aio.ServicerContext, trust_domain: str = DEFAULT_TRUST_DOMAIN
) -> Principal | None:
    """The principal of the call's verified client certificate, if any (the
    public API's authorization reads it the same way)."""
    pems = context.auth_context().get("x509_pem_cert")
    if not pems:
        return None
    return _principal_of_pem(pems[0], trust_domain)


_CODES = {
    Verdict.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    Verdict.DENIED: grpc.StatusCode.PERMISSION_DENIED,
}


class InternalAccessInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(
        self,
        rules: Mapping[str, frozenset[Role]] = INTERNAL_GRPC_RULES,
        trust_domain: str = DEFAULT_TRUST_DOMAIN,
    ) -> None:
        self.rules = rules
        self.trust_domain = trust_domain
        self.refused = 0

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method: str = handler_call_details.method
        return _guarded(handler, functools.partial(self._check, method))

    async def _check(self, method: str, context: grpc.aio.ServicerContext) -> None:
        principal = peer_principal(context, self.trust_domain)
        verdict = decide_internal_call(method, principal, self.rules)
        if verdict is Verdict.ALLOW:
            return
        self.refused += 1
        who = str(principal) if principal is not None else "no client certificate"
        log.warning("refused %s from %s (%s, peer %s)", method, who, verdict.value, context.peer())
        await context.abort(_CODES[verdict], f"{method} is not allowed for {who}")


def _guarded(
    handler: grpc.RpcMethodHandler,
    check: Callable[[grpc.aio.ServicerContext], Awaitable[None]],
) -> grpc.RpcMethodHandler:
    """The same handler, its behaviour preceded by `check`."""

    def wrap(behavior: Any) -> Any:
        if inspect.isasyncgenfunction(behavior):

            async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                await check(context)
                async for response in behavior(request, context):
                    yield response

            return stream

        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await check(context)
            result = behavior(request, context)
            return await result if inspect.isawaitable(result) else result

        return call

    serializers = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(wrap(handler.unary_unary), **serializers)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(wrap(handler.unary_stream), **serializers)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(wrap(handler.stream_unary), **serializers)
    assert handler.stream_stream is not None, "a handler has one behaviour"
    return grpc.stream_stream_rpc_method_handler(wrap(handler.stream_stream), **serializers)
