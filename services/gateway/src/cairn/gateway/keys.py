"""Single keys: get, put, delete, sequence puts.

    GET    /v1/namespaces/{ns}/keys/{key}          the value (Accept: application/json: the record)
    PUT    /v1/namespaces/{ns}/keys/{key}          body = the value; If-Match / If-None-Match: *
    DELETE /v1/namespaces/{ns}/keys/{key}          If-Match
    POST   /v1/namespaces/{ns}/sequences/{prefix}  a sequence put: the key is generated

Keys often start with "/", so `/keys//pulsar/b1` is the key "/pulsar/b1"; a
percent-encoded key (`/keys/%2Fpulsar%2Fb1`) is the same key. The version id is
the ETag; the rest of the version travels in `Cairn-*` headers.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Header, Path, Query, Request, Response
from fastapi.responses import JSONResponse

from cairn.client.client import AsyncClient
from cairn.client.errors import InvalidArgument, KeyNotFound, UnexpectedVersion
from cairn.client.records import EXPECTED_RECORD_DOES_NOT_EXIST, Comparison, PutResult, Version
from cairn.gateway.headers import (
    JSON,
    OCTET_STREAM,
    ONE_TAG_OR_ANY_PATTERN,
    TAGS_OR_ANY_PATTERN,
    WriteCondition,
    etag,
    header_text,
    parse_entity_tags,
    prefers_json,
    write_precondition,
)
from cairn.gateway.models import RecordModel, VersionModel, WriteAnswer
from cairn.gateway.openapi import errors
from cairn.gateway.params import (
    IfMatch,
    IfNoneMatch,
    IndexEntries,
    KeyParam,
    NamespaceParam,
    PartitionKey,
    SessionParam,
    secondary_indexes,
    session_for_key,
)
from cairn.gateway.pool import ClientPool
from cairn.gateway.problems import Code, Problem
from cairn.gateway.settings import MAX_KEY_CHARS, STORE_MAX_KEY_BYTES, GatewaySettings

# If-Match: * on a put reads the version, then writes on condition of it; a
# record changing in between is read again, this many times at most.
MAX_EXISTS_ATTEMPTS = 5
# Components a sequence key may have (one delta each), and each delta's digits.
MAX_SEQUENCE_DELTAS = 16
MAX_DELTA_DIGITS = 9
# Each generated component: "-" and 20 digits.
SEQUENCE_COMPONENT_BYTES = 21
# A prefix short enough that its generated keys always fit the store's 16 KiB.
MAX_PREFIX_CHARS = (STORE_MAX_KEY_BYTES - SEQUENCE_COMPONENT_BYTES * MAX_SEQUENCE_DELTAS) // 4
_FIRST_DELTA = rf"[1-9][0-9]{{0,{MAX_DELTA_DIGITS - 1}}}"
_MORE_DELTAS = rf"(,[0-9]{{1,{MAX_DELTA_DIGITS}}}){{0,{MAX_SEQUENCE_DELTAS - 1}}}"
DELTAS_PATTERN = f"^{_FIRST_DELTA}{_MORE_DELTAS}$"
# A record's route (also served by fastpath.py).
KEY_PATH = "/v1/namespaces/{namespace}/keys/{key:key}"


class ComparisonName(enum.StrEnum):
    EQUAL = "equal"
    FLOOR = "floor"
    CEILING = "ceiling"
    LOWER = "lower"
    HIGHER = "higher"


_COMPARISONS = {
    ComparisonName.EQUAL: Comparison.EQUAL,
    ComparisonName.FLOOR: Comparison.FLOOR,
    ComparisonName.CEILING: Comparison.CEILING,
    ComparisonName.LOWER: Comparison.LOWER,
    ComparisonName.HIGHER: Comparison.HIGHER,
}

VERSION_HEADERS: dict[str, Any] = {
    "ETag": {"description": 'The version id, `"<versionId>"`', "schema": {"type": "string"}},
    "Cairn-Key": {
        "description": "The record's key, percent-encoded (the one found, for comparisons)",
        "schema": {"type": "string"},
    },
    "Cairn-Modifications-Count": {"schema": {"type": "integer"}},
    "Cairn-Created-Timestamp-Ms": {"schema": {"type": "integer"}},
    "Cairn-Modified-Timestamp-Ms": {"schema": {"type": "integer"}},
    "Cairn-Ephemeral": {"schema": {"type": "string", "enum": ["true", "false"]}},
    "Cairn-Session-Id": {"description": "Ephemeral records only", "schema": {"type": "integer"}},
    "Cairn-Client-Identity": {
        "description": "Ephemeral records only, percent-encoded",
        "schema": {"type": "string"},
    },
    "Cairn-Secondary-Key": {
        "description": "Reads through an index: the secondary key matched, percent-encoded",
        "schema": {"type": "string"},
    },
}

_WRITE_HEADERS: dict[str, Any] = {
    "ETag": VERSION_HEADERS["ETag"],
    "Location": {"description": "The record's URL (when created)", "schema": {"type": "string"}},
}

_RAW_VALUE_BODY: dict[str, Any] = {
    "requestBody": {
        "required": False,
        "description": "The value, raw bytes (none: an empty value)",
        "content": {OCTET_STREAM: {"schema": {"type": "string", "format": "binary"}}},
    }
}


def version_headers(key: str, version: Version, secondary_key: str | None = None) -> dict[str, str]:
    headers = {
        "ETag": etag(version.version_id),
        "Cairn-Key": header_text(key),
        "Cairn-Modifications-Count": str(version.modifications_count),
        "Cairn-Created-Timestamp-Ms": str(version.created_timestamp_ms),
        "Cairn-Modified-Timestamp-Ms": str(version.modified_timestamp_ms),
        "Cairn-Ephemeral": "true" if version.ephemeral else "false",
    }
    if version.session_id is not None:
        headers["Cairn-Session-Id"] = str(version.session_id)
    if version.client_identity is not None:
        headers["Cairn-Client-Identity"] = header_text(version.client_identity)
    if secondary_key is not None:
        headers["Cairn-Secondary-Key"] = header_text(secondary_key)
    return headers


def key_location(namespace: str, key: str, partition_key: str | None) -> str:
    path = f"/v1/namespaces/{quote(namespace, safe='')}/keys/{quote(key, safe='')}"
    return path + (f"?{urlencode({'partition_key': partition_key})}" if partition_key else "")


def write_answer(
    namespace: str, result: PutResult, partition_key: str | None, *, created: bool
) -> JSONResponse:
    body = WriteAnswer(key=result.key, version=VersionModel.of(result.version))
    headers = {"ETag": etag(result.version.version_id)}
    if created:
        headers["Location"] = key_location(namespace, result.key, partition_key)
    return JSONResponse(body.model_dump(), status_code=201 if created else 200, headers=headers)


def router(settings: GatewaySettings, pool: ClientPool) -> APIRouter:
    api = APIRouter(tags=["keys"])

    @api.get(
        KEY_PATH,
        summary="Read a record",
        response_class=Response,
        responses={
            200: {
                "description": "The value (application/octet-stream, the default) or, with "
                "`Accept: application/json`, the record with its value in base64",
                "headers": VERSION_HEADERS,
                "content": {
                    OCTET_STREAM: {"schema": {"type": "string", "format": "binary"}},
                    JSON: {"schema": {"$ref": "#/components/schemas/RecordModel"}},
                },
            },
            304: {"description": "If-None-Match named the current version"},
            **errors(Code.KEY_NOT_FOUND, Code.NAMESPACE_NOT_FOUND, Code.UNAVAILABLE),
        },
    )
    async def get_key(
        request: Request,
        namespace: NamespaceParam,
        key: KeyParam,
        partition_key: PartitionKey = None,
        comparison: Annotated[
            ComparisonName,
            Query(description="Which record: this key, or the nearest below/above it"),
        ] = ComparisonName.EQUAL,
        index: Annotated[
            str | None,
            Query(
                min_length=1,
                max_length=MAX_KEY_CHARS,
                description="Look `key` up as a secondary key of this index",
            ),
        ] = None,
        if_none_match: Annotated[
            str | None,
            Header(
                alias="If-None-Match",
                pattern=TAGS_OR_ANY_PATTERN,
                description='`"<version>"[, ...]` or `*`: 304 if it matches',
            ),
        ] = None,
    ) -> Response:
        not_modified = parse_entity_tags(if_none_match) if if_none_match is not None else None
        async with pool.lease(namespace) as client:
            record = await client.get(
                key,
                comparison=_COMPARISONS[comparison],
                partition_key=partition_key,
                secondary_index=index,
            )
        headers = version_headers(record.key, record.version, record.secondary_index_key)
        if not_modified is not None and not_modified.matches(record.version.version_id):
            return Response(status_code=304, headers={"ETag": headers["ETag"]})
        if prefers_json(request.headers.get("accept")):
            return JSONResponse(RecordModel.of(record).model_dump(), headers=headers)
        return Response(record.value or b"", media_type=OCTET_STREAM, headers=headers)

    @api.put(
        KEY_PATH,
        summary="Write a record",
        response_model=WriteAnswer,
        status_code=200,
        max_body_size=settings.max_value_bytes,
        openapi_extra=_RAW_VALUE_BODY,
        responses={
            201: {"description": "Created", "model": WriteAnswer, "headers": _WRITE_HEADERS},
            200: {"description": "Updated", "headers": _WRITE_HEADERS},
            **errors(
                Code.NAMESPACE_NOT_FOUND,
                Code.SESSION_EXPIRED,
                Code.VERSION_MISMATCH,
                Code.UNAVAILABLE,
                Code.OUTCOME_UNKNOWN,
            ),
        },
    )
    async def put_key(
        request: Request,
        namespace: NamespaceParam,
        key: KeyParam,
        partition_key: PartitionKey = None,
        session: SessionParam = None,
        index: IndexEntries = [],  # noqa: B006 - FastAPI copies defaults per request
        if_match: IfMatch = None,
        if_none_match: IfNoneMatch = None,
    ) -> Response:
        precondition = write_precondition(if_match, if_none_match)
        indexes = secondary_indexes(index)
        value = await request.body()
        async with pool.lease(namespace) as client:
            session_id, identity = (
                session_for_key(
                    session, namespace, client, key, partition_key, settings.session_key
                )
                if session is not None
                else (None, None)
            )

            async def put(expected_version: int | None) -> PutResult:
                return await client.put(
                    key,
                    value,
                    expected_version=expected_version,
                    partition_key=partition_key,
                    session_id=session_id,
                    secondary_indexes=indexes or None,
                    client_identity=identity,
                )

            if precondition.condition is WriteCondition.NEVER:
                raise Problem(
                    Code.VERSION_MISMATCH,
                    "If-Match and If-None-Match: * together: no record can satisfy both",
                )
            if precondition.condition is WriteCondition.EXISTS:
                result = await _put_if_exists(client, key, partition_key, put)
            elif precondition.condition is WriteCondition.ABSENT:
                result = await put(EXPECTED_RECORD_DOES_NOT_EXIST)
            else:
                result = await put(precondition.version_id)
        # A record's first version has no modifications: this put created it.
        created = result.version.modifications_count == 0
        return write_answer(namespace, result, partition_key, created=created)

    @api.delete(
        KEY_PATH,
        summary="Delete a record",
        status_code=204,
        response_class=Response,
        responses={
            204: {"description": "Deleted"},
            **errors(
                Code.KEY_NOT_FOUND,
                Code.NAMESPACE_NOT_FOUND,
                Code.VERSION_MISMATCH,
                Code.UNAVAILABLE,
                Code.OUTCOME_UNKNOWN,
            ),
        },
    )
    async def delete_key(
        namespace: NamespaceParam,
        key: KeyParam,
        partition_key: PartitionKey = None,
        if_match: Annotated[
            str | None,
            Header(
                alias="If-Match",
                pattern=ONE_TAG_OR_ANY_PATTERN,
                description='`"<version>"`: delete only at that version; `*`: any',
            ),
        ] = None,
    ) -> Response:
        precondition = write_precondition(if_match, None)
        async with pool.lease(namespace) as client:
            # If-Match: * asks only that the record exist, as every delete does
            # (a missing record is a 404).
            await client.delete(
                key,
                expected_version=precondition.version_id,
                partition_key=partition_key,
            )
        return Response(status_code=204)

    @api.post(
        "/v1/namespaces/{namespace}/sequences/{prefix:path}",
        summary="Write a record under the next key of a sequence",
        response_model=WriteAnswer,
        status_code=201,
        max_body_size=settings.max_value_bytes,
        openapi_extra=_RAW_VALUE_BODY,
        responses={
            201: {"description": "Created; `key` is the generated key", "headers": _WRITE_HEADERS},
            **errors(
                Code.NAMESPACE_NOT_FOUND,
                Code.SESSION_EXPIRED,
                Code.CONFLICT,
                Code.UNAVAILABLE,
                Code.OUTCOME_UNKNOWN,
            ),
        },
    )
    async def sequence_put(
        request: Request,
        namespace: NamespaceParam,
        prefix: Annotated[
            str,
            Path(
                min_length=1,
                max_length=MAX_PREFIX_CHARS,
                description="The sequence's prefix; keys are `<prefix>-%020d[-%020d...]`",
                examples=["/queue/item"],
            ),
        ],
        partition_key: Annotated[
            str,
            Query(
                min_length=1,
                max_length=MAX_KEY_CHARS,
                description="Required: a sequence lives on one shard",
            ),
        ],
        delta: Annotated[
            str,
            Query(
                pattern=DELTAS_PATTERN,
                description="Added to each component of the highest key: one number per "
                "component, comma-separated, the first at least 1 (e.g. `1` or `1,0`)",
            ),
        ] = "1",
        session: SessionParam = None,
        index: IndexEntries = [],  # noqa: B006 - FastAPI copies defaults per request
    ) -> Response:
        # The prefix's bound keeps generated keys within the store's limit.
        deltas = [int(part) for part in delta.split(",")]
        indexes = secondary_indexes(index)
        value = await request.body()
        async with pool.lease(namespace) as client:
            session_id, identity = (
                session_for_key(
                    session, namespace, client, prefix, partition_key, settings.session_key
                )
                if session is not None
                else (None, None)
            )
            try:
                result = await client.put(
                    prefix,
                    value,
                    partition_key=partition_key,
                    sequence_key_deltas=deltas,
                    session_id=session_id,
                    secondary_indexes=indexes or None,
                    client_identity=identity,
                )
            except InvalidArgument as error:
                # The request's form was checked above; what the store refuses
                # now is the sequence as it stands: its highest key has more
                # components than the put has deltas, or a component would
                # pass 2^64 - 1.
                raise Problem(
                    Code.CONFLICT,
                    f"the sequence {prefix!r} does not take this put: its keys have more "
                    f"components than the {len(deltas)} deltas given, or a component would "
                    f"overflow ({error})",
                ) from None
        return write_answer(namespace, result, partition_key, created=True)

    return api


async def _put_if_exists(
    client: AsyncClient,
    key: str,
    partition_key: str | None,
    put: Callable[[int | None], Awaitable[PutResult]],
) -> PutResult:
    """If-Match: *: write on condition of the version read; a record changed in
    between still exists, so read it again; one deleted fails the condition."""
    for _ in range(MAX_EXISTS_ATTEMPTS):
        try:
            current = await client.get(key, include_value=False, partition_key=partition_key)
        except KeyNotFound:
            detail = f"If-Match: * but {key!r} does not exist"
            raise Problem(Code.VERSION_MISMATCH, detail) from None
        try:
            return await put(current.version.version_id)
        except UnexpectedVersion:
            continue
    raise Problem(
        Code.VERSION_MISMATCH,
        f"{key!r} changed {MAX_EXISTS_ATTEMPTS} times while writing it on If-Match: *",
    )
