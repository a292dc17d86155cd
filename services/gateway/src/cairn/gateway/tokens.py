"""Opaque tokens the gateway hands out and takes back. Pure.

Every piece of state a client carries between requests lives in a token, not
in a gateway process, so that any gateway behind one address can take the next
request: a session token holds the storage session id of each shard, a change
feed position holds each shard's last delivered offset, a scan cursor (see
`cursors.py`) holds the query and where it stopped.

A token is zlib-compressed JSON in unpadded base64url, tagged with its kind so
that one kind is never taken for another. Tokens are not signed: they hold
nothing a caller could not ask for directly (bearer auth guards the gateway).
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cairn.gateway.settings import MAX_TOKEN_CHARS

FORMAT_VERSION = 1
# Decoded tokens larger than this are refused (a compressed token can expand a
# lot; this bounds the work a hostile one causes). Keys are at most 16 KiB, and
# a cursor holds at most four of them.
MAX_DECODED_BYTES = 256 * 1024
# Encoded tokens longer than this are refused before decoding.
MAX_ENCODED_CHARS = MAX_TOKEN_CHARS
# Every token is base64url (the OpenAPI document states it).
TOKEN_PATTERN = r"^[A-Za-z0-9_-]+$"


class TokenError(ValueError):
    """A token that is malformed, of another kind, or from another namespace."""


def pack(kind: str, body: Mapping[str, Any]) -> str:
    document = {"v": FORMAT_VERSION, "t": kind, **body}
    # ASCII escapes: any string (even an unpaired surrogate) encodes.
    raw = json.dumps(document, separators=(",", ":")).encode("ascii")
    return base64.urlsafe_b64encode(zlib.compress(raw, 6)).rstrip(b"=").decode("ascii")


def unpack(kind: str, token: str) -> dict[str, Any]:
    """The body of a token of `kind`; TokenError if it is not one."""
    refusal = TokenError(f"not a {kind} token")
    if not token or len(token) > MAX_ENCODED_CHARS:
        raise refusal
    try:
        compressed = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        inflater = zlib.decompressobj()
        raw = inflater.decompress(compressed, MAX_DECODED_BYTES)
    except (binascii.Error, zlib.error, ValueError):
        raise refusal from None
    if inflater.unconsumed_tail or not inflater.eof:
        raise refusal  # larger than MAX_DECODED_BYTES, or truncated
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        raise refusal from None
    if (
        not isinstance(document, dict)
        or document.get("v") != FORMAT_VERSION
        or document.get("t") != kind
    ):
        raise refusal
    return document


def _shard_map(value: Any, kind: str, *, minimum: int) -> dict[int, int]:
    """A {"shard": integer >= minimum} JSON object as {shard: integer}."""
    if not isinstance(value, dict):
        raise TokenError(f"not a {kind} token")
    answer = {}
    for shard_text, number in value.items():
        try:
            shard = int(shard_text)
        except ValueError:
            raise TokenError(f"not a {kind} token") from None
        if (
            shard < 0
            or str(shard) != shard_text
            or isinstance(number, bool)
            or not isinstance(number, int)
            or number < minimum
        ):
            raise TokenError(f"not a {kind} token")
        answer[shard] = number
    return answer


def _string(document: Mapping[str, Any], name: str, kind: str) -> str:
    value = document.get(name)
    if not isinstance(value, str):
        raise TokenError(f"not a {kind} token")
    return value


@dataclass(frozen=True, slots=True)
class SessionToken:
    """A REST session: one storage session on every shard of the namespace."""

    namespace: str
    session_ids: Mapping[int, int]  # shard -> session id
    # Recorded on the ephemeral records written under it; None: the gateway's own.
    client_identity: str | None = None

    KIND = "session"

    def encode(self) -> str:
        ids = {str(shard): session for shard, session in sorted(self.session_ids.items())}
        body: dict[str, Any] = {"ns": self.namespace, "s": ids}
        if self.client_identity is not None:
            body["i"] = self.client_identity
        return pack(self.KIND, body)

    @classmethod
    def decode(cls, token: str, namespace: str) -> SessionToken:
        document = unpack(cls.KIND, token)
        identity = document.get("i")
        if identity is not None and not isinstance(identity, str):
            raise TokenError(f"not a {cls.KIND} token")
        decoded = cls(
            _string(document, "ns", cls.KIND),
            _shard_map(document.get("s"), cls.KIND, minimum=0),
            identity,
        )
        if decoded.namespace != namespace:
            raise TokenError(f"the session belongs to namespace {decoded.namespace!r}")
        if not decoded.session_ids:
            raise TokenError("not a session token")
        return decoded


@dataclass(frozen=True, slots=True)
class FeedPosition:
    """Where a change feed is: the last offset delivered of each shard. Resuming
    from it replays nothing delivered before it and skips nothing after it."""

    namespace: str
    offsets: Mapping[int, int]  # shard -> offset of the last batch delivered

    KIND = "feed"

    def encode(self) -> str:
        offsets = {str(shard): offset for shard, offset in sorted(self.offsets.items())}
        return pack(self.KIND, {"ns": self.namespace, "o": offsets})

    @classmethod
    def decode(cls, token: str, namespace: str) -> FeedPosition:
        document = unpack(cls.KIND, token)
        decoded = cls(
            _string(document, "ns", cls.KIND),
            # -1: a shard whose log was empty when the feed started.
            _shard_map(document.get("o"), cls.KIND, minimum=-1),
        )
        if decoded.namespace != namespace:
            raise TokenError(f"the event id belongs to namespace {decoded.namespace!r}")
        return decoded
