"""The first shard map a client is given: only a whole one, and no verdict on a
namespace before the pod knows the cluster's map."""

from __future__ import annotations

import asyncio

import pytest

from cairn.common.errors import NamespaceNotFound
from cairn.common.hashing import split_hash_space
from cairn.common.keyorder import KeyOrder
from cairn.storage.directory import (
    ALL_NAMESPACES,
    NamespaceLayout,
    ShardDirectory,
    ShardPlacement,
)

SETTLE_S = 0.05  # long enough for a waiter that could return to have returned


def layout(name: str, leaders: list[str], first_shard: int = 0) -> NamespaceLayout:
    ranges = split_hash_space(len(leaders)) if leaders else []
    placements = tuple(
        ShardPlacement(first_shard + index, ranges[index], leader)
        for index, leader in enumerate(leaders)
    )
    return NamespaceLayout(name, KeyOrder.HIERARCHICAL, placements)


def leaders_of(message: object, namespace: str) -> list[str]:
    return [a.leader for a in message.namespaces[namespace].assignments]  # type: ignore[attr-defined]


async def still_waiting(task: asyncio.Task[object]) -> bool:
    await asyncio.sleep(SETTLE_S)
    return not task.done()


def test_a_pod_waits_for_the_controllers_first_push_and_for_every_leader() -> None:
    async def scenario() -> None:
        directory = ShardDirectory(pushed_map=True)
        first = asyncio.create_task(directory.first_assignments("default"))
        every = asyncio.create_task(directory.first_assignments(ALL_NAMESPACES))
        # Before any push the pod cannot tell whether "default" exists.
        assert await still_waiting(first)
        assert await still_waiting(every)
        # The controller's map while the namespace's shards are being placed...
        await directory.set_layouts([layout("default", [])], version=1)
        assert await still_waiting(first)
        assert await still_waiting(every)
        # ...and once they are but one has no leader yet: not one to start a client on.
        await directory.set_layouts([layout("default", ["a:1", ""])], version=2)
        assert await still_waiting(first)
        assert await still_waiting(every)
        await directory.set_layouts([layout("default", ["a:1", "b:2"])], version=3)
        _, message = await asyncio.wait_for(first, 1)
        assert leaders_of(message, "default") == ["a:1", "b:2"]
        _, message = await asyncio.wait_for(every, 1)
        assert list(message.namespaces) == ["default"]
        # Every namespace at once leaves out one still being placed.
        await directory.set_layouts(
            [layout("default", ["a:1", "b:2"]), layout("new", [], first_shard=2)], version=4
        )
        _, message = await asyncio.wait_for(directory.first_assignments("default"), 1)
        assert list(message.namespaces) == ["default"]
        _, message = directory.assignments(ALL_NAMESPACES)
        assert list(message.namespaces) == ["default"]
        assert await still_waiting(asyncio.create_task(directory.first_assignments("new")))
        # Once a map is known, a namespace it lacks is a verdict, at once.
        with pytest.raises(NamespaceNotFound):
            await asyncio.wait_for(directory.first_assignments("other"), 1)

    asyncio.run(scenario())


def test_a_namespace_absent_from_the_first_push_is_not_found() -> None:
    async def scenario() -> None:
        directory = ShardDirectory(pushed_map=True)
        waiting = asyncio.create_task(directory.first_assignments("other"))
        assert await still_waiting(waiting)
        await directory.set_layouts([layout("default", ["a:1"])], version=1)
        with pytest.raises(NamespaceNotFound):
            await asyncio.wait_for(waiting, 1)

    asyncio.run(scenario())


def test_a_closing_directory_ends_the_wait_without_a_map() -> None:
    async def scenario() -> None:
        directory = ShardDirectory(pushed_map=True)
        waiting = asyncio.create_task(directory.first_assignments("default"))
        assert await still_waiting(waiting)
        await directory.close()
        assert await asyncio.wait_for(waiting, 1) is None

    asyncio.run(scenario())


def test_a_standalone_directory_answers_from_its_own_layout_at_once() -> None:
    async def scenario() -> None:
        directory = ShardDirectory("default")
        await directory.set_namespace(layout("default", ["here:1"]), {})
        _, message = await asyncio.wait_for(directory.first_assignments("default"), 1)
        assert leaders_of(message, "default") == ["here:1"]
        with pytest.raises(NamespaceNotFound):
            await asyncio.wait_for(directory.first_assignments("other"), 1)

    asyncio.run(scenario())
