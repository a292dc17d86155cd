"""Clients that hold a session and, at times, an ephemeral lock, on the shipped
pods (the client API's calls: replica.sessions and a put of the lock key with
the session's id and an expected version of "absent"). Now and then one
crashes: it stops keeping its session alive, which then expires.

What a locker believes: its session lives until a timeout after it sent the
last request the leader answered for it, and it holds the lock while it
does. Checked: (h) an ephemeral record is never held by two live sessions:
when a locker's put of the lock is acknowledged, no other locker still
believes it holds it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from cairn.common.errors import CairnError
from cairn.proto import oxia_client_pb2 as pb
from simulation.disk import DiskGone
from simulation.pod_clients import SHARD, ClientTarget

LOCK_KEY = "/lock"
SESSION_TIMEOUT_MS = 2_000  # the least a pod allows
KEEPALIVE_MS = 300
# A request unanswered this long is given up (sent again if still wanted).
RETRY_MS = 500


@dataclass
class Locker:
    name: str
    session: int | None = None
    creating_since_ms: float | None = None
    live_until_ms: float = -1.0
    holds: bool = False
    acquiring_since_ms: float | None = None
    last_keepalive_ms: float = -1.0

    def believes_holding(self, now_ms: float) -> bool:
        return self.holds and now_ms < self.live_until_ms

    def crash(self) -> None:
        self.session, self.holds, self.acquiring_since_ms = None, False, None
        self.creating_since_ms = None


class Lockers:
    def __init__(
        self,
        count: int,
        rng: random.Random,
        clock_ms: Callable[[], float],
        tally: Callable[[str], None],
        violations: list[str],
        crash_probability: float = 0.004,
    ) -> None:
        self.lockers = [Locker(f"locker-{i}") for i in range(count)]
        self.rng = rng
        self.clock_ms = clock_ms
        self.tally = tally
        self.violations = violations
        self.crash_probability = crash_probability

    def act(self, target: Callable[[], ClientTarget | None]) -> None:
        """Each locker, now: learn that its session ran out, crash, or send the
        next request it wants (create a session, keep it alive, take the lock)."""
        now_ms = self.clock_ms()
        for locker in self.lockers:
            if locker.session is not None and now_ms >= locker.live_until_ms:
                locker.crash()  # takes its session as lost
            if locker.session is not None and self.rng.random() < self.crash_probability:
                locker.crash()
                self.tally("lockers crashed")
                continue
            pod = target()
            if pod is None:
                continue
            if locker.session is None:
                since = locker.creating_since_ms
                if since is None or now_ms - since > RETRY_MS:
                    locker.creating_since_ms = now_ms
                    pod.spawn(self._create(pod, locker, now_ms))
            elif now_ms - locker.last_keepalive_ms >= KEEPALIVE_MS:
                locker.last_keepalive_ms = now_ms
                pod.spawn(self._keep_alive(pod, locker, locker.session, now_ms))
            elif not locker.holds:
                since = locker.acquiring_since_ms
                if since is None or now_ms - since > RETRY_MS:
                    locker.acquiring_since_ms = now_ms
                    pod.spawn(self._take_lock(pod, locker, locker.session, now_ms))

    async def _create(self, pod: ClientTarget, locker: Locker, sent_ms: float) -> None:
        try:
            replica = pod.directory.leader_shard(SHARD)
            session = await replica.sessions.create(SESSION_TIMEOUT_MS, locker.name)
        except (CairnError, DiskGone):
            return
        if locker.creating_since_ms != sent_ms:
            return  # given up on (or crashed) meanwhile
        locker.creating_since_ms = None
        locker.session = session
        locker.live_until_ms = sent_ms + SESSION_TIMEOUT_MS
        locker.last_keepalive_ms = sent_ms
        self.tally("sessions created")

    async def _keep_alive(
        self, pod: ClientTarget, locker: Locker, session: int, sent_ms: float
    ) -> None:
        try:
            replica = pod.directory.leader_shard(SHARD)
            await replica.sessions.keep_alive(session)
        except (CairnError, DiskGone):
            return
        if locker.session == session:
            locker.live_until_ms = max(locker.live_until_ms, sent_ms + SESSION_TIMEOUT_MS)

    async def _take_lock(
        self, pod: ClientTarget, locker: Locker, session: int, sent_ms: float
    ) -> None:
        request = pb.WriteRequest(shard=SHARD)
        request.puts.add(
            key=LOCK_KEY, value=locker.name.encode(), expected_version_id=-1, session_id=session
        )
        try:
            replica = pod.directory.leader_shard(SHARD)
            raw = await replica.write(request.SerializeToString(), request)
        except (CairnError, DiskGone):
            return
        if locker.session != session or locker.acquiring_since_ms != sent_ms:
            return
        locker.acquiring_since_ms = None
        if pb.WriteResponse.FromString(raw).puts[0].status != pb.OK:
            return
        self.tally("locks taken")
        self._check_lock_taken(locker, pod)
        locker.holds = True

    def _check_lock_taken(self, taker: Locker, pod: ClientTarget) -> None:
        now_ms = self.clock_ms()
        for other in self.lockers:
            if other is not taker and other.believes_holding(now_ms):
                self.violations.append(
                    f"(h) {taker.name} took the lock with session {taker.session} at "
                    f"{now_ms:g} ms (through {pod.name}), but {other.name} still holds it "
                    f"with session {other.session} (alive until {other.live_until_ms:g} ms "
                    "by its last answered keep-alive)"
                )
