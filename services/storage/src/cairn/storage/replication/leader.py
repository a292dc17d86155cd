"""A shard's leadership for one term: the pure LeaderCore and LeaderLease, plus one
sender task per follower."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from cairn.common.errors import MembersBehind
from cairn.proto import replication_pb2 as rpb
from cairn.storage.clock import monotonic_ms
from cairn.storage.config import ReplicationSettings
from cairn.storage.core.replication.leader import LeaderCore
from cairn.storage.core.replication.lease import LeaderLease, takeover_wait_ms
from cairn.storage.core.replication.replica import Member
from cairn.storage.ports import Peers
from cairn.storage.replication.sender import FollowerSender

if TYPE_CHECKING:
    from cairn.storage.shard import ShardReplica


class ReplicatingLeader:
    """Implements `ports.LeaderRole`."""

    def __init__(
        self,
        shard: ShardReplica,
        core: LeaderCore,
        peers: Peers | None,
        settings: ReplicationSettings,
        clock_ms: Callable[[], int] = monotonic_ms,
    ) -> None:
        """Replicates to the followers of `core`, the term's quorum (the shard
        core's: ShardCore.leading)."""
        followers = [progress.member for progress in core.followers.values()]
        if followers and peers is None:
            raise ValueError("a leader with followers needs channels to them")
        self.shard = shard
        self.term = core.term
        self.me = core.me
        self._peers = peers
        self._settings = settings
        self.core = core
        self.clock_ms = clock_ms
        self.lease = LeaderLease(self.me.internal_address, settings.leader_lease_ms)
        # With followers, an older leader may still hold a lease (lease.py).
        wait_ms = takeover_wait_ms(settings.leader_lease_ms, settings.max_clock_drift)
        self.serves_from_ms = clock_ms() + (wait_ms if followers else 0)
        # Replaced (after being set) whenever a follower echoes: a read waiting for
        # the lease to be renewed looks again.
        self._echoed = asyncio.Event()
        self._senders: dict[str, tuple[FollowerSender, asyncio.Task[None]]] = {}
        # Removals waiting for the other members to catch up, by follower.
        self._removals: dict[str, asyncio.Event] = {}
        for member in followers:
            self._start_sender(member)

    # -- ports.LeaderRole ------------------------------------------------------------

    def entries_appended(self) -> None:
        for sender, _ in self._senders.values():
            sender.wake()

    def changes_sent(self) -> None:
        """A sender sent applied changes: the leader keeps only those some
        follower's stream has not carried yet (applied_changes.py)."""
        kept = self.shard.changes_for_followers
        senders = [sender for sender, _ in self._senders.values()]
        if senders:
            kept.drop_through(min(sender.changes_sent_through for sender in senders))
        else:
            kept.clear()

    def own_durability_counted(self) -> None:
        """The quorum counted the leader's own durable offset (the shard did):
        that may finish a removal."""
        self._removals_may_have_finished()

    async def stop(self) -> None:
        senders, self._senders = self._senders, {}
        for sender, task in senders.values():
            sender.stop()
            task.cancel()
        for _, task in senders.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- the lease -------------------------------------------------------------------

    def lease_holds(self) -> bool:
        quorum = self.core.quorum
        return self.lease.holds(quorum.voters, self.clock_ms(), quorum.majority)

    async def renew_lease(self, timeout_s: float) -> bool:
        """Ask every follower for an answer now; whether the lease holds within
        `timeout_s` (no majority answering keeps it lapsed)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        for sender, _ in self._senders.values():
            sender.request_heartbeat()
        while not self.lease_holds():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._echoed.wait()
        return True

    def lease_echo(self, member: str, sent_ms: int) -> None:
        self.lease.on_echo(member, sent_ms)
        echoed, self._echoed = self._echoed, asyncio.Event()
        echoed.set()

    # -- followers -------------------------------------------------------------------

    def follower_acknowledged(
        self,
        member: str,
        term: int,
        durable_offset: int,
        applied_offset: int | None = None,
        incarnation: int | None = None,
    ) -> None:
        self.core.on_ack(member, term, durable_offset, applied_offset, incarnation)
        self._quorum_changed()

    def _quorum_changed(self) -> None:
        """The quorum counted an answer or a membership change: a removal may
        have finished, the commit offset may have moved (the shard reads it)."""
        self._removals_may_have_finished()
        self.shard.commit_counted()

    def _removals_may_have_finished(self) -> None:
        if self._removals:
            for member, finished in self._removals.items():
                if not self.core.is_leaving(member):
                    finished.set()

    def _start_sender(self, member: Member) -> None:
        assert self._peers is not None
        sender = FollowerSender(self, member, self._peers.get(member.internal_address))
        task = asyncio.get_running_loop().create_task(
            sender.run(), name=f"replicate-{self.shard.shard_id}-{member.internal_address}"
        )
        self._senders[member.internal_address] = (sender, task)

    def add_follower(self, member: Member) -> None:
        if member.internal_address in self._senders:
            return
        if self._peers is None:
            raise ValueError("this leader has no channels to other pods")
        self.core.add_follower(member)
        self._start_sender(member)

    async def remove_follower(self, internal_address: str) -> None:
        """Drop a follower. One whose acknowledgement committed entries still
        need stays, leaving, until the rest caught up with them (LeaderCore);
        that is waited for up to `removal_wait_s`, then the removal is called
        off (MembersBehind: the caller may ask again)."""
        self.core.remove_follower(internal_address)
        self._quorum_changed()
        if self.core.is_leaving(internal_address):
            await self._wait_removed(internal_address)
        entry = self._senders.pop(internal_address, None)
        self.lease.forget(internal_address)
        if entry is not None:
            entry[0].stop()
            entry[1].cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await entry[1]

    async def _wait_removed(self, internal_address: str) -> None:
        finished = asyncio.Event()
        self._removals[internal_address] = finished
        try:
            async with asyncio.timeout(self._settings.removal_wait_s):
                await finished.wait()
        except TimeoutError:
            if self.core.is_leaving(internal_address):
                self.core.cancel_removal(internal_address)
                self._quorum_changed()
                raise MembersBehind(
                    f"{internal_address} still holds committed entries the other members "
                    f"lack after {self._settings.removal_wait_s:g} s; ask again later"
                ) from None
        finally:
            self._removals.pop(internal_address, None)

    @property
    def settings(self) -> ReplicationSettings:
        return self._settings

    def follower_status(self) -> list[rpb.FollowerStatus]:
        statuses = []
        for address, progress in self.core.followers.items():
            sender = self._senders.get(address)
            connected = sender is not None and sender[0].connected
            statuses.append(
                rpb.FollowerStatus(
                    node=rpb.Node(
                        public_address=progress.member.public_address,
                        internal_address=address,
                    ),
                    acked_offset=progress.acked_offset,
                    applied_offset=progress.applied_offset,
                    voting=self.core.is_voting(address),
                    state=progress.phase.value if connected else "disconnected",
                    incarnation=progress.incarnation or 0,
                )
            )
        return statuses


async def lead_alone(shard: ShardReplica, me: Member) -> None:
    """Make `shard` the leader of an ensemble of one (standalone mode: every start is
    a new term) and wait until it serves, which includes re-applying whatever its
    log holds beyond its KV."""
    term = shard.term + 1
    await shard.new_term(term)

    def sole_leader(replica: ShardReplica, core: LeaderCore) -> ReplicatingLeader:
        return ReplicatingLeader(replica, core, None, replica.replication)

    await shard.become_leader(term, me, sole_leader)
    await shard.wait_serving(timeout_s=None)
