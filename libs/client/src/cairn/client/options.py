"""The client's settings: one frozen object, every limit with its unit."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from cairn.common.hashing import KeyHash
from cairn.common.tls import TlsFiles

MiB = 1024 * 1024


def _new_identity() -> str:
    return f"cairn-client-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True, slots=True)
class ClientOptions:
    # Each call (with its retries) fails with RequestTimeout after this long.
    request_timeout_s: float = 30.0
    # How long `connect` waits for the first complete shard map.
    connect_timeout_s: float = 10.0

    # Write batching, per shard. An idle stream sends what is queued at once; with a
    # request out, the next goes once half as many operations wait (two half batches
    # keep client and server busy at the same time), up to `max_inflight_batches`
    # requests out. So batches grow with load and an idle client sends at once.
    # `batch_linger_ms` > 0 adds a wait before sending a batch that is not full,
    # trading latency for larger batches.
    batching: bool = True
    batch_linger_ms: float = 0.0
    max_batch_ops: int = 1000
    max_batch_bytes: int = 1 * MiB
    max_inflight_batches: int = 2
    # Operations waiting to be sent to one shard; more callers wait for room.
    max_pending_ops_per_shard: int = 20_000
    # Gets are batched the same way, into one Read request per shard.
    max_read_batch_gets: int = 500

    # Retries of retryable failures (leader moving, pod restarting, overload):
    # exponential backoff with full jitter between these bounds.
    retry_initial_backoff_s: float = 0.01
    retry_max_backoff_s: float = 1.0

    # Sessions for ephemeral records, one per shard, kept alive by the client.
    session_timeout_ms: int = 15_000
    client_identity: str = field(default_factory=_new_identity)

    # Sent as `authorization: Bearer <token>` on every call (a static token or a
    # JWT; see the README's "Authentication and authorization"). None: no credentials.
    bearer_token: str | None = field(default=None, repr=False)

    # gRPC message size bound, both ways (the server's limit is larger).
    max_message_bytes: int = 64 * MiB

    # How keys are hashed onto shards: XXH3, as the shard map says and Oxia's Go and
    # Java clients do; XXH64 only to reach data the `oxia` 0.2.1 Python client wrote
    # (it hashes that way whatever the map says).
    key_hash: KeyHash = KeyHash.XXH3

    # TLS to the servers: the CA to check them by (None: the system's roots) and
    # optionally a client certificate (`TlsFiles.in_directory` for a directory in
    # cert-manager's layout). None: plaintext. Files are re-read when they change.
    tls: TlsFiles | None = None

    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        if self.bearer_token is None:
            return ()
        return (("authorization", f"Bearer {self.bearer_token}"),)

    def __post_init__(self) -> None:
        if self.request_timeout_s <= 0 or self.connect_timeout_s <= 0:
            raise ValueError("timeouts must be positive")
        if self.max_batch_ops < 1 or self.max_batch_bytes < 1 or self.max_inflight_batches < 1:
            raise ValueError("batch bounds must be at least 1")
        if self.max_pending_ops_per_shard < 1 or self.max_read_batch_gets < 1:
            raise ValueError("queue bounds must be at least 1")
        if not 2_000 <= self.session_timeout_ms <= 300_000:
            raise ValueError("session_timeout_ms must be between 2 s and 5 min")
        if self.batch_linger_ms < 0:
            raise ValueError("batch_linger_ms must not be negative")
