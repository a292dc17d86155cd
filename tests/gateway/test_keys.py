"""Single keys over real HTTP: get, put, delete, conditional writes, partition
keys, secondary indexes, sequences, and their error paths. Requests alternate
between two gateway processes in front of one standalone storage server."""

from __future__ import annotations

import base64
from urllib.parse import quote, unquote

import httpx
import pytest

from gateway.helpers import problem

pytestmark = pytest.mark.e2e


def key_url(key: str, namespace: str = "default") -> str:
    """The key in the path as most clients write it: "/" unencoded."""
    return f"/v1/namespaces/{namespace}/keys/{key}"


def encoded_url(key: str, namespace: str = "default") -> str:
    return f"/v1/namespaces/{namespace}/keys/{quote(key, safe='')}"


def test_put_then_get_raw_and_json_through_either_gateway(
    g1: httpx.Client, g2: httpx.Client, prefix: str
) -> None:
    key = f"{prefix}brokers/b1"
    created = g1.put(key_url(key), content=b"10.0.0.7:6650")
    assert created.status_code == 201, created.text
    answer = created.json()
    assert answer["key"] == key
    version = answer["version"]
    assert version["modificationsCount"] == 0 and version["ephemeral"] is False
    assert created.headers["etag"] == f'"{version["versionId"]}"'
    assert created.headers["location"] == f"/v1/namespaces/default/keys/{quote(key, safe='')}"

    # "//" in the path and a percent-encoded key name the same record.
    for client, url in ((g2, key_url(key)), (g1, encoded_url(key))):
        raw = client.get(url)
        assert raw.status_code == 200
        assert raw.content == b"10.0.0.7:6650"
        assert raw.headers["content-type"] == "application/octet-stream"
        assert raw.headers["etag"] == created.headers["etag"]
        assert raw.headers["cairn-key"] == key
        assert raw.headers["cairn-modifications-count"] == "0"
        assert raw.headers["cairn-ephemeral"] == "false"
        assert int(raw.headers["cairn-created-timestamp-ms"]) > 0

    record = g2.get(key_url(key), headers={"Accept": "application/json"})
    assert record.status_code == 200
    assert record.headers["content-type"] == "application/json"
    body = record.json()
    assert body["key"] == key
    assert base64.b64decode(body["value"]) == b"10.0.0.7:6650"
    assert body["version"] == version
    assert body["secondaryIndexKey"] is None

    updated = g2.put(key_url(key), content=b"10.0.0.8:6650")
    assert updated.status_code == 200
    assert updated.json()["version"]["modificationsCount"] == 1
    assert "location" not in updated.headers
    assert g1.get(key_url(key)).content == b"10.0.0.8:6650"


def test_accept_negotiation(g1: httpx.Client, prefix: str) -> None:
    key = f"{prefix}k"
    g1.put(key_url(key), content=b"v")
    cases = {
        "application/json": "application/json",
        "application/json, */*": "application/json",
        "application/octet-stream": "application/octet-stream",
        "*/*": "application/octet-stream",
        "application/json;q=0.5, application/octet-stream": "application/octet-stream",
        "application/octet-stream;q=0.1, application/json": "application/json",
        "text/html": "application/octet-stream",
    }
    for accept, expected in cases.items():
        answer = g1.get(key_url(key), headers={"Accept": accept})
        assert answer.headers["content-type"] == expected, accept


def test_unicode_and_awkward_keys_round_trip(
    g1: httpx.Client, g2: httpx.Client, prefix: str
) -> None:
    awkward = ("ümlaut/ключ", "with space", "q?mark#hash", "%41-not-decoded-twice", "a+b")
    for name in (*awkward, "line\nbreak", "ends-with-a-line-break\n"):
        key = f"{prefix}{name}"
        assert g1.put(encoded_url(key), content=name.encode()).status_code == 201
        answer = g2.get(encoded_url(key))
        assert answer.content == name.encode()
        assert answer.headers["cairn-key"] == quote(key, safe="/:@!$&'()*+,;=-._~")
        assert g2.get(encoded_url(key), headers={"Accept": "application/json"}).json()["key"] == key


