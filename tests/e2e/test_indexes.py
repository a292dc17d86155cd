"""Secondary indexes through the real `oxia` client, across shards."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import oxia
import oxia.ex
import pytest

from support.processes import StandaloneProcess

pytestmark = pytest.mark.e2e
ComparisonType = oxia.ComparisonType

# Primary key order and secondary key order agree here: the client merges the
# shards' answers by primary key.
PEOPLE = {
    "/people/1": "alice",
    "/people/2": "bob",
    "/people/3": "carol",
    "/people/4": "dave",
    "/people/5": "erin",
}


@pytest.fixture(params=[1, 3, 10], ids=lambda n: f"{n}-shards")
def server(
    request: pytest.FixtureRequest, standalone_factory: Callable[..., StandaloneProcess]
) -> StandaloneProcess:
    started: StandaloneProcess = standalone_factory(request.param)
    return started


@pytest.fixture
def client(server: StandaloneProcess) -> Iterator[oxia.Client]:
    with oxia.Client(server.address) as oxia_client:
        for key, name in PEOPLE.items():
            oxia_client.put(key, name.encode(), secondary_indexes={"by-name": name})
        yield oxia_client


def test_get_list_and_scan_by_index(client: oxia.Client) -> None:
    key, value, version = client.get("bob", use_index="by-name")
    assert (key, value) == ("/people/2", b"bob")
    assert version.version_id() == client.get("/people/2")[2].version_id()
    assert client.get("bz", use_index="by-name", comparison_type=ComparisonType.CEILING)[0] == (
        "/people/3"
    )
    assert client.get("bz", use_index="by-name", comparison_type=ComparisonType.FLOOR)[0] == (
        "/people/2"
    )
    assert client.get("bob", use_index="by-name", comparison_type=ComparisonType.HIGHER)[0] == (
        "/people/3"
    )
    assert client.get("bob", use_index="by-name", comparison_type=ComparisonType.LOWER)[0] == (
        "/people/1"
    )
    assert client.get("carol", use_index="by-name", include_value=False)[1] is None
    with pytest.raises(oxia.ex.KeyNotFound):
        client.get("zed", use_index="by-name")
    with pytest.raises(oxia.ex.KeyNotFound):
        client.get("bob", use_index="no-such-index")

    assert client.list("a", "z", use_index="by-name") == list(PEOPLE)
    assert client.list("b", "d", use_index="by-name") == ["/people/2", "/people/3"]
    scanned = list(client.range_scan("b", "d", use_index="by-name"))
    assert [(k, v) for k, v, _ in scanned] == [("/people/2", b"bob"), ("/people/3", b"carol")]
    # the index never shows up as keys
    assert client.list("", "~/~/~") == list(PEOPLE)


def test_the_index_follows_overwrites_deletes_and_sessions(
    client: oxia.Client, server: StandaloneProcess
) -> None:
    client.put("/people/2", b"robert", secondary_indexes={"by-name": "robert"})
    with pytest.raises(oxia.ex.KeyNotFound):
        client.get("bob", use_index="by-name")
    assert client.get("robert", use_index="by-name")[0] == "/people/2"
    client.put("/people/4", b"no index now")
    client.delete("/people/3")
    client.delete_range("/people/5", "/people/6")
    assert client.list("a", "z", use_index="by-name") == ["/people/1", "/people/2"]

    # an ephemeral record's entries go with its session
    owner = oxia.Client(server.address)
    owner.put("/people/9", b"temp", ephemeral=True, secondary_indexes={"by-name": "temp"})
    assert client.get("temp", use_index="by-name")[0] == "/people/9"
    owner.close()
    with pytest.raises(oxia.ex.KeyNotFound):
        client.get("temp", use_index="by-name")


def test_one_shard_answers_in_secondary_key_order(client: oxia.Client) -> None:
    client.put("/tasks/1", b"", partition_key="t", secondary_indexes={"by-due": "2026-12"})
    client.put("/tasks/2", b"", partition_key="t", secondary_indexes={"by-due": "2026-01"})
    client.put("/tasks/3", b"", partition_key="t", secondary_indexes={"by-due": "2026-06"})
    assert client.list("2026", "2027", partition_key="t", use_index="by-due") == [
        "/tasks/2",
        "/tasks/3",
        "/tasks/1",
    ]
    scanned = client.range_scan("2026-02", "2027", partition_key="t", use_index="by-due")
    assert [key for key, _, _ in scanned] == ["/tasks/3", "/tasks/1"]
