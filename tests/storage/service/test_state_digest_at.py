"""A replica's state digest at an offset it has not applied yet: applying stops
there until the view is taken, so the digest describes exactly the records after
that entry even when the entries after it commit in the same step (and would
otherwise be applied in one group); an offset already passed is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from storage.service.test_folding import leader, put, records, settled, submit

from cairn.common.errors import OffsetPassed
from cairn.common.keyorder import KeyOrder
from cairn.storage.config import Limits
from cairn.storage.core.state_digest import digest_of

# No folding: one entry per put, so each put has an offset of its own.
NO_FOLDS = Limits(fold_writes_after_uncommitted_entries=1_000_000)


async def _digest_at_a_future_offset(tmp_path: Path) -> None:
    async with leader(tmp_path / "leader", NO_FOLDS) as (replica, follower):
        keys = [f"/d/{i}" for i in range(6)]
        answers = [await submit(replica, put(key)) for key in keys]
        await settled(replica)
        first = replica.log.last_offset - len(keys) + 1
        target = first + 2  # after the third put
        assert replica.applied_offset < first
        digest = asyncio.create_task(replica.state_digest_at(target, timeout_s=10))
        await asyncio.sleep(0.05)
        assert not digest.done()
        follower.acknowledge(replica.log.last_offset)  # all six commit at once
        got = await digest
        await asyncio.gather(*answers)
        assert replica.applied_offset == replica.log.last_offset  # applying went on

        encoded = {KeyOrder.HIERARCHICAL.encode(key) for key in keys[:3]}
        expected = digest_of(sorted((k, v) for k, v in records(replica.kv).items() if k in encoded))
        assert got == expected and got.records == 3
        with pytest.raises(OffsetPassed):
            await replica.state_digest_at(target, timeout_s=1)
        # Now, at the applied offset: every record.
        now = await replica.state_digest_at(replica.applied_offset, timeout_s=1)
        assert now == digest_of(sorted(records(replica.kv).items())) and now.records == 6


def test_a_digest_at_a_future_offset_describes_exactly_that_offset(tmp_path: Path) -> None:
    asyncio.run(_digest_at_a_future_offset(tmp_path))


async def _never_reached(tmp_path: Path) -> None:
    async with leader(tmp_path / "leader", NO_FOLDS) as (replica, _):
        with pytest.raises(TimeoutError):
            await replica.state_digest_at(replica.applied_offset + 5, timeout_s=0.2)
        # The stop is gone: writes still apply.
        assert not replica.core.digest_stops


def test_an_offset_not_reached_in_time_times_out_and_releases_applying(tmp_path: Path) -> None:
    asyncio.run(_never_reached(tmp_path))
