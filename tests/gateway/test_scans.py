"""Key and record scans with cursors, over real HTTP; pages alternate between
the two gateways (a cursor from one pages on the other)."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

from cairn.common.keyorder import KeyOrder
from gateway.helpers import problem

pytestmark = pytest.mark.e2e


def put(
    client: httpx.Client, key: str, value: bytes = b"v", namespace: str = "default", **params: Any
) -> None:
    answer = client.put(f"/v1/namespaces/{namespace}/keys/{key}", params=params, content=value)
    assert answer.status_code in (200, 201), answer.text


def all_pages(
    clients: list[httpx.Client], path: str, params: dict[str, Any], field: str
) -> tuple[list[Any], int]:
    """Every item of a scan, page by page, alternating gateways; and the page count."""
    items: list[Any] = []
    pages = 0
    query: dict[str, Any] = dict(params)
    while True:
        answer = clients[pages % len(clients)].get(path, params=query)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        pages += 1
        items += page[field]
        assert len(page[field]) <= int(params.get("limit", 100))
        if page["nextCursor"] is None:
            return items, pages
        # The cursor, the end and the limit: the rest of the query is in the cursor.
        query = {"cursor": page["nextCursor"], "end": params["end"]}
        query["limit"] = params.get("limit", 100)


def test_keys_page_across_shards_in_hierarchical_order(
    g1: httpx.Client, g2: httpx.Client, prefix: str
) -> None:
    names = [f"{prefix}dir/k{i:02d}" for i in range(23)] + [f"{prefix}dir/sub/deeper"]
    for i, key in enumerate(names):
        put((g1, g2)[i % 2], key)
    children = sorted(names[:23], key=KeyOrder.HIERARCHICAL.encode)
    keys, pages = all_pages(
        [g1, g2],
        "/v1/namespaces/default/keys",
        {"start": f"{prefix}dir/", "end": f"{prefix}dir//", "limit": 5},
        "keys",
    )
    # Children only (the grandchild is in the next level), in order, each once.
    assert keys == children
    assert pages == 5
    # A limit equal to the count: one page, no cursor.
    answer = g1.get(
        "/v1/namespaces/default/keys",
        params={"start": f"{prefix}dir/", "end": f"{prefix}dir//", "limit": 23},
    ).json()
    assert answer["keys"] == children and answer["nextCursor"] is None


def test_keys_page_in_natural_order(g1: httpx.Client, g2: httpx.Client, prefix: str) -> None:
    names = [f"{prefix}{name}" for name in ("a", "a/b", "a/b/c", "b", "b\x00", "ab", "z/y")]
    for key in names:
        answer = g1.put(f"/v1/namespaces/natural/keys/{key.replace(chr(0), '%00')}", content=b"v")
        assert answer.status_code == 201, answer.text
    keys, _ = all_pages(
        [g2, g1],
        "/v1/namespaces/natural/keys",
        {"start": prefix, "end": prefix + "~", "limit": 2},
        "keys",
    )
    assert keys == sorted(names, key=lambda k: k.encode())


def test_records_page_with_values_and_versions(
    g1: httpx.Client, g2: httpx.Client, prefix: str
) -> None:
    for i in range(7):
        put(g1, f"{prefix}r/{i}", value=bytes([i]) * (i + 1))
    records, pages = all_pages(
        [g2, g1],
        "/v1/namespaces/default/records",
        {"start": f"{prefix}r/", "end": f"{prefix}r//", "limit": 3},
        "records",
    )
    assert pages == 3
    assert [r["key"] for r in records] == [f"{prefix}r/{i}" for i in range(7)]
    for i, record in enumerate(records):
        assert base64.b64decode(record["value"]) == bytes([i]) * (i + 1)
        assert record["version"]["modificationsCount"] == 0


def test_partition_scans(g1: httpx.Client, prefix: str) -> None:
    for i in range(5):
        put(g1, f"{prefix}p/{i}", partition_key="part-1")
    keys, _ = all_pages(
        [g1],
        "/v1/namespaces/default/keys",
        {"start": f"{prefix}p/", "end": f"{prefix}p//", "partition_key": "part-1", "limit": 2},
        "keys",
    )
    assert keys == [f"{prefix}p/{i}" for i in range(5)]
    # Routed by the partition: another partition's shard may not hold them.
    other = g1.get(
        "/v1/namespaces/default/keys",
        params={"start": f"{prefix}p/", "end": f"{prefix}p//", "partition_key": prefix + "x"},
    ).json()
    assert set(other["keys"]) <= set(keys)


def test_index_scans_page_through_duplicate_secondary_keys(
    g1: httpx.Client, g2: httpx.Client, prefix: str
) -> None:
    index = f"idx{prefix.strip('/')}"
    expected = []
    for i in range(12):
        # Four records per secondary key, spread over shards.
        secondary = f"color-{i // 4}"
        key = f"{prefix}item/{i:02d}"
        answer = g1.put(
            f"/v1/namespaces/default/keys/{key}",
            params={"index": f"{index}:{secondary}"},
            content=b"v",
        )
        assert answer.status_code == 201
        expected.append((secondary, key))
    order = KeyOrder.HIERARCHICAL
    expected.sort(key=lambda pair: (order.encode(pair[0]), order.encode(pair[1])))
    for kind, field in (("keys", "keys"), ("records", "records")):
        items, _ = all_pages(
            [g1, g2],
            f"/v1/namespaces/default/{kind}",
            {"start": "color-", "end": "color-~", "index": index, "limit": 3},
            field,
        )
        got = items if kind == "keys" else [r["key"] for r in items]
        assert got == [key for _, key in expected], kind
        if kind == "records":
            assert [r["secondaryIndexKey"] for r in items] == [s for s, _ in expected]


def test_cursor_errors(g1: httpx.Client, prefix: str) -> None:
    for i in range(3):
        put(g1, f"{prefix}c/{i}")
    page = g1.get(
        "/v1/namespaces/default/keys",
        params={"start": f"{prefix}c/", "end": f"{prefix}c//", "limit": 1},
    ).json()
    cursor = page["nextCursor"]
    assert cursor
    # The same query may be repeated beside the cursor; a different one may not.
    same = g1.get(
        "/v1/namespaces/default/keys",
        params={"start": f"{prefix}c/", "end": f"{prefix}c//", "limit": 1, "cursor": cursor},
    )
    assert same.status_code == 200 and same.json()["keys"] == [f"{prefix}c/1"]
    end = f"{prefix}c//"
    for path, params in (
        ("/v1/namespaces/default/keys", {"cursor": cursor, "end": "zzz"}),
        ("/v1/namespaces/default/keys", {"cursor": cursor, "end": end, "start": "a"}),
        ("/v1/namespaces/default/keys", {"cursor": cursor, "end": end, "partition_key": "p"}),
        ("/v1/namespaces/default/keys", {"cursor": cursor, "end": end, "index": "i"}),
        ("/v1/namespaces/default/keys", {"cursor": cursor}),
        ("/v1/namespaces/default/keys", {"cursor": "", "end": end}),
        ("/v1/namespaces/default/records", {"cursor": cursor, "end": end}),
        ("/v1/namespaces/natural/keys", {"cursor": cursor, "end": end}),
    ):
        problem(g1.get(path, params=params), 400, "invalid-argument")
    for garbage in ("not-a-cursor", "eJwDAAAAAAE", cursor[:-4]):
        problem(
            g1.get("/v1/namespaces/default/keys", params={"cursor": garbage, "end": end}),
            400,
            "invalid-argument",
        )
    problem(g1.get("/v1/namespaces/default/keys", params={"start": "a"}), 400, "invalid-argument")
    for limit in (0, 1001, "x"):
        problem(
            g1.get(
                "/v1/namespaces/default/keys", params={"start": "a", "end": "b", "limit": limit}
            ),
            400,
            "invalid-argument",
        )
    problem(g1.get("/v1/namespaces/nope/keys", params={"end": "b"}), 404, "namespace-not-found")


def test_empty_ranges(g1: httpx.Client, prefix: str) -> None:
    for params in ({"start": prefix, "end": ""}, {"start": prefix + "z", "end": prefix + "a"}):
        answer = g1.get("/v1/namespaces/default/records", params=params)
        assert answer.json() == {"records": [], "nextCursor": None}


def test_delete_range(g1: httpx.Client, g2: httpx.Client, prefix: str) -> None:
    for i in range(10):
        put(g1, f"{prefix}d/{i}")
    put(g1, f"{prefix}keep")
    answer = g2.delete(
        "/v1/namespaces/default/keys", params={"start": f"{prefix}d/", "end": f"{prefix}d//"}
    )
    assert answer.status_code == 204
    left = g1.get(
        "/v1/namespaces/default/keys", params={"start": prefix, "end": prefix + "~"}
    ).json()
    assert left["keys"] == [f"{prefix}keep"]
    # Within one partition.
    for i in range(3):
        put(g1, f"{prefix}pd/{i}", partition_key="pp")
    answer = g2.delete(
        "/v1/namespaces/default/keys",
        params={"start": f"{prefix}pd/", "end": f"{prefix}pd//", "partition_key": "pp"},
    )
    assert answer.status_code == 204
    problem(
        g1.get(f"/v1/namespaces/default/keys/{prefix}pd/0", params={"partition_key": "pp"}),
        404,
        "key-not-found",
    )
    # Both bounds are required.
    problem(
        g1.delete("/v1/namespaces/default/keys", params={"start": prefix}), 400, "invalid-argument"
    )
    problem(
        g1.delete("/v1/namespaces/default/keys", params={"end": prefix}), 400, "invalid-argument"
    )
    problem(
        g1.delete("/v1/namespaces/nope/keys", params={"start": "a", "end": "b"}),
        404,
        "namespace-not-found",
    )