def test_empty_value_and_missing_body(g1: httpx.Client, prefix: str) -> None:
    key = f"{prefix}empty"
    assert g1.put(key_url(key)).status_code == 201
    answer = g1.get(key_url(key))
    assert answer.status_code == 200 and answer.content == b""


def test_conditional_writes_with_etags(g1: httpx.Client, g2: httpx.Client, prefix: str) -> None:
    key = f"{prefix}lock"
    # Create only.
    first = g1.put(key_url(key), content=b"a", headers={"If-None-Match": "*"})
    assert first.status_code == 201
    etag = first.headers["etag"]
    problem(
        g2.put(key_url(key), content=b"b", headers={"If-None-Match": "*"}), 412, "version-mismatch"
    )
    # At a version.
    problem(
        g2.put(key_url(key), content=b"b", headers={"If-Match": '"999999"'}),
        412,
        "version-mismatch",
    )
    second = g2.put(key_url(key), content=b"b", headers={"If-Match": etag})
    assert second.status_code == 200
    problem(g1.put(key_url(key), content=b"c", headers={"If-Match": etag}), 412, "version-mismatch")
    # Exists, any version.
    third = g1.put(key_url(key), content=b"c", headers={"If-Match": "*"})
    assert third.status_code == 200 and third.json()["version"]["modificationsCount"] == 2
    problem(
        g1.put(key_url(f"{prefix}absent"), content=b"x", headers={"If-Match": "*"}),
        412,
        "version-mismatch",
    )
    assert g1.get(key_url(f"{prefix}absent")).status_code == 404
    # Reads: 304 while the version is the one named.
    current = third.headers["etag"]
    not_modified = g2.get(key_url(key), headers={"If-None-Match": current})
    assert not_modified.status_code == 304 and not_modified.headers["etag"] == current
    assert not_modified.content == b""
    assert g2.get(key_url(key), headers={"If-None-Match": "*"}).status_code == 304
    assert g2.get(key_url(key), headers={"If-None-Match": etag}).status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {"If-Match": "123"},
        {"If-Match": 'W/"1"'},
        {"If-Match": '"1", "2"'},
        {"If-Match": '"x"'},
        {"If-Match": '"1234567890123456789"'},
        {"If-None-Match": '"1"'},
        {"If-Match": "", "If-None-Match": "*"},
    ],
)
def test_malformed_preconditions_are_400(
    g1: httpx.Client, prefix: str, headers: dict[str, str]
) -> None:
    document = problem(
        g1.put(key_url(f"{prefix}k"), content=b"v", headers=headers), 400, "invalid-argument"
    )
    assert "If-" in document["detail"]


def test_if_match_with_if_none_match_never_holds(g1: httpx.Client, prefix: str) -> None:
    key = key_url(f"{prefix}k")
    for if_match in ('"1"', "*"):
        headers = {"If-Match": if_match, "If-None-Match": "*"}
        problem(g1.put(key, content=b"v", headers=headers), 412, "version-mismatch")
    problem(g1.get(key), 404, "key-not-found")


def test_delete_with_and_without_if_match(g1: httpx.Client, g2: httpx.Client, prefix: str) -> None:
    key = f"{prefix}gone"
    etag = g1.put(key_url(key), content=b"v").headers["etag"]
    problem(g2.delete(key_url(key), headers={"If-Match": '"1"'}), 412, "version-mismatch")
    answer = g2.delete(key_url(key), headers={"If-Match": etag})
    assert answer.status_code == 204 and answer.content == b""
    problem(g1.get(key_url(key)), 404, "key-not-found")
    problem(g1.delete(key_url(key)), 404, "key-not-found")
    g1.put(key_url(key), content=b"v")
    assert g2.delete(encoded_url(key), headers={"If-Match": "*"}).status_code == 204
    problem(g2.delete(key_url(key), headers={"If-Match": "*"}), 404, "key-not-found")
    problem(g2.delete(key_url(key), headers={"If-Match": "nope"}), 400, "invalid-argument")


