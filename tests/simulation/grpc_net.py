"""gRPC between simulated storage pods: the leader's real sender (replication/
sender.py) calls the follower's real servicer (rpc/replication.py, through the
real handler table) on channels that carry serialized messages over a
simulated network.

Each pod runs on a VirtualLoop of its own, and the network is the only thing
between loops, as between processes: a message is a callback run on the
receiving pod's loop when it arrives. A call's messages arrive in order (a gRPC
call runs over one connection). A message that cannot arrive (the pods are cut
apart, the receiver is down) breaks its call on both sides, as a broken
connection does: the caller sees UNAVAILABLE, the servicer is cancelled.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import grpc

from simulation.virtual_loop import VirtualLoop

Serializer = Callable[[Any], bytes]
Deserializer = Callable[[bytes], Any]


class _End:
    """The sender of a call's messages sent its last one."""


END = _End()


Metadata = tuple[tuple[str, str | bytes], ...]


@dataclass(frozen=True, slots=True)
class _Failed:
    code: grpc.StatusCode
    details: str
    # What a servicer's abort carries (a google.rpc.Status detail, say).
    trailing: Metadata = ()


class SimAbort(Exception):
    """A servicer aborted its call (context.abort)."""

    def __init__(self, code: grpc.StatusCode, details: str, trailing: Metadata = ()) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.trailing = trailing


class SimContext:
    """What the pod's servicers use of grpc.aio.ServicerContext."""

    def __init__(self, net: SimNet, call: _Call, serialize: Serializer) -> None:
        self._net = net
        self._call = call
        self._serialize = serialize

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Metadata = ()
    ) -> NoReturn:
        raise SimAbort(code, details, tuple(trailing_metadata))

    async def write(self, response: Any) -> None:
        """One message of a server-streaming answer."""
        self._net.send(self._call, False, self._serialize(response))


@dataclass(frozen=True, slots=True)
class _HandlerCallDetails:
    method: str
    invocation_metadata: tuple[tuple[str, str], ...] = ()


@dataclass(eq=False)
class SimPod:
    """One pod as the network sees it: its loop while it runs, and the gRPC
    handlers it serves (None: down)."""

    name: str
    loop: VirtualLoop | None = None
    handlers: grpc.GenericRpcHandler | None = None

    @property
    def up(self) -> bool:
        return self.loop is not None and not self.loop.is_closed()


@dataclass(eq=False)
class _Call:
    id: int
    client: str
    server: str
    method: str
    # Where each side reads what the other sent (made on its own loop).
    to_client: asyncio.Queue[bytes | _End | _Failed] | None = None
    to_server: asyncio.Queue[bytes | _End | _Failed] | None = None
    servicer: asyncio.Task[None] | None = None
    broken: bool = False


@dataclass(order=True)
class _Delivery:
    at_ms: float
    seq: int
    call: _Call = field(compare=False)
    to_server: bool = field(compare=False)
    message: bytes | _End | _Failed = field(compare=False)


