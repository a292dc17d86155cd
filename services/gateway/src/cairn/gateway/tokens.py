"""Opaque tokens the gateway hands out and takes back. Pure.

Every piece of state a client carries between requests lives in a token, not
in a gateway process, so that any gateway behind one address can take the next
request: a session token holds the storage session id of each shard, a change
feed position holds each shard's last delivered offset, a scan cursor (see
`cursors.py`) holds the query and where it stopped.

A token is zlib-compressed JSON in unpadded base64url, tagged with its kind so
that one kind is never taken for another. Cursors and feed positions are not
signed: they hold nothing a caller could not ask for directly. Session tokens
are, when the gateway has a session key (`--session-key-file`, shared by every
gateway of a cluster): an HMAC-SHA256 of the packed token, appended, over a body
that names the principal that created the session. A token changed by a byte, or
made by someone without the key, is refused; a genuine token of another
principal is refused too (and the pods refuse that principal the session
anyway: they record each session's owner).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
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


# Unpadded base64url of an HMAC-SHA256.
SIGNATURE_CHARS = 43


class TokenError(ValueError):
    """A token that is malformed, of another kind, or from another namespace."""


class ForeignToken(TokenError):
    """A genuine token that belongs to another principal."""


def _signature(key: bytes, text: str) -> str:
    digest = hmac.new(key, text.encode("ascii"), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def seal(text: str, key: bytes | None) -> str:
    return text if key is None else text + _signature(key, text)


def unseal(token: str, key: bytes | None, kind: str) -> str:
    """The packed text of a sealed token; TokenError if the seal is wrong."""
    if key is None:
        return token
    text, signature = token[:-SIGNATURE_CHARS], token[-SIGNATURE_CHARS:]
    if not text or not hmac.compare_digest(signature, _signature(key, text)):
        raise TokenError(f"not a {kind} token of this cluster")
    return text


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
    # The principal that created it ("role:name"); "" when the gateway runs without auth.
    owner: str = ""

    KIND = "session"

    def encode(self, key: bytes | None = None) -> str:
        ids = {str(shard): session for shard, session in sorted(self.session_ids.items())}
        body: dict[str, Any] = {"ns": self.namespace, "s": ids}
        if self.client_identity is not None:
            body["i"] = self.client_identity
        if self.owner:
            body["o"] = self.owner
        return seal(pack(self.KIND, body), key)

    @classmethod
    def decode(
        cls, token: str, namespace: str, key: bytes | None = None, owner: str = ""
    ) -> SessionToken:
        """`key`: the session key the token must be sealed with; `owner`: the
        caller, who must be the one that created it (ForeignToken otherwise)."""
        document = unpack(cls.KIND, unseal(token, key, cls.KIND))
        identity = document.get("i")
        if identity is not None and not isinstance(identity, str):
            raise TokenError(f"not a {cls.KIND} token")
        token_owner = document.get("o", "")
        if not isinstance(token_owner, str):
            raise TokenError(f"not a {cls.KIND} token")
        decoded = cls(
            _string(document, "ns", cls.KIND),
            _shard_map(document.get("s"), cls.KIND, minimum=0),
            identity,
            token_owner,
        )
        if decoded.namespace != namespace:
            raise TokenError(f"the session belongs to namespace {decoded.namespace!r}")
        if not decoded.session_ids:
            raise TokenError("not a session token")
        if decoded.owner != owner:
            raise ForeignToken("the session belongs to another principal")
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
