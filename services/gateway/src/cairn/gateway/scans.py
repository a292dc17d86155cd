"""Key and record scans with cursor pagination, and delete-range.

    GET    /v1/namespaces/{ns}/keys?start=&end=      keys in [start, end), a page at a time
    GET    /v1/namespaces/{ns}/records?start=&end=   the same with values and versions
    DELETE /v1/namespaces/{ns}/keys?start=&end=      delete every key in [start, end)

A page is read from the client's merged, streaming scan and stops after
`limit + 1` items (the extra one says whether there is a next page), or once
its values add up to `max_page_bytes`. With `index`, `start` and `end` bound
secondary keys and the items are the primary records, ordered by secondary
key.
"""

# No `from __future__ import annotations` here: the page limit's bounds come
# from the settings, inside router(), and FastAPI must see those annotations
# evaluated (a string annotation naming a local cannot be resolved later).
import contextlib
from typing import Annotated

from fastapi import APIRouter, Query, Response

from cairn.client.client import AsyncClient
from cairn.client.records import Record
from cairn.gateway.cursors import Cursor, CursorError, ScanKind, ScanQuery, resolve_query
from cairn.gateway.models import KeysPage, RecordModel, RecordsPage
from cairn.gateway.openapi import errors
from cairn.gateway.params import NamespaceParam, PartitionKey
from cairn.gateway.pool import ClientPool
from cairn.gateway.problems import Code, Problem
from cairn.gateway.settings import MAX_KEY_CHARS, MAX_TOKEN_CHARS, GatewaySettings
from cairn.gateway.tokens import TOKEN_PATTERN

# The page routes (also served by fastpath.py).
KEYS_PATH = "/v1/namespaces/{namespace}/keys"
RECORDS_PATH = "/v1/namespaces/{namespace}/records"

Start = Annotated[
    str | None,
    Query(max_length=MAX_KEY_CHARS, description="First key (inclusive); default: the lowest key"),
]
End = Annotated[
    str,
    Query(
        max_length=MAX_KEY_CHARS,
        description="End key (exclusive; empty: an empty range). In the hierarchical "
        "order, `/a/`..`/a//` holds exactly the children of `/a`",
    ),
]
CursorParam = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=MAX_TOKEN_CHARS,
        pattern=TOKEN_PATTERN,
        description="`nextCursor` of the previous page (of the same query; parameters "
        "other than `end` and `limit` may be left out)",
    ),
]
Index = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=MAX_KEY_CHARS,
        description="Scan this secondary index: start and end bound secondary keys",
    ),
]


def query_of(
    namespace: str,
    kind: ScanKind,
    start: str | None,
    end: str | None,
    cursor: str | None,
    partition_key: str | None,
    index: str | None,
) -> tuple[ScanQuery, Cursor | None]:
    try:
        decoded = Cursor.decode(cursor) if cursor is not None else None
        return (
            resolve_query(decoded, namespace, kind, start, end, partition_key, index),
            decoded,
        )
    except CursorError as error:
        raise Problem(Code.INVALID_ARGUMENT, str(error)) from None


async def read_keys(
    client: AsyncClient,
    query: ScanQuery,
    cursor: Cursor | None,
    limit: int,
    max_page_bytes: int,
) -> tuple[list[str], str | None]:
    """A page of keys and the cursor of the next (None: the last page)."""
    if query.index is not None:
        # An index scan's position needs each item's secondary key, which
        # only the record scan reports.
        records, next_cursor = await read_records(client, query, cursor, limit, max_page_bytes)
        return [r.key for r in records], next_cursor
    start = cursor.resume_start() if cursor is not None else query.start
    keys: list[str] = []
    iterator = client.iter_list(start, query.end, partition_key=query.partition_key)
    async with contextlib.aclosing(iterator) as items:
        async for key in items:
            keys.append(key)
            if len(keys) > limit:
                break
    next_cursor = None
    if len(keys) > limit:
        keys = keys[:limit]
        next_cursor = Cursor(query, keys[-1]).encode()
    return keys, next_cursor


