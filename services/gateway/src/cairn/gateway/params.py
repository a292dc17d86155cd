"""Request parameters the routers share, declared once with the bounds the
OpenAPI document states (FastAPI checks them: a 400 problem), and the checks
a declaration cannot express."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from fastapi import Header, Path, Query
from starlette.convertors import Convertor, register_url_convertor

from cairn.client.client import AsyncClient
from cairn.gateway.callers import decode_session
from cairn.gateway.headers import ANY_PATTERN, ONE_TAG_OR_ANY_PATTERN
from cairn.gateway.problems import Code, Problem
from cairn.gateway.settings import (
    MAX_INDEX_NAME_CHARS,
    MAX_KEY_CHARS,
    MAX_NAMESPACE_CHARS,
    MAX_SECONDARY_INDEXES,
    MAX_SECONDARY_KEY_CHARS,
    MAX_TOKEN_CHARS,
)
from cairn.gateway.tokens import TOKEN_PATTERN, TokenError

NAMESPACE_EXAMPLE = "default"
# A secondary index entry: `name:secondaryKey`, the name 1 to 256 characters.
INDEX_ENTRY_PATTERN = rf"^[^:]{{1,{MAX_INDEX_NAME_CHARS}}}:"
MAX_INDEX_ENTRY_CHARS = MAX_INDEX_NAME_CHARS + 1 + MAX_SECONDARY_KEY_CHARS


class KeyPathConvertor(Convertor[str]):
    """A key in a route's path (`{key:key}`), whatever characters it holds.
    Starlette's `path` convertor is `.*`, which stops at a line break, and the
    route's closing `$` also matches before a final one: `/keys/a%0A` was routed
    as the key "a", and `/keys/a%0Ab` as no route (found by the schemathesis run)."""

    regex = "(?s:.*)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("key", KeyPathConvertor())


NamespaceParam = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_NAMESPACE_CHARS,
        description="The namespace",
        examples=[NAMESPACE_EXAMPLE],
    ),
]
KeyParam = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_KEY_CHARS,
        description='The key; "/" may stay unencoded (`/keys//a/b` is the key "/a/b")',
        examples=["/pulsar/brokers/b1"],
    ),
]
PartitionKey = Annotated[
    str | None,
    Query(
        max_length=MAX_KEY_CHARS,
        description="Route by this key instead (every key of a partition on one shard)",
    ),
]
SessionParam = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=MAX_TOKEN_CHARS,
        pattern=TOKEN_PATTERN,
        description="A session token: the record is ephemeral, deleted with the session",
    ),
]
IndexEntries = Annotated[
    list[Annotated[str, Query(pattern=INDEX_ENTRY_PATTERN, max_length=MAX_INDEX_ENTRY_CHARS)]],
    Query(
        alias="index",
        max_length=MAX_SECONDARY_INDEXES,
        description="Secondary index entries of the record, each `name:secondaryKey` "
        "(one per index name)",
    ),
]
IfMatch = Annotated[
    str | None,
    Header(
        alias="If-Match",
        pattern=ONE_TAG_OR_ANY_PATTERN,
        description='`"<version>"`: write only at that version; `*`: only if it exists',
    ),
]
IfNoneMatch = Annotated[
    str | None,
    Header(alias="If-None-Match", pattern=ANY_PATTERN, description="`*`: create only"),
]


def secondary_indexes(entries: Sequence[str]) -> dict[str, str]:
    """`index=name:secondaryKey` query parameters as {index name: secondary key}
    (their form and count are checked as parameters)."""
    indexes: dict[str, str] = {}
    for entry in entries:
        name, separator, secondary_key = entry.partition(":")
        if not separator or not name:
            raise Problem(
                Code.INVALID_ARGUMENT,
                f"index entry {entry!r}: expected name:secondaryKey",
            )
        if name in indexes:
            # The client library takes one secondary key per index and put.
            raise Problem(Code.INVALID_ARGUMENT, f"index {name!r} given twice")
        indexes[name] = secondary_key
    return indexes


def session_for_key(
    token: str,
    namespace: str,
    client: AsyncClient,
    key: str,
    partition_key: str | None,
    session_key: bytes | None,
) -> tuple[int, str | None]:
    """The storage session of a REST session on the shard that holds `key`, and the
    client identity its records carry (None: the gateway's own)."""
    try:
        session = decode_session(token, namespace, session_key)
    except TokenError as error:
        raise Problem(Code.INVALID_ARGUMENT, f"session: {error}") from None
    shard = client.shard_for(key, partition_key)
    session_id = session.session_ids.get(shard)
    if session_id is None:
        raise Problem(
            Code.INVALID_ARGUMENT,
            f"the session has no part on shard {shard}: it was made for another shard map",
        )
    return session_id, session.client_identity