class SimNet:
    def __init__(self, rng: random.Random, latency_ms: tuple[float, float] = (0.2, 2.0)) -> None:
        self.rng = rng
        self.latency_ms = latency_ms
        self.pods: dict[str, SimPod] = {}
        self.now_ms = 0.0
        # Pairs of pods that cannot reach each other, and when each heals.
        self.cut: set[frozenset[str]] = set()
        self._heals_at: dict[frozenset[str], float] = {}
        self._queue: list[_Delivery] = []
        self._seq = itertools.count()
        self._call_ids = itertools.count()
        self._calls: dict[int, _Call] = {}
        # The last arrival time of each direction of each call: order is kept.
        self._last_arrival: dict[tuple[int, bool], float] = {}
        # Told of each request message sent: (client, server, method, message).
        self.on_request: Callable[[str, str, str, bytes], None] | None = None
        # (pod, method, exception) of each servicer that raised one.
        self.servicer_errors: list[tuple[str, str, Exception]] = []

    def pod(self, name: str) -> SimPod:
        return self.pods.setdefault(name, SimPod(name))

    def channel(self, client: str, server: str) -> SimChannel:
        return SimChannel(self, client, server)

    def reachable(self, a: str, b: str) -> bool:
        return frozenset((a, b)) not in self.cut

    def cut_apart(self, a: str, b: str, until_ms: float) -> None:
        """`a` and `b` cannot reach each other until `until_ms` (or later, if
        already cut apart for longer)."""
        pair = frozenset((a, b))
        self.cut.add(pair)
        self._heals_at[pair] = max(self._heals_at.get(pair, 0.0), until_ms)

    def isolate(self, name: str, others: list[str], until_ms: float) -> None:
        for other in others:
            if other != name:
                self.cut_apart(name, other, until_ms)

    def heal(self) -> None:
        self.cut.clear()
        self._heals_at.clear()

    def rejoin(self, name: str) -> None:
        """`name`'s cuts heal now."""
        for pair in [pair for pair in self.cut if name in pair]:
            self.cut.discard(pair)
            self._heals_at.pop(pair, None)

    def take_servicer_errors(self, expected: tuple[type[Exception], ...] = ()) -> list[str]:
        """What servicers raised since the last call, but `expected` exceptions."""
        errors, self.servicer_errors = self.servicer_errors, []
        return [
            f"{pod}'s {method} raised {type(error).__name__}: {error}"
            for pod, method, error in errors
            if not isinstance(error, expected)
        ]

    # -- time ----------------------------------------------------------------------------

    def deliver_due(self) -> None:
        for pair, heals_at in list(self._heals_at.items()):
            if self.now_ms >= heals_at:
                self.cut.discard(pair)
                del self._heals_at[pair]
        while self._queue and self._queue[0].at_ms <= self.now_ms:
            delivery = heapq.heappop(self._queue)
            self._arrive(delivery)

    def down(self, name: str) -> None:
        """`name` stopped (its loop is closed): its calls break."""
        for call in list(self._calls.values()):
            if name in (call.client, call.server):
                self._break(call, f"{name} is gone")

    # -- calls ---------------------------------------------------------------------------

    def open(self, client: str, server: str, method: str) -> _Call:
        call = _Call(next(self._call_ids), client, server, method)
        call.to_client = asyncio.Queue()
        self._calls[call.id] = call
        return call

    def send(self, call: _Call, to_server: bool, message: bytes | _End | _Failed) -> None:
        if call.broken:
            return
        if to_server and isinstance(message, bytes) and self.on_request is not None:
            self.on_request(call.client, call.server, call.method, message)
        low, high = self.latency_ms
        key = (call.id, to_server)
        sent_ms = _running_loop_ms(self.now_ms)
        at = max(sent_ms + self.rng.uniform(low, high), self._last_arrival.get(key, 0.0))
        self._last_arrival[key] = at
        heapq.heappush(self._queue, _Delivery(at, next(self._seq), call, to_server, message))

    def _arrive(self, delivery: _Delivery) -> None:
        call = delivery.call
        if call.broken:
            return
        receiver = call.server if delivery.to_server else call.client
        pod = self.pods.get(receiver)
        if pod is None or not pod.up or not self.reachable(call.client, call.server):
            self._break(call, f"{receiver} cannot be reached")
            return
        assert pod.loop is not None
        if delivery.to_server:
            pod.loop.call_soon(self._to_server, call, pod, delivery.message)
        else:
            queue = call.to_client
            assert queue is not None
            pod.loop.call_soon(queue.put_nowait, delivery.message)

    def _to_server(self, call: _Call, pod: SimPod, message: bytes | _End | _Failed) -> None:
        if isinstance(message, _Failed):  # the caller cancelled
            if call.servicer is not None:
                call.servicer.cancel()
            self._calls.pop(call.id, None)
            return
        if call.to_server is None:
            call.to_server = asyncio.Queue()
            assert pod.loop is not None
            call.servicer = pod.loop.create_task(self._serve(call, pod))
        call.to_server.put_nowait(message)

    def _break(self, call: _Call, why: str) -> None:
        """The connection under `call` broke: each side that runs learns it."""
        if call.broken:
            return
        call.broken = True
        self._calls.pop(call.id, None)
        client = self.pods.get(call.client)
        if client is not None and client.up and call.to_client is not None:
            assert client.loop is not None
            failed = _Failed(grpc.StatusCode.UNAVAILABLE, why)
            client.loop.call_soon(call.to_client.put_nowait, failed)
        server = self.pods.get(call.server)
        if server is not None and server.up and call.servicer is not None:
            assert server.loop is not None
            server.loop.call_soon(call.servicer.cancel)

    def cancel(self, call: _Call) -> None:
        """The caller gave up on `call`: the servicer is cancelled when that
        reaches it."""
        if not call.broken:
            self.send(call, True, _Failed(grpc.StatusCode.CANCELLED, "cancelled by the caller"))

    # -- the servicer's side ---------------------------------------------------------------

    async def _serve(self, call: _Call, pod: SimPod) -> None:
        assert pod.handlers is not None and call.to_server is not None
        handler = pod.handlers.service(_HandlerCallDetails(call.method))  # type: ignore[arg-type]
        if handler is None:
            self.send(call, False, _Failed(grpc.StatusCode.UNIMPLEMENTED, call.method))
            return
        inbox = call.to_server

        async def requests() -> AsyncIterator[Any]:
            while True:
                message = await inbox.get()
                if isinstance(message, _End | _Failed):
                    return
                yield handler.request_deserializer(message)

        context = SimContext(self, call, handler.response_serializer)
        try:
            if handler.request_streaming and handler.response_streaming:
                async for response in handler.stream_stream(requests(), context):
                    self.send(call, False, handler.response_serializer(response))
            elif handler.response_streaming:
                request = await anext(requests())
                # Either an async generator or a coroutine that writes (context.write).
                answers = handler.unary_stream(request, context)
                if hasattr(answers, "__aiter__"):
                    async for response in answers:
                        self.send(call, False, handler.response_serializer(response))
                else:
                    await answers
            elif handler.request_streaming:
                response = await handler.stream_unary(requests(), context)
                self.send(call, False, handler.response_serializer(response))
            else:
                request = await anext(requests())
                response = await handler.unary_unary(request, context)
                self.send(call, False, handler.response_serializer(response))
        except SimAbort as abort:
            self.send(call, False, _Failed(abort.code, abort.details, abort.trailing))
        except Exception as error:
            # What grpc does with a servicer's unexpected exception; kept for the
            # simulation to judge (a broken invariant, or a pod losing its disk).
            self.servicer_errors.append((call.server, call.method, error))
            details = f"Unexpected {type(error).__name__}: {error}"
            self.send(call, False, _Failed(grpc.StatusCode.UNKNOWN, details))
        except StopAsyncIteration:
            self.send(call, False, _Failed(grpc.StatusCode.INTERNAL, "no request"))
        else:
            self.send(call, False, END)
        self._calls.pop(call.id, None)