async def read_records(
    client: AsyncClient,
    query: ScanQuery,
    cursor: Cursor | None,
    limit: int,
    max_page_bytes: int,
) -> tuple[list[Record], str | None]:
    """A page of records (ending early once their values reach `max_page_bytes`)
    and the cursor of the next (None: the last page)."""
    start = cursor.resume_start() if cursor is not None else query.start
    order = client.shard_map.key_order
    records: list[Record] = []
    value_bytes = 0
    more = False
    iterator = client.range_scan(
        start,
        query.end,
        partition_key=query.partition_key,
        secondary_index=query.index,
    )
    async with contextlib.aclosing(iterator) as items:
        async for record in items:
            if cursor is not None and cursor.already_returned(
                record.key, record.secondary_index_key, order
            ):
                continue
            if len(records) == limit or (records and value_bytes >= max_page_bytes):
                more = True
                break
            records.append(record)
            value_bytes += len(record.value or b"")
    next_cursor = None
    if more:
        last = records[-1]
        secondary = last.secondary_index_key if query.index is not None else None
        if query.index is not None and secondary is None:
            raise Problem(
                Code.UNAVAILABLE,
                "the storage did not report the secondary key of an index scan's record",
            )
        next_cursor = Cursor(query, last.key, secondary).encode()
    return records, next_cursor


def router(settings: GatewaySettings, pool: ClientPool) -> APIRouter:
    api = APIRouter(tags=["scans"])
    Limit = Annotated[
        int,
        Query(
            ge=1,
            le=settings.max_page_limit,
            description=f"Items per page (at most {settings.max_page_limit})",
        ),
    ]

    @api.get(
        KEYS_PATH,
        summary="List keys",
        response_model=KeysPage,
        responses=errors(Code.NAMESPACE_NOT_FOUND, Code.UNAVAILABLE),
    )
    async def list_keys(
        namespace: NamespaceParam,
        end: End,
        start: Start = None,
        limit: Limit = settings.default_page_limit,
        cursor: CursorParam = None,
        partition_key: PartitionKey = None,
        index: Index = None,
    ) -> KeysPage:
        query, decoded = query_of(namespace, "keys", start, end, cursor, partition_key, index)
        async with pool.lease(namespace) as client:
            keys, next_cursor = await read_keys(
                client, query, decoded, limit, settings.max_page_bytes
            )
        return KeysPage(keys=keys, nextCursor=next_cursor)

    @api.get(
        RECORDS_PATH,
        summary="Scan records (values in base64)",
        response_model=RecordsPage,
        responses=errors(Code.NAMESPACE_NOT_FOUND, Code.UNAVAILABLE),
    )
    async def scan_records(
        namespace: NamespaceParam,
        end: End,
        start: Start = None,
        limit: Limit = settings.default_page_limit,
        cursor: CursorParam = None,
        partition_key: PartitionKey = None,
        index: Index = None,
    ) -> RecordsPage:
        query, decoded = query_of(namespace, "records", start, end, cursor, partition_key, index)
        async with pool.lease(namespace) as client:
            records, next_cursor = await read_records(
                client, query, decoded, limit, settings.max_page_bytes
            )
        return RecordsPage(records=[RecordModel.of(r) for r in records], nextCursor=next_cursor)

    @api.delete(
        KEYS_PATH,
        summary="Delete a range of keys",
        status_code=204,
        response_class=Response,
        responses={
            204: {"description": "Every key in [start, end) is deleted"},
            **errors(Code.NAMESPACE_NOT_FOUND, Code.UNAVAILABLE),
        },
    )
    async def delete_range(
        namespace: NamespaceParam,
        start: Annotated[str, Query(max_length=MAX_KEY_CHARS, description="First key (inclusive)")],
        end: Annotated[str, Query(max_length=MAX_KEY_CHARS, description="End key (exclusive)")],
        partition_key: PartitionKey = None,
    ) -> Response:
        async with pool.lease(namespace) as client:
            await client.delete_range(start, end, partition_key=partition_key)
        return Response(status_code=204)

    return api