def test_comparisons_find_the_nearest_record(g1: httpx.Client, prefix: str) -> None:
    # One partition: the records share a shard, so comparisons see all of them.
    for name in ("b", "d", "f"):
        g1.put(key_url(f"{prefix}{name}"), params={"partition_key": prefix}, content=name.encode())

    def found(name: str, comparison: str) -> str | None:
        answer = g1.get(
            key_url(f"{prefix}{name}"),
            params={"comparison": comparison, "partition_key": prefix},
        )
        if answer.status_code == 404:
            problem(answer, 404, "key-not-found")
            return None
        assert answer.status_code == 200, answer.text
        key = unquote(answer.headers["cairn-key"])
        # Other tests' keys share the storage: outside the prefix is "none of ours".
        return key.removeprefix(prefix) if key.startswith(prefix) else None

    assert found("d", "equal") == "d"
    assert found("c", "equal") is None
    assert found("c", "floor") == "b"
    assert found("d", "floor") == "d"
    assert found("c", "ceiling") == "d"
    assert found("d", "lower") == "b"
    assert found("d", "higher") == "f"
    assert found("a", "lower") is None
    assert found("g", "higher") is None
    problem(
        g1.get(key_url(f"{prefix}d"), params={"comparison": "nearest"}), 400, "invalid-argument"
    )


def test_comparisons_across_shards_without_partition_key(g1: httpx.Client, prefix: str) -> None:
    for name in ("b", "d", "f", "h", "j"):
        g1.put(key_url(f"{prefix}{name}"), content=name.encode())
    answer = g1.get(key_url(f"{prefix}e"), params={"comparison": "ceiling"})
    assert answer.headers["cairn-key"] == f"{prefix}f"
    answer = g1.get(key_url(f"{prefix}e"), params={"comparison": "floor"})
    assert answer.headers["cairn-key"] == f"{prefix}d"


def test_partition_keys_route_by_the_partition(
    g1: httpx.Client, g2: httpx.Client, prefix: str
) -> None:
    key = f"{prefix}member"
    created = g1.put(key_url(key), params={"partition_key": "tenant-7"}, content=b"p")
    assert created.status_code == 201
    assert created.headers["location"].endswith("?partition_key=tenant-7")
    assert g2.get(created.headers["location"]).content == b"p"
    assert g2.get(key_url(key), params={"partition_key": "tenant-7"}).content == b"p"
    assert g2.delete(key_url(key), params={"partition_key": "tenant-7"}).status_code == 204


def test_secondary_indexes(g1: httpx.Client, g2: httpx.Client, prefix: str) -> None:
    key = f"{prefix}user/1"
    answer = g1.put(
        key_url(key),
        params=[("index", "email:ann@example.com"), ("index", "name:ann")],
        content=b"ann",
    )
    assert answer.status_code == 201
    found = g2.get(
        key_url("ann@example.com"),
        params={"index": "email"},
        headers={"Accept": "application/json"},
    )
    assert found.status_code == 200, found.text
    assert found.json()["key"] == key
    assert found.json()["secondaryIndexKey"] == "ann@example.com"
    raw = g2.get(key_url("ann"), params={"index": "name"})
    assert raw.headers["cairn-key"] == key and raw.headers["cairn-secondary-key"] == "ann"
    # Overwriting without the entries drops them.
    g1.put(key_url(key), content=b"ann2")
    problem(g2.get(key_url("ann"), params={"index": "name"}), 404, "key-not-found")
    for entries in (["noseparator"], [":key"], ["a:1", "a:2"]):
        problem(
            g1.put(key_url(key), params=[("index", e) for e in entries], content=b"x"),
            400,
            "invalid-argument",
        )