def _running_loop_ms(otherwise: float) -> float:
    """The time on the sending pod's loop (it may run ahead of the network's
    step within a step), or `otherwise` outside any loop."""
    try:
        return asyncio.get_running_loop().time() * 1000
    except RuntimeError:
        return otherwise


def rpc_error(code: grpc.StatusCode, details: str, trailing: Metadata = ()) -> grpc.aio.AioRpcError:
    """The error a gRPC call raises on its caller's side."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailing), details)


def _error(failed: _Failed) -> grpc.aio.AioRpcError:
    return rpc_error(failed.code, failed.details, failed.trailing)


class SimCall:
    """The caller's side of a call (what sender.py uses of grpc.aio's)."""

    def __init__(
        self, net: SimNet, call: _Call, serialize: Serializer, deserialize: Deserializer
    ) -> None:
        self._net = net
        self._call = call
        self._serialize = serialize
        self._deserialize = deserialize
        self._done = False

    async def write(self, request: Any) -> None:
        if self._done or self._call.broken:
            raise _error(_Failed(grpc.StatusCode.UNAVAILABLE, "the call has ended"))
        self._net.send(self._call, True, self._serialize(request))

    async def done_writing(self) -> None:
        self._net.send(self._call, True, END)

    async def read(self) -> Any:
        if self._done:
            return grpc.aio.EOF
        queue = self._call.to_client
        assert queue is not None
        message = await queue.get()
        if isinstance(message, _End):
            self._done = True
            return grpc.aio.EOF
        if isinstance(message, _Failed):
            self._done = True
            raise _error(message)
        return self._deserialize(message)

    async def __aiter__(self) -> AsyncIterator[Any]:
        """A server-streaming answer, message by message."""
        while (response := await self.read()) is not grpc.aio.EOF:
            yield response

    def cancel(self) -> bool:
        if self._done:
            return False
        self._done = True
        self._net.cancel(self._call)
        return True

    async def single_response(self, timeout: float | None) -> Any:  # noqa: ASYNC109 (grpc's)
        try:
            async with asyncio.timeout(timeout):
                response = await self.read()
        except TimeoutError:
            self.cancel()
            raise _error(_Failed(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded")) from None
        if response is grpc.aio.EOF:
            raise _error(_Failed(grpc.StatusCode.INTERNAL, "no response"))
        self._done = True
        return response


class SimChannel:
    """What a generated stub needs of grpc.aio.Channel."""

    def __init__(self, net: SimNet, client: str, server: str) -> None:
        self._net = net
        self._client = client
        self._server = server

    def _open(self, method: str, serialize: Serializer, deserialize: Deserializer) -> SimCall:
        call = self._net.open(self._client, self._server, method)
        return SimCall(self._net, call, serialize, deserialize)

    def unary_unary(
        self,
        method: str,
        request_serializer: Serializer,
        response_deserializer: Deserializer,
        **_: Any,
    ) -> Callable[..., Awaitable[Any]]:
        async def call(request: Any, timeout: float | None = None, **_: Any) -> Any:  # noqa: ASYNC109
            sim_call = self._open(method, request_serializer, response_deserializer)
            await sim_call.write(request)
            await sim_call.done_writing()
            return await sim_call.single_response(timeout)

        return call

    def unary_stream(
        self,
        method: str,
        request_serializer: Serializer,
        response_deserializer: Deserializer,
        **_: Any,
    ) -> Callable[..., SimCall]:
        def call(request: Any, **_: Any) -> SimCall:
            sim_call = self._open(method, request_serializer, response_deserializer)
            self._net.send(sim_call._call, True, request_serializer(request))
            self._net.send(sim_call._call, True, END)
            return sim_call

        return call

    def stream_stream(
        self,
        method: str,
        request_serializer: Serializer,
        response_deserializer: Deserializer,
        **_: Any,
    ) -> Callable[..., SimCall]:
        def call(**_: Any) -> SimCall:
            return self._open(method, request_serializer, response_deserializer)

        return call

    def stream_unary(
        self,
        method: str,
        request_serializer: Serializer,
        response_deserializer: Deserializer,
        **_: Any,
    ) -> Callable[..., Awaitable[Any]]:
        async def call(
            requests: AsyncIterator[Any],
            timeout: float | None = None,  # noqa: ASYNC109 (a stub's call takes it so)
            **_: Any,
        ) -> Any:
            sim_call = self._open(method, request_serializer, response_deserializer)
            async for request in requests:
                await sim_call.write(request)
            await sim_call.done_writing()
            return await sim_call.single_response(timeout)

        return call


class SimPeers:
    """replication/peers.py's PeerChannels for one pod, over the network."""

    def __init__(self, net: SimNet, client: str) -> None:
        self._net = net
        self._client = client
        self._servers: set[str] = set()

    def __len__(self) -> int:
        return len(self._servers)

    def get(self, address: str) -> SimChannel:
        self._servers.add(address)
        return self._net.channel(self._client, address)

    async def close(self) -> None:
        pass
