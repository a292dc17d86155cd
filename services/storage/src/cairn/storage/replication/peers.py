"""gRPC channels to other storage pods, one per internal address, reused.

With TLS (the pod's own certificate directory), the channels are mutual TLS:
the pod presents its certificate (role storage) and checks the peer's against
the cluster CA. A channel is made again when the certificate files change, so
connections made after a rotation present the new certificate.
"""

from __future__ import annotations

import grpc

from cairn.common.tls import ChannelCache, TlsSource

# Keepalive pings find a peer that vanished (a killed pod, a cut network) without
# waiting for TCP to time out.
_CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]


class PeerChannels:
    def __init__(self, tls: TlsSource | None = None) -> None:
        self._cache = ChannelCache(tls, _CHANNEL_OPTIONS)

    def get(self, address: str) -> grpc.aio.Channel:
        return self._cache.get(address)

    async def close(self) -> None:
        await self._cache.close()