def test_sequences_generate_keys(g1: httpx.Client, g2: httpx.Client, prefix: str) -> None:
    url = f"/v1/namespaces/default/sequences/{prefix}queue/item"
    first = g1.post(url, params={"partition_key": prefix}, content=b"1")
    assert first.status_code == 201, first.text
    assert first.json()["key"] == f"{prefix}queue/item-{1:020d}"
    second = g2.post(url, params={"partition_key": prefix, "delta": 5}, content=b"2")
    assert second.json()["key"] == f"{prefix}queue/item-{6:020d}"
    assert g1.get(second.headers["location"]).content == b"2"
    multi = g1.post(
        f"/v1/namespaces/default/sequences/{prefix}multi",
        params={"partition_key": prefix, "delta": "1,2"},
        content=b"m",
    )
    assert multi.json()["key"] == f"{prefix}multi-{1:020d}-{2:020d}"
    problem(g1.post(url, content=b"x"), 400, "invalid-argument")  # no partition key
    problem(g1.post(url, params={"partition_key": prefix, "delta": 0}), 400, "invalid-argument")
    # The sequence's keys have two components now: a put with one delta would
    # not sort last.
    one_delta = {"partition_key": prefix, "delta": "1"}
    problem(
        g1.post(f"/v1/namespaces/default/sequences/{prefix}multi", params=one_delta),
        409,
        "conflict",
    )
    problem(
        g1.post("/v1/namespaces/nope/sequences/x", params={"partition_key": "p"}),
        404,
        "namespace-not-found",
    )
    for delta in ("-1", "0", "1,", "1,x", "1234567890", ",".join(["1"] * 17)):
        problem(
            g1.post(url, params={"partition_key": prefix, "delta": delta}), 400, "invalid-argument"
        )


def test_value_size_limit_is_413(g1: httpx.Client, prefix: str) -> None:
    limit = 4 * 1024 * 1024
    assert g1.put(key_url(f"{prefix}max"), content=b"x" * limit).status_code == 201
    problem(g1.put(key_url(f"{prefix}big"), content=b"x" * (limit + 1)), 413, "payload-too-large")

    # Streamed without a length: the bound is counted as the body arrives.
    def chunks() -> list[bytes]:
        return [b"y" * 65536] * (limit // 65536 + 2)

    problem(g1.put(key_url(f"{prefix}chunked"), content=iter(chunks())), 413, "payload-too-large")
    problem(g1.get(key_url(f"{prefix}big")), 404, "key-not-found")
    problem(g1.get(key_url(f"{prefix}chunked")), 404, "key-not-found")


def test_request_errors_are_problems(g1: httpx.Client, prefix: str) -> None:
    problem(g1.get(key_url("k", namespace="no-such-namespace")), 404, "namespace-not-found")
    problem(
        g1.put(key_url("k", namespace="no-such-namespace"), content=b"v"),
        404,
        "namespace-not-found",
    )
    problem(g1.get(key_url("k", namespace="*")), 404, "namespace-not-found")
    problem(g1.get("/v1/namespaces/default/keys/"), 400, "invalid-argument")
    problem(g1.get(key_url("x" * (16 * 1024 + 1))), 400, "invalid-argument")
    problem(g1.get("/v1/nothing-here"), 404, "not-found")
    # A body over the limit where none is read (the framework's own 413).
    problem(
        g1.request("DELETE", key_url(f"{prefix}k"), content=b"x" * (64 * 1024 + 1)),
        413,
        "payload-too-large",
    )
    wrong_method = g1.patch(key_url(f"{prefix}k"))
    problem(wrong_method, 405, "method-not-allowed")
    assert "GET" in wrong_method.headers["allow"]
    problem(
        g1.put(key_url(f"{prefix}k"), params={"session": "garbage"}, content=b"v"),
        400,
        "invalid-argument",
    )


def test_probes_and_openapi(g1: httpx.Client) -> None:
    assert g1.get("/livez").json() == {"status": "ok"}
    assert g1.get("/readyz").json() == {"status": "ready"}
    document = g1.get("/openapi.json").json()
    assert document["info"]["title"] == "Cairn gateway"
    assert "securitySchemes" not in document.get("components", {})
    paths = document["paths"]
    get_key = paths["/v1/namespaces/{namespace}/keys/{key}"]["get"]
    assert set(get_key["responses"]["200"]["content"]) == {
        "application/json",
        "application/octet-stream",
    }
    for path_item in paths.values():
        for operation in path_item.values():
            for status, response in operation["responses"].items():
                assert status != "422", operation["operationId"]
                if int(status) >= 400:
                    assert list(response["content"]) == ["application/problem+json"]
    assert g1.get("/docs").status_code == 200
