"""The client library against a real standalone server process (3 shards in
`default`, 2 in the natural-order namespace `natural`): every call, its errors,
batching as the server counts it, sessions, feeds, and the sync wrapper."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import pytest

from cairn.client import errors
from cairn.client.client import AsyncClient
from cairn.client.options import ClientOptions
from cairn.client.records import EXPECTED_RECORD_DOES_NOT_EXIST, Comparison, NotificationType
from cairn.client.sync import Client
from cairn.common.keyorder import KeyOrder
from cairn.proto import replication_pb2 as rpb
from cairn.proto import replication_pb2_grpc as rpb_grpc

T = TypeVar("T")


def run(server: str, scenario: Callable[[AsyncClient], Awaitable[T]], **options: Any) -> T:
    async def main() -> T:
        client = await AsyncClient.connect(
            server, options=ClientOptions(request_timeout_s=10.0, **options)
        )
        async with client:
            return await scenario(client)

    return asyncio.run(main())


def test_put_get_delete_with_versions(server: str, prefix: str) -> None:
    key = prefix + "record"

    async def scenario(client: AsyncClient) -> None:
        created = await client.put(key, b"one", expected_version=EXPECTED_RECORD_DOES_NOT_EXIST)
        assert created.key == key and created.version.modifications_count == 0
        assert not created.version.ephemeral
        with pytest.raises(errors.UnexpectedVersion):
            await client.put(key, b"again", expected_version=EXPECTED_RECORD_DOES_NOT_EXIST)
        updated = await client.put(key, b"two", expected_version=created.version.version_id)
        assert updated.version.modifications_count == 1
        assert updated.version.version_id > created.version.version_id
        assert updated.version.created_timestamp_ms == created.version.created_timestamp_ms
        with pytest.raises(errors.UnexpectedVersion):
            await client.put(key, b"stale", expected_version=created.version.version_id)
        record = await client.get(key)
        assert (record.key, record.value, record.version) == (key, b"two", updated.version)
        without_value = await client.get(key, include_value=False)
        assert without_value.value is None and without_value.version == updated.version
        with pytest.raises(errors.UnexpectedVersion):
            await client.delete(key, expected_version=created.version.version_id)
        await client.delete(key, expected_version=updated.version.version_id)
        with pytest.raises(errors.KeyNotFound):
            await client.get(key)
        with pytest.raises(errors.KeyNotFound):
            await client.delete(key)

    run(server, scenario)


def test_gets_with_a_comparison_ask_every_shard_and_keep_the_nearest(
    server: str, prefix: str
) -> None:
    keys = [f"{prefix}{i:03d}" for i in range(0, 60, 3)]

    async def scenario(client: AsyncClient) -> None:
        await asyncio.gather(*(client.put(key, key.encode()) for key in keys))
        assert len({client.shard_for(key) for key in keys}) == 3
        for probe in range(-1, 62):
            asked = f"{prefix}{probe:03d}" if probe >= 0 else prefix
            expectations = {
                Comparison.FLOOR: [k for k in keys if k <= asked][-1:],
                Comparison.LOWER: [k for k in keys if k < asked][-1:],
                Comparison.CEILING: [k for k in keys if k >= asked][:1],
                Comparison.HIGHER: [k for k in keys if k > asked][:1],
            }
            for comparison, expected in expectations.items():
                if expected:
                    found = await client.get(asked, comparison=comparison)
                    assert found.key == expected[0], (asked, comparison)
                    assert found.value == expected[0].encode()
                elif comparison in (Comparison.CEILING, Comparison.HIGHER):
                    # Beyond this test's keys: whatever follows must not be ours.
                    with contextlib.suppress(errors.KeyNotFound):
                        found = await client.get(asked, comparison=comparison)
                        assert not found.key.startswith(prefix)

    run(server, scenario)


def test_lists_and_scans_merge_the_shards_in_hierarchical_order(server: str, prefix: str) -> None:
    keys = [prefix + suffix for suffix in ("a", "b/c", "b", "a/x/y", "c", "b/a", "zz", "a/b")]

    async def scenario(client: AsyncClient) -> None:
        for key in keys:
            await client.put(key, key.encode())
        children = [k for k in keys if k.count("/") == prefix.count("/")]
        expected = sorted(children, key=KeyOrder.HIERARCHICAL.encoder)
        assert await client.list(prefix, prefix + "/") == expected
        scanned = [r async for r in client.range_scan(prefix, prefix + "/")]
        assert [r.key for r in scanned] == expected
        assert [r.value for r in scanned] == [k.encode() for k in expected]
        assert await client.list(prefix, prefix + "/", limit=2) == expected[:2]
        everything = await client.list(prefix, prefix + "~")
        assert everything == sorted(
            [k for k in keys if k.count("/") == prefix.count("/")],
            key=KeyOrder.HIERARCHICAL.encoder,
        )
        # Stopping early closes every shard's stream.
        iterator = client.iter_list(prefix, prefix + "/")
        assert await anext(iterator) == expected[0]
        await iterator.aclose()
        await client.delete_range(prefix, prefix + "/")
        assert await client.list(prefix, prefix + "/") == []
        assert await client.list(prefix + "b/", prefix + "b//") == [prefix + "b/a", prefix + "b/c"]

    run(server, scenario)


def test_a_natural_order_namespace_lists_bytewise(server: str) -> None:
    async def scenario(client: AsyncClient) -> None:
        natural = await client.for_namespace("natural")
        assert natural.shard_map.key_order is KeyOrder.NATURAL
        closed_early = await client.for_namespace("natural")
        await closed_early.close()
        assert closed_early not in client._children  # a closed sibling is let go
        keys = ["/n/a/b", "/n/b", "/n/a", "/n/a/a/a"]
        for key in keys:
            await natural.put(key, b"x")
        assert await natural.list("/n/", "/n0") == sorted(keys)
        with pytest.raises(errors.KeyNotFound):
            await client.get("/n/a")  # another namespace

    run(server, scenario)


def test_partition_keys_keep_records_on_one_shard(server: str, prefix: str) -> None:
    async def scenario(client: AsyncClient) -> None:
        for i in range(10):
            await client.put(f"{prefix}{i}", b"p", partition_key="tenant")
        shard = client.shard_for("", "tenant")
        assert await client.list(prefix, prefix + "/", partition_key="tenant") == [
            f"{prefix}{i}" for i in range(10)
        ]
        record = await client.get(f"{prefix}3", partition_key="tenant")
        assert record.value == b"p"
        # Without the partition key the same key routes elsewhere (most of the time).
        elsewhere = [i for i in range(10) if client.shard_for(f"{prefix}{i}") != shard]
        assert elsewhere
        with pytest.raises(errors.KeyNotFound):
            await client.get(f"{prefix}{elsewhere[0]}")
        await client.delete(f"{prefix}3", partition_key="tenant")
        await client.delete_range(prefix, prefix + "/", partition_key="tenant")
        assert await client.list(prefix, prefix + "/", partition_key="tenant") == []

    run(server, scenario)


def test_secondary_indexes(server: str, prefix: str) -> None:
    async def scenario(client: AsyncClient) -> None:
        people = {"ann": "30", "bob": "25", "cyd": "41", "dan": "25"}
        for name, age in people.items():
            await client.put(prefix + name, name.encode(), secondary_indexes={"age": age})
        found = await client.get("25", secondary_index="age")
        assert found.key in (prefix + "bob", prefix + "dan")
        assert found.secondary_index_key == "25"
        floor = await client.get("40", comparison=Comparison.FLOOR, secondary_index="age")
        assert floor.key == prefix + "ann"
        listed = await client.list("25", "31", secondary_index="age")
        assert sorted(listed) == sorted(prefix + n for n in ("ann", "bob", "dan"))
        scanned = [r async for r in client.range_scan("00", "99", secondary_index="age")]
        assert [(r.secondary_index_key, r.key) for r in scanned] == sorted(
            (age, prefix + name) for name, age in people.items()
        )

    run(server, scenario)


def test_ephemeral_records_live_as_long_as_the_client(server: str, prefix: str) -> None:
    key = prefix + "lock"

    async def scenario(client: AsyncClient) -> None:
        holder = await AsyncClient.connect(server)
        result = await holder.put(key, b"mine", ephemeral=True)
        assert result.version.ephemeral
        assert result.version.client_identity == holder.options.client_identity
        seen = await client.get(key)
        assert seen.version.session_id == result.version.session_id
        await holder.close()
        with pytest.raises(errors.KeyNotFound):
            await client.get(key)

    run(server, scenario)


def test_explicit_sessions(server: str, prefix: str) -> None:
    key = prefix + "member"

    async def scenario(client: AsyncClient) -> None:
        shard = client.shard_for(key)
        session = await client.create_session(shard, timeout_ms=5_000, client_identity="me")
        await client.keep_alive(shard, session)
        put = await client.put(key, b"here", session_id=session, client_identity="me")
        assert put.version.session_id == session
        assert put.version.client_identity == "me"
        await client.close_session(shard, session)
        with pytest.raises(errors.KeyNotFound):
            await client.get(key)
        with pytest.raises(errors.SessionExpired):
            await client.keep_alive(shard, session)
        with pytest.raises(errors.SessionExpired):
            await client.put(key, b"late", session_id=session)
        with pytest.raises(errors.InvalidArgument):
            await client.create_session(shard, timeout_ms=100)

    run(server, scenario)


def test_notifications_follow_every_shard_and_resume_after_an_offset(
    server: str, prefix: str
) -> None:
    keys = [f"{prefix}{i}" for i in range(6)]

    async def scenario(client: AsyncClient) -> None:
        feed = client.notifications()
        starts = {}
        while len(starts) < 3:
            batch = await anext(feed)
            assert batch.notifications == ()
            starts[batch.shard] = batch.offset
        for key in keys:
            await client.put(key, b"1")
        await client.put(keys[0], b"2")
        await client.delete(keys[1])
        changes: dict[str, list[NotificationType]] = {}
        positions = dict(starts)
        while sum(len(v) for v in changes.values()) < len(keys) + 2:
            batch = await anext(feed)
            positions[batch.shard] = batch.offset
            for note in batch.notifications:
                changes.setdefault(note.key, []).append(note.type)
        await feed.aclose()
        assert changes[keys[0]] == [NotificationType.CREATED, NotificationType.MODIFIED]
        assert changes[keys[1]] == [NotificationType.CREATED, NotificationType.DELETED]
        # A new subscription resuming from the first offsets replays the same changes.
        replay = client.notifications(starts)
        replayed: dict[str, list[NotificationType]] = {}
        while sum(len(v) for v in replayed.values()) < len(keys) + 2:
            for note in (await anext(replay)).notifications:
                if note.key.startswith(prefix):
                    replayed.setdefault(note.key, []).append(note.type)
        await replay.aclose()
        assert replayed == changes

    run(server, scenario)


def test_sequence_keys_and_their_updates(server: str, prefix: str) -> None:
    async def scenario(client: AsyncClient) -> None:
        first = await client.put(prefix + "seq", b"a", partition_key="p", sequence_key_deltas=[1])
        assert first.key == prefix + "seq-00000000000000000001"
        updates = client.sequence_updates(prefix + "seq", partition_key="p")
        assert await anext(updates) == first.key
        second = await client.put(prefix + "seq", b"b", partition_key="p", sequence_key_deltas=[5])
        assert second.key == prefix + "seq-00000000000000000006"
        assert await anext(updates) == second.key
        await updates.aclose()
        with pytest.raises(errors.InvalidArgument):
            await client.put(prefix + "seq", b"c", sequence_key_deltas=[1])

    run(server, scenario)


def _server_counters(server: str) -> tuple[int, int]:
    async def read() -> tuple[int, int]:
        async with grpc.aio.insecure_channel(server) as channel:
            response = await rpb_grpc.CoordinationStub(channel).GetStatus(rpb.GetStatusRequest())
        statuses = list(response.shards)
        return (
            sum(s.write_requests for s in statuses),
            sum(s.write_operations for s in statuses),
        )

    return asyncio.run(read())


def test_concurrent_puts_travel_in_batches_the_server_counts(server: str, prefix: str) -> None:
    operations = 3000

    async def many(client: AsyncClient) -> None:
        await asyncio.gather(*(client.put(f"{prefix}{i}", b"v") for i in range(operations)))

    before = _server_counters(server)
    run(server, many)
    after = _server_counters(server)
    requests, counted = after[0] - before[0], after[1] - before[1]
    assert counted == operations
    assert requests <= operations / 20, f"{requests} requests for {operations} operations"

    before = _server_counters(server)
    run(server, many, batching=False)
    after = _server_counters(server)
    assert (after[0] - before[0], after[1] - before[1]) == (operations, operations)


def test_an_invalid_operation_fails_alone_not_its_batch(server: str, prefix: str) -> None:
    async def scenario(client: AsyncClient) -> None:
        good = [client.put(f"{prefix}{i}", b"ok") for i in range(200)]
        bad = client.put(prefix + "x" * 20_000, b"key too long")
        results = await asyncio.gather(*good, bad, return_exceptions=True)
        assert isinstance(results[-1], errors.InvalidArgument)
        assert all(not isinstance(r, BaseException) for r in results[:-1])
        assert len(await client.list(prefix, prefix + "/")) == 200

    run(server, scenario)


def test_errors_a_caller_sees(server: str, prefix: str) -> None:
    async def scenario(client: AsyncClient) -> None:
        with pytest.raises(errors.NamespaceNotFound):
            await client.for_namespace("no-such-namespace")
        with pytest.raises(errors.InvalidArgument):
            await client.put(prefix + "k", "text")  # type: ignore[arg-type]
        with pytest.raises(errors.InvalidArgument):
            await client.put(prefix + "k", b"v", ephemeral=True, session_id=1)

    run(server, scenario)
    with pytest.raises(errors.NamespaceNotFound):
        asyncio.run(AsyncClient.connect(server, namespace="no-such-namespace"))


def test_nothing_listening_is_a_timeout_not_a_hang(unused_port: int) -> None:
    options = ClientOptions(connect_timeout_s=0.5)
    with pytest.raises(errors.RequestTimeout, match="no shard map"):
        asyncio.run(AsyncClient.connect(f"127.0.0.1:{unused_port}", options=options))


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_a_closed_client_refuses_calls(server: str, prefix: str) -> None:
    async def scenario() -> None:
        client = await AsyncClient.connect(server)
        await client.close()
        with pytest.raises(errors.ClientClosed):
            await client.put(prefix + "k", b"v")
        await client.close()  # idempotent

    asyncio.run(scenario())


def test_the_sync_client(server: str, prefix: str) -> None:
    with Client(server) as client:
        result = client.put(prefix + "a", b"1")
        client.put(prefix + "b", b"2", expected_version=EXPECTED_RECORD_DOES_NOT_EXIST)
        assert client.get(prefix + "a").version == result.version
        assert client.list(prefix, prefix + "/") == [prefix + "a", prefix + "b"]
        assert [r.value for r in client.range_scan(prefix, prefix + "/")] == [b"1", b"2"]
        keys = client.iter_list(prefix, prefix + "/")
        assert next(keys) == prefix + "a"
        keys.close()
        with pytest.raises(errors.UnexpectedVersion):
            client.put(prefix + "a", b"x", expected_version=EXPECTED_RECORD_DOES_NOT_EXIST)
        client.delete(prefix + "a")
        client.delete_range(prefix, prefix + "/")
        assert client.list(prefix, prefix + "/") == []
        with pytest.raises(errors.KeyNotFound):
            client.get(prefix + "a")
