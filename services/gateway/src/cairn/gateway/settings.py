"""The gateway's settings: one frozen object, every limit with its unit."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cairn.client.options import ClientOptions
from cairn.common.auth.config import AuthConfig
from cairn.common.hashing import KeyHash

KiB = 1024
MiB = 1024 * KiB

# Limits the OpenAPI document states (so they are constants, not settings).
#
# Session timeouts the storage pods accept.
MIN_SESSION_TIMEOUT_MS = 2_000
MAX_SESSION_TIMEOUT_MS = 300_000
MAX_CLIENT_IDENTITY_CHARS = 256
# Keys, partition keys, range bounds, sequence prefixes. The store's limit is
# 16 KiB of UTF-8; JSON Schema counts characters, and 4096 characters always fit
# (4 bytes at most each), so the document can state the limit exactly.
STORE_MAX_KEY_BYTES = 16 * KiB
MAX_KEY_CHARS = STORE_MAX_KEY_BYTES // 4
MAX_NAMESPACE_CHARS = 256
# Secondary index entries of one put (`name:secondaryKey` query parameters).
MAX_SECONDARY_INDEXES = 16
MAX_INDEX_NAME_CHARS = 256
MAX_SECONDARY_KEY_CHARS = 2048
# Opaque tokens (cursors, session tokens, event ids): a cursor holds up to six
# keys of 16 KiB, compressed, in base64.
MAX_TOKEN_CHARS = 128 * KiB


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    # Storage pods to read the shard map from ("host:port"; any pod serves it).
    storage_addresses: tuple[str, ...]
    # The controller's admin API ("http://host:port"); None: the admin endpoints
    # answer 503 (a standalone server has no controller).
    controller_url: str | None = None
    # Bearer token every request but the probes must carry; None: no auth. The
    # older, single-secret gate; `auth` is the per-caller one (not both).
    token: str | None = None
    # Callers' tokens and the rules (the pods' file): with it enabled, each request
    # is made to the pods on behalf of its caller (callers.py).
    auth: AuthConfig = field(default_factory=AuthConfig)
    # The gateway's own credential to the pods (a token of role gateway).
    pod_token: str | None = field(default=None, repr=False)
    # Seals session tokens (tokens.py); every gateway of a cluster has the same.
    session_key: bytes | None = field(default=None, repr=False)
    # The namespace the gateway's first client connects to; every other namespace
    # is a sibling of it sharing its connections.
    root_namespace: str = "default"
    client_options: ClientOptions = field(default_factory=ClientOptions)
    # Namespaces whose keys are routed otherwise than by XXH3 (the `oxia` 0.2.1
    # Python client's XXH64, to reach the data it wrote).
    key_hashes: Mapping[str, KeyHash] = field(default_factory=dict)
    # The gateway's certificate directory (cert-manager layout; it names
    # `gateway/<name>`): presented to the controller, and its CA checks the
    # controller's certificate. The HTTPS listener and the storage clients
    # (`client_options.tls`) are set up from the same directory by __main__.
    # None: plaintext to the controller.
    tls_dir: Path | None = None

    # Request bodies. A value is the storage pods' limit (4 MiB); a JSON body
    # (sessions, admin actions) is small.
    max_value_bytes: int = 4 * MiB
    max_json_body_bytes: int = 64 * KiB
    # The request line and headers. Every request the document allows fits:
    # the largest is a put with a 4096-character key, partition key, session
    # token and 16 index entries, percent-encoded (12 bytes per 4-byte character)
    # about 700 KiB.
    max_request_head_bytes: int = 1 * MiB

    # Scans: page sizes. A record page also ends once its values reach
    # `max_page_bytes` (a thousand 4 MiB values would not fit in memory).
    default_page_limit: int = 100
    max_page_limit: int = 1000
    max_page_bytes: int = 16 * MiB

    # Clients kept, one per namespace served (with auth: per namespace and caller);
    # the least recently used idle one is closed beyond this.
    max_namespaces: int = 64

    # Change feed: a comment line after this long without an event keeps proxies
    # and clients from timing the stream out.
    feed_keepalive_interval_s: float = 15.0
    # How long a new stream waits for its first batch before answering 200, so
    # that a trimmed resume point is a 410 rather than an error inside the stream.
    feed_open_wait_s: float = 1.0
    # Change feed streams open at once (each holds a gRPC stream per shard);
    # more are refused with a 503 and Retry-After.
    max_open_feeds: int = 1000
    # Batches held back while not every shard has reported its starting offset
    # (each event id must cover every shard); a stream needing more ends.
    max_feed_pending_batches: int = 10_000

    # Sessions created without a timeout get this one.
    default_session_timeout_ms: int = 30_000

    # The controller: each proxied call's deadline.
    controller_timeout_s: float = 10.0

    # A 503 caused by a storage timeout tells clients to retry after this long.
    retry_after_s: int = 1
    # Graceful shutdown: open streams (change feeds) get this long to end.
    shutdown_grace_s: float = 5.0

    def __post_init__(self) -> None:
        if not self.storage_addresses:
            raise ValueError("at least one storage address is needed")
        if self.token is not None and not self.token:
            raise ValueError("an empty bearer token would let anyone in; leave it unset instead")
        if self.token is not None and self.auth.enabled:
            raise ValueError("a single gateway token and an auth configuration exclude each other")
        if self.auth.enabled and not self.session_key:
            raise ValueError("with auth on, session tokens need a session key (--session-key-file)")
        if not 1 <= self.default_page_limit <= self.max_page_limit:
            raise ValueError("default_page_limit must be between 1 and max_page_limit")
        if not (
            MIN_SESSION_TIMEOUT_MS <= self.default_session_timeout_ms <= MAX_SESSION_TIMEOUT_MS
        ):
            raise ValueError("default_session_timeout_ms must be within the session bounds")
        for name in (
            "max_value_bytes",
            "max_json_body_bytes",
            "max_request_head_bytes",
            "max_page_bytes",
            "max_namespaces",
            "max_feed_pending_batches",
            "max_open_feeds",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.feed_keepalive_interval_s <= 0 or self.controller_timeout_s <= 0:
            raise ValueError("intervals and timeouts must be positive")
        if self.feed_open_wait_s < 0 or self.shutdown_grace_s < 0:
            raise ValueError("waits must not be negative")
