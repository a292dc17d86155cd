"""The unmodified `oxia` client from PyPI (0.2.1) against a standalone server, and
against three storage pods that replicate over mutual TLS while their client
ports serve plaintext (`--public-plaintext`: the released client speaks nothing
else)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import time
from collections.abc import Iterator
from pathlib import Path

import oxia
import oxia.ex
import pytest

from cairn.common.identity import Role
from cairn.common.keyorder import compare_hierarchical
from support.driver import Driver
from support.processes import NodeProcess, StandaloneProcess
from support.tls import TestCertificates, credentials

pytestmark = pytest.mark.e2e


MTLS_PODS = "3-shards-on-mtls-pods"


# Past every key the tests write in the store's hierarchical order: more segments
# than any of them, each above their first one (they all start with "/").
EVERY_KEY = ("", "~/~/~/~/~/~/~/~")


@pytest.fixture(
    scope="module",
    params=[3, 10, MTLS_PODS],
    ids=lambda n: n if isinstance(n, str) else f"{n}-shards",
)
def address(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """One server (or three pods) per variant for the whole module: starting the
    mTLS pods and electing their shards cost seconds, paid once rather than per test."""
    directory = tmp_path_factory.mktemp(f"oxia-{request.param}")
    if request.param == MTLS_PODS:
        with _mtls_pods(directory) as pod_address:
            yield pod_address
        return
    server = StandaloneProcess(directory / "data", request.param)
    server.start()
    try:
        yield server.address
    finally:
        server.kill()


@pytest.fixture(scope="module")
def shared_client(address: str) -> Iterator[oxia.Client]:
    # One client per variant as well: a new client on a long-lived server once timed
    # out (30 s) waiting for its shard assignments on a loaded machine.
    with oxia.Client(address) as oxia_client:
        yield oxia_client


@pytest.fixture
def client(shared_client: oxia.Client) -> Iterator[oxia.Client]:
    """The variant's client on an empty store: the tests assert on first versions
    and creation times, so each one's keys are deleted after it (and the store
    checked empty before it, so that a key left behind fails loudly, not silently)."""
    assert shared_client.list(*EVERY_KEY) == []
    yield shared_client
    shared_client.delete_range(*EVERY_KEY)
    assert shared_client.list(*EVERY_KEY) == []


@contextlib.contextmanager
def _mtls_pods(tmp_path: Path, shards: int = 3) -> Iterator[str]:
    """Three pods, every shard replicated on all three over mutual TLS, driven by
    the controller's certificate; the address of one pod's plaintext client port."""
    certs = TestCertificates(tmp_path / "certs")
    nodes = [
        NodeProcess(
            tmp_path / f"pod-{index}",
            ("--public-plaintext",),
            tls_dir=certs.component(Role.STORAGE, f"storage-{index}"),
        )
        for index in range(3)
    ]
    driver = Driver(credentials=credentials(certs.component(Role.CONTROLLER, "controller")))
    try:
        # Side by side: a pod's start is mostly imports, and three in a row are slow.
        with concurrent.futures.ThreadPoolExecutor(len(nodes)) as starting:
            list(starting.map(lambda node: node.start(), nodes))
        for shard in range(shards):
            driver.elect(shard, nodes)
        driver.push_map(nodes)
        for shard in range(shards):
            driver.wait_caught_up(shard)
        yield nodes[0].address
    finally:
        driver.close()
        for node in nodes:
            node.kill()


def hierarchical(keys: list[str]) -> list[str]:
    return sorted(
        keys, key=functools.cmp_to_key(lambda a, b: compare_hierarchical(a.encode(), b.encode()))
    )


def test_put_and_get_round_trip_with_version(client: oxia.Client) -> None:
    before_ms = time.time() * 1000
    key, version = client.put("/users/alice", b"v1")
    assert key == "/users/alice"
    assert version.modifications_count() == 0
    assert not version.is_ephemeral()
    assert version.session_id() is None
    assert version.client_identity() is None
    assert version.created_timestamp() == version.modified_timestamp()
    assert version.created_timestamp().timestamp() * 1000 >= before_ms - 1000

    got_key, value, got_version = client.get("/users/alice")
    assert (got_key, value) == ("/users/alice", b"v1")
    assert got_version.version_id() == version.version_id()
    assert got_version.modifications_count() == 0

    # str values are encoded as UTF-8
    client.put("/users/bob", "héllo")
    assert client.get("/users/bob")[1] == "héllo".encode()


def test_updates_count_modifications_and_keep_creation_time(client: oxia.Client) -> None:
    _, first = client.put("/counter", b"0")
    time.sleep(0.01)
    _, second = client.put("/counter", b"1")
    _, third = client.put("/counter", b"2")
    assert [
        first.modifications_count(),
        second.modifications_count(),
        third.modifications_count(),
    ] == [0, 1, 2]
    assert first.version_id() < second.version_id() < third.version_id()
    assert third.created_timestamp() == first.created_timestamp()
    assert third.modified_timestamp() > first.modified_timestamp()
    assert client.get("/counter")[1] == b"2"

    # delete + re-create resets the count and the creation time
    assert client.delete("/counter")
    time.sleep(0.01)
    _, recreated = client.put("/counter", b"again")
    assert recreated.modifications_count() == 0
    assert recreated.created_timestamp() > first.created_timestamp()


def test_conditional_puts(client: oxia.Client) -> None:
    _, created = client.put(
        "/lock", b"owner-1", expected_version_id=oxia.EXPECTED_RECORD_DOES_NOT_EXIST
    )
    with pytest.raises(oxia.ex.UnexpectedVersionId):
        client.put("/lock", b"owner-2", expected_version_id=oxia.EXPECTED_RECORD_DOES_NOT_EXIST)
    with pytest.raises(oxia.ex.UnexpectedVersionId):
        client.put("/lock", b"owner-2", expected_version_id=created.version_id() + 1000)
    with pytest.raises(oxia.ex.UnexpectedVersionId):
        client.put("/missing", b"x", expected_version_id=0)
    assert client.get("/lock")[1] == b"owner-1"

    _, updated = client.put("/lock", b"owner-3", expected_version_id=created.version_id())
    assert updated.modifications_count() == 1
    with pytest.raises(oxia.ex.UnexpectedVersionId):
        client.put("/lock", b"owner-4", expected_version_id=created.version_id())
    assert client.get("/lock")[1] == b"owner-3"


def test_get_without_value_and_missing_keys(client: oxia.Client) -> None:
    client.put("/meta", b"payload")
    key, value, version = client.get("/meta", include_value=False)
    assert key == "/meta"
    assert value is None
    assert version.modifications_count() == 0
    with pytest.raises(oxia.ex.KeyNotFound):
        client.get("/nope")


def test_delete_and_conditional_delete(client: oxia.Client) -> None:
    _, version = client.put("/d", b"x")
    assert client.delete("/nope") is False
    with pytest.raises(oxia.ex.UnexpectedVersionId):
        client.delete("/d", expected_version_id=version.version_id() + 1)
    assert client.get("/d")[1] == b"x"
    assert client.delete("/d", expected_version_id=version.version_id()) is True
    with pytest.raises(oxia.ex.KeyNotFound):
        client.get("/d")


def in_range(keys: list[str], start: str, end: str) -> list[str]:
    """The model: keys with start <= key < end in the reference order, sorted."""
    low, high = start.encode(), end.encode()
    return hierarchical(
        [
            k
            for k in keys
            if compare_hierarchical(low, k.encode()) <= 0 < compare_hierarchical(high, k.encode())
        ]
    )


KEYS = ["/a", "/a/1", "/a/2", "/a/3", "/a/2/x", "/b", "/b/1", "/c/1/2", "/z"]


def test_get_with_every_comparison_across_shards(client: oxia.Client) -> None:
    stored = ["/k/b", "/k/d", "/k/f", "/k/h"]
    for key in stored:
        client.put(key, key.encode())
    C = oxia.ComparisonType
    cases = [
        ("/k/d", C.EQUAL, "/k/d"),
        ("/k/e", C.FLOOR, "/k/d"),
        ("/k/d", C.FLOOR, "/k/d"),
        ("/k/e", C.CEILING, "/k/f"),
        ("/k/d", C.CEILING, "/k/d"),
        ("/k/d", C.LOWER, "/k/b"),
        ("/k/d", C.HIGHER, "/k/f"),
        ("/k/z", C.FLOOR, "/k/h"),
        ("/k/a", C.CEILING, "/k/b"),
    ]
    for key, comparison, expected in cases:
        found, value, _ = client.get(key, comparison_type=comparison)
        assert (found, value) == (expected, expected.encode()), (key, comparison)
    with pytest.raises(oxia.ex.KeyNotFound):
        client.get("/k/b", comparison_type=C.LOWER)
    with pytest.raises(oxia.ex.KeyNotFound):
        client.get("/k/h", comparison_type=C.HIGHER)
    _, value, _ = client.get("/k/e", comparison_type=C.FLOOR, include_value=False)
    assert value is None


def test_comparisons_follow_hierarchical_order(client: oxia.Client) -> None:
    # "/x/zz" has fewer segments than "/x/a/b": in hierarchical order the
    # shallower key comes first, whatever its bytes.
    client.put("/x/zz", b"shallow")
    client.put("/x/a/b", b"deep")
    found, _, _ = client.get("/x/zzz", comparison_type=oxia.ComparisonType.CEILING)
    assert found == "/x/a/b"
    found, _, _ = client.get("/x/a/a", comparison_type=oxia.ComparisonType.FLOOR)
    assert found == "/x/zz"


def test_list_and_range_scan_across_shards(client: oxia.Client) -> None:
    for key in KEYS:
        client.put(key, key.encode())
    assert client.list("/a/", "/a//") == ["/a/1", "/a/2", "/a/3"]
    assert client.list("/", "/~") == hierarchical(["/a", "/b", "/z"])
    for start, end in [("/b", "/b/2"), ("/a", "/b"), ("/a/2", "/c/1/3"), ("", "~")]:
        assert client.list(start, end) == in_range(KEYS, start, end), (start, end)
    assert client.list("/q", "/r") == []
    scanned = list(client.range_scan("/a/", "/a//"))
    assert [(k, v) for k, v, _ in scanned] == [(k, k.encode()) for k in ["/a/1", "/a/2", "/a/3"]]
    assert all(version.modifications_count() == 0 for _, _, version in scanned)


def test_partition_key_routes_to_one_shard(client: oxia.Client) -> None:
    keys = [f"/tenant/{i:03d}" for i in range(40)]
    versions = {}
    for key in keys:
        _, version = client.put(key, key.encode(), partition_key="tenant-7")
        versions[key] = version.version_id()
    # All on one shard: version ids are one increasing sequence.
    assert [versions[k] for k in keys] == sorted(versions.values())
    assert client.list("/tenant/", "/tenant//", partition_key="tenant-7") == keys
    assert [
        k for k, _, _ in client.range_scan("/tenant/", "/tenant//", partition_key="tenant-7")
    ] == keys
    # Other shards do not hold them
    other = client.list("/tenant/", "/tenant//", partition_key="another-partition")
    assert other in ([], keys)
    found, _, _ = client.get(
        "/tenant/0155", partition_key="tenant-7", comparison_type=oxia.ComparisonType.FLOOR
    )
    assert found == "/tenant/015"
    assert client.get("/tenant/005", partition_key="tenant-7")[1] == b"/tenant/005"
    client.delete_range("/tenant/010", "/tenant/020", partition_key="tenant-7")
    remaining = client.list("/tenant/", "/tenant//", partition_key="tenant-7")
    assert remaining == [k for k in keys if not "/tenant/010" <= k < "/tenant/020"]


def test_delete_range_across_shards(client: oxia.Client) -> None:
    keys = [f"/logs/{i:04d}" for i in range(100)] + ["/logs/keep/child", "/other"]
    for key in keys:
        client.put(key, b"x")
    client.delete_range("/logs/0020", "/logs/0080")
    left = client.list("/logs/", "/logs//")
    assert left == [f"/logs/{i:04d}" for i in range(100) if not 20 <= i < 80]
    assert client.get("/logs/keep/child")[1] == b"x"
    assert client.get("/other")[1] == b"x"
    # nothing matching is fine
    client.delete_range("/nothing/", "/nothing//")


def test_version_ids_increase_per_shard(client: oxia.Client) -> None:
    seen: list[int] = []
    for i in range(20):
        _, version = client.put("/same-key", str(i))
        seen.append(version.version_id())
    assert seen == sorted(seen)
    assert len(set(seen)) == len(seen)
