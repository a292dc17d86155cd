"""The per-shard reads that split work by shard (the Spark source, exports): a
scan of one shard in key order with a limit, and a bounded read of one shard's
notifications between two offsets; against a real standalone server."""

from __future__ import annotations

import asyncio
import functools

import pytest

from cairn.client import errors
from cairn.client.client import AsyncClient
from cairn.client.options import ClientOptions
from cairn.client.records import NotificationType
from cairn.client.sync import Client
from cairn.common.keyorder import compare_hierarchical


def hierarchical(keys: list[str]) -> list[str]:
    return sorted(
        keys, key=functools.cmp_to_key(lambda a, b: compare_hierarchical(a.encode(), b.encode()))
    )


def test_a_shard_scan_yields_exactly_that_shards_records_in_key_order(
    server: str, prefix: str
) -> None:
    keys = [f"{prefix}{i % 7}/{i:03d}" for i in range(60)] + [f"{prefix}{i}" for i in range(9)]

    async def scenario() -> None:
        async with await AsyncClient.connect(
            server, options=ClientOptions(request_timeout_s=10.0)
        ) as client:
            await asyncio.gather(*(client.put(key, key.encode()) for key in keys))
            seen: list[str] = []
            for shard in client.shard_map.shard_ids():
                # the whole shard (children and deeper keys), then the test's own keys
                # only: other tests share the server
                found = [r async for r in client.shard_scan(shard)]
                mine = [r for r in found if r.key.startswith(prefix)]
                expected = hierarchical([k for k in keys if client.shard_for(k) == shard])
                assert [r.key for r in mine] == expected
                assert all(r.value == r.key.encode() for r in mine)
                seen += [r.key for r in mine]
            assert sorted(seen) == sorted(keys)
            with pytest.raises(errors.InvalidArgument):
                [r async for r in client.shard_scan(99)]

    asyncio.run(scenario())


def test_a_shard_scan_pages_with_a_limit(server: str, prefix: str) -> None:
    with Client(server) as client:
        keys = [f"{prefix}{i:03d}" for i in range(40)]
        for key in keys:
            client.put(key, b"v")
        shard = client.shard_for(keys[0])
        mine = hierarchical([k for k in keys if client.shard_for(k) == shard])
        pages: list[list[str]] = []
        start = prefix
        while True:
            page = [r.key for r in client.shard_scan(shard, start, prefix + "/", limit=3)]
            if not page:
                break
            pages.append(page)
            start = page[-1] + "\x00"
        assert all(len(page) <= 3 for page in pages)
        assert [key for page in pages for key in page] == mine
        assert list(client.shard_scan(shard, limit=0)) == []
        # the default range is the whole shard
        assert set(mine) <= {r.key for r in client.shard_scan(shard)}


def test_a_bounded_read_of_a_shards_notifications(server: str, prefix: str) -> None:
    with Client(server) as client:
        keys = [f"{prefix}{i:02d}" for i in range(30)]
        shard = client.shard_for(keys[0])
        mine = [k for k in keys if client.shard_for(k) == shard]
        head = client.notification_head(shard)
        offsets = [client.put(key, b"v").version.version_id for key in mine]
        client.delete(mine[0])
        end = client.notification_head(shard)
        assert end > head

        batches = client.read_notifications(shard, head, end)
        changes = [(n.key, n.type) for b in batches for n in b.notifications]
        ours = [c for c in changes if c[0].startswith(prefix)]
        assert ours == [(k, NotificationType.CREATED) for k in mine] + [
            (mine[0], NotificationType.DELETED)
        ]
        assert batches[-1].offset == end and all(b.shard == shard for b in batches)
        assert [b.offset for b in batches] == sorted({b.offset for b in batches})
        assert offsets[0] in [b.offset for b in batches]

        # bounded by a count, then resumed after the last batch: the same batches
        first = client.read_notifications(shard, head, end, max_batches=2)
        assert len(first) == 2
        rest = client.read_notifications(shard, first[-1].offset, end)
        assert first + rest == batches
        # between two offsets, exclusive of the start and inclusive of the end
        middle = client.read_notifications(shard, batches[0].offset, batches[2].offset)
        assert middle == batches[1:3]
        # caught up: an idle read ends with nothing, at once or after the idle time
        assert client.read_notifications(shard, end, idle_timeout_s=0.5) == []
        assert client.read_notifications(shard, end, end) == []
        with pytest.raises(errors.InvalidArgument):
            client.read_notifications(99, -1)

        # Filtered by the pod: only the batches with a matching change, and the read
        # ends at the end offset even when nothing matches up to it.
        watched = mine[1]
        only = client.read_notifications(shard, head, end, key_prefixes=[watched])
        assert [(n.key, n.type) for b in only for n in b.notifications] == [
            (watched, NotificationType.CREATED)
        ]
        assert [b.offset for b in only if b.notifications] == [offsets[1]]
        # (at most the pod's empty batch telling it reached the end)
        nothing = client.read_notifications(shard, head, end, key_prefixes=["/nothing/"])
        assert all(not b.notifications and b.offset == end for b in nothing), nothing
