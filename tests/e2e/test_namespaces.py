"""Several namespaces in one standalone server: independent data, their own key order,
disjoint shard ids, and a layout that survives restarts (namespaces may be added, never
re-sharded)."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import grpc
import oxia
import oxia.ex
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from cairn.common.hashing import HashRange
from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc
from cairn.storage.config import NamespaceConfig, StandaloneConfig
from cairn.storage.directory import (
    ALL_NAMESPACES,
    NamespaceLayout,
    ShardDirectory,
    ShardPlacement,
)
from cairn.storage.standalone import LAYOUT_FILE, StoredNamespace, load_or_create_layout
from support.processes import StandaloneProcess

pytestmark = pytest.mark.e2e

# "default": 3 shards, hierarchical order; "pulsar": 2 shards, natural order.
SPECS = ("default:3", "pulsar:2:natural:notifications=off")
# Keys whose two orders differ: "-" (0x2D) < "/" (0x2F) < "0" (0x30) bytewise, while the
# hierarchical order puts every two-segment key before any deeper one.
ORDER_KEYS = ("/o/a", "/o/a-z", "/o/a/b", "/o/a/b/c", "/o/a0", "/o/b")


class SpecServer(StandaloneProcess):
    """`cairn-storage standalone` configured with --namespace-spec options."""

    def __init__(self, data_dir: Path, specs: Sequence[str], *extra: str) -> None:
        spec_args = tuple(arg for spec in specs for arg in ("--namespace-spec", spec))
        super().__init__(data_dir, None, (*spec_args, *extra))
        self.specs = tuple(specs)


@pytest.fixture
def spec_server_factory(tmp_path: Path) -> Iterator[Callable[..., SpecServer]]:
    started: list[SpecServer] = []

    def start(specs: Sequence[str], data_dir: Path | None = None, *extra: str) -> SpecServer:
        server = SpecServer(data_dir or tmp_path / f"data-{len(started)}", specs, *extra)
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        server.kill()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpecServer]:
    running = SpecServer(tmp_path_factory.mktemp("namespaces"), SPECS)
    running.start()
    yield running
    running.kill()


@pytest.fixture(scope="module")
def clients(server: SpecServer) -> Iterator[dict[str, oxia.Client]]:
    with (
        oxia.Client(server.address, namespace="default") as default,
        oxia.Client(server.address, namespace="pulsar") as pulsar,
    ):
        yield {"default": default, "pulsar": pulsar}


@pytest.fixture
def stub(server: SpecServer) -> Iterator[pb_grpc.OxiaClientStub]:
    with grpc.insecure_channel(server.address) as channel:
        yield pb_grpc.OxiaClientStub(channel)


def first_message(stub: pb_grpc.OxiaClientStub, namespace: str) -> pb.ShardAssignments:
    call = stub.GetShardAssignments(pb.ShardAssignmentsRequest(namespace=namespace), timeout=10)
    try:
        message: pb.ShardAssignments = next(call)
        return message
    finally:
        call.cancel()


def shard_ids(message: pb.ShardAssignments, namespace: str) -> set[int]:
    return {assignment.shard for assignment in message.namespaces[namespace].assignments}


def missing(client: oxia.Client, key: str, partition_key: str | None = None) -> bool:
    try:
        client.get(key, partition_key=partition_key)
    except oxia.ex.KeyNotFound:
        return True
    return False


def test_same_keys_in_two_namespaces_are_independent(clients: dict[str, oxia.Client]) -> None:
    default, pulsar = clients["default"], clients["pulsar"]
    for index in range(20):
        default.put(f"/same/{index}", f"default-{index}")
        pulsar.put(f"/same/{index}", f"pulsar-{index}")
    default.put("/only-default", b"d")
    pulsar.put("/only-pulsar", b"p")

    assert default.get("/same/7")[1] == b"default-7"
    assert pulsar.get("/same/7")[1] == b"pulsar-7"
    assert missing(pulsar, "/only-default")
    assert missing(default, "/only-pulsar")

    pulsar.delete_range("/same/", "/same//")
    assert pulsar.list("/same/", "/same//") == []
    assert len(default.list("/same/", "/same//")) == 20
    assert default.delete("/same/3")
    assert pulsar.get("/only-pulsar")[1] == b"p"


def test_each_namespace_keeps_its_key_order(clients: dict[str, oxia.Client]) -> None:
    default, pulsar = clients["default"], clients["pulsar"]
    for key in ORDER_KEYS:
        # One partition key: every key on one shard, whose own order the client returns.
        default.put(key, b"x", partition_key="p")
        pulsar.put(key, b"x", partition_key="p")

    bytewise = ["/o/a", "/o/a-z", "/o/a/b", "/o/a/b/c", "/o/a0"]
    assert pulsar.list("/o/a", "/o/b", partition_key="p") == bytewise
    assert [key for key, _, _ in pulsar.range_scan("/o/a", "/o/b", partition_key="p")] == bytewise
    # Hierarchical: deeper keys sort after "/o/b", and the range holds two-segment keys only.
    assert default.list("/o/a", "/o/b", partition_key="p") == ["/o/a", "/o/a-z", "/o/a0"]

    # The children of /o/a: a hierarchical range; bytewise, nothing lies in it.
    assert default.list("/o/a/", "/o/a//", partition_key="p") == ["/o/a/b"]
    assert pulsar.list("/o/a/", "/o/a//", partition_key="p") == []

    # Ranges delete by each namespace's own order.
    pulsar.delete_range("/o/a", "/o/b", partition_key="p")
    default.delete_range("/o/a", "/o/b", partition_key="p")
    assert pulsar.list("/o/", "/o0", partition_key="p") == ["/o/b"]
    assert missing(default, "/o/a0", partition_key="p")
    assert default.get("/o/a/b/c", partition_key="p")[1] == b"x"


def test_assignments_per_namespace_and_all_at_once(stub: pb_grpc.OxiaClientStub) -> None:
    default = first_message(stub, "default")
    pulsar = first_message(stub, "pulsar")
    assert list(default.namespaces) == ["default"]
    assert list(pulsar.namespaces) == ["pulsar"]
    default_ids, pulsar_ids = shard_ids(default, "default"), shard_ids(pulsar, "pulsar")
    assert (len(default_ids), len(pulsar_ids)) == (3, 2)
    assert not default_ids & pulsar_ids

    for message, name in ((default, "default"), (pulsar, "pulsar")):
        entry = message.namespaces[name]
        assert entry.shard_key_router == pb.XXHASH3
        ranges = sorted(
            (a.int32_hash_range.min_hash_inclusive, a.int32_hash_range.max_hash_inclusive)
            for a in entry.assignments
        )
        assert ranges[0][0] == 0 and ranges[-1][1] == 0xFFFFFFFF
        assert all(low == high + 1 for (_, high), (low, _) in itertools.pairwise(ranges))
    assert default.namespaces["default"].key_sorting == pb.KEY_SORTING_UNKNOWN  # unset
    assert pulsar.namespaces["pulsar"].key_sorting == pb.KEY_SORTING_NATURAL

    # An empty name means "default", as on Oxia servers.
    assert first_message(stub, "") == default
    # Cairn's own extension: "*" gets every namespace in one message.
    everything = first_message(stub, ALL_NAMESPACES)
    assert set(everything.namespaces) == {"default", "pulsar"}
    assert everything.namespaces["default"] == default.namespaces["default"]
    assert everything.namespaces["pulsar"] == pulsar.namespaces["pulsar"]


def test_unknown_namespace_is_not_found(stub: pb_grpc.OxiaClientStub) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        first_message(stub, "nope")
    error = raised.value
    assert isinstance(error, grpc.Call)
    assert error.code() == grpc.StatusCode.NOT_FOUND
    status = rpc_status.from_call(error)
    assert status is not None
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert info.reason == "NAMESPACE_NOT_FOUND"


def test_restart_adds_namespaces_and_keeps_unnamed_ones(
    spec_server_factory: Callable[..., SpecServer], tmp_path: Path
) -> None:
    data_dir = tmp_path / "restarts"
    first = spec_server_factory(SPECS, data_dir)
    with oxia.Client(first.address, namespace="pulsar") as pulsar:
        pulsar.put("/kept", b"pulsar data")
    assert first.stop() == 0

    # Added: "extra" gets ids after the highest existing one (0..4).
    second = spec_server_factory((*SPECS, "extra:2:natural"), data_dir)
    with grpc.insecure_channel(second.address) as channel:
        everything = first_message(pb_grpc.OxiaClientStub(channel), ALL_NAMESPACES)
    assert shard_ids(everything, "extra") == {5, 6}
    with (
        oxia.Client(second.address, namespace="pulsar") as pulsar,
        oxia.Client(second.address, namespace="extra") as extra,
    ):
        assert pulsar.get("/kept")[1] == b"pulsar data"
        extra.put("/new", b"extra data")
    assert second.stop() == 0

    # "default" and "pulsar" left out of the configuration: still served, and logged.
    third = spec_server_factory(("extra:2:natural",), data_dir)
    with (
        oxia.Client(third.address, namespace="pulsar") as pulsar,
        oxia.Client(third.address, namespace="extra") as extra,
        oxia.Client(third.address) as default,
    ):
        assert pulsar.get("/kept")[1] == b"pulsar data"
        assert extra.get("/new")[1] == b"extra data"
        default.put("/still-here", b"yes")
    assert third.stop() == 0
    assert any("'pulsar'" in line and "still serving" in line for line in third.output)

    layout = json.loads((data_dir / LAYOUT_FILE).read_text())
    assert [
        (n["name"], n["shard_ids"], n["notifications_enabled"]) for n in layout["namespaces"]
    ] == [
        ("default", [0, 1, 2], True),
        ("pulsar", [3, 4], False),
        ("extra", [5, 6], True),
    ]


def test_restart_with_another_shard_count_or_order_is_refused(
    spec_server_factory: Callable[..., SpecServer], tmp_path: Path
) -> None:
    data_dir = tmp_path / "fixed"
    assert spec_server_factory(SPECS, data_dir).stop() == 0
    cases = {
        "namespace 'default' with 3 shards": ("default:4", "pulsar:2:natural"),
        "namespace 'pulsar' with 2 shards in natural order": ("default:3", "pulsar:2"),
    }
    for message, changed in cases.items():
        refused = SpecServer(data_dir, changed).run_to_exit()
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert message in refused.stderr
        assert "resharding and changing the key order are not supported" in refused.stderr


def test_layout_reconciliation_in_process(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A layout.json from before the notifications switch: notifications stay on.
    (tmp_path / LAYOUT_FILE).write_text(
        json.dumps(
            {"namespaces": [{"name": "old", "key_order": "hierarchical", "shard_ids": [0, 1]}]}
        )
    )
    config = StandaloneConfig(
        data_dir=tmp_path,
        namespaces=(NamespaceConfig("new", 2, KeyOrder.NATURAL, notifications_enabled=False),),
    )
    with caplog.at_level(logging.WARNING):
        served = load_or_create_layout(config)
    assert [(n.name, n.shard_ids, n.notifications_enabled) for n in served] == [
        ("old", (0, 1), True),
        ("new", (2, 3), False),
    ]
    assert "still serving" in caplog.text

    async def directory_of(served: Sequence[StoredNamespace]) -> ShardDirectory:
        directory = ShardDirectory("new")
        for namespace in served:
            placements = tuple(
                ShardPlacement(shard_id, HashRange(0, 0xFFFFFFFF), "here:1")
                for shard_id in namespace.shard_ids
            )
            layout = NamespaceLayout(
                namespace.name, namespace.key_order, placements, namespace.notifications_enabled
            )
            await directory.set_namespace(layout, {})
        return directory

    directory = asyncio.run(directory_of(served))
    assert [directory.layout(name).notifications_enabled for name in ("old", "new")] == [
        True,
        False,
    ]
