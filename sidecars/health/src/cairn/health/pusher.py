"""Sends a heartbeat to the controller every heartbeat interval.

At most one request is in flight: each waits for the previous one, which the
heartbeat timeout bounds. A failure (controller down, slow, or answering an
error) is retried at the next interval with a fresh heartbeat; nothing queues
up, since only the latest state matters.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import httpx

from cairn.common.heartbeat import Heartbeat, heartbeat_document
from cairn.common.tls import LiveSSLContext

log = logging.getLogger(__name__)

# While the controller keeps failing, one log line per this many seconds.
FAILURE_LOG_INTERVAL_S = 30.0
# How much of an error answer's body to log.
ERROR_BODY_CHARS = 200


class FailureLog:
    """Logs the first failure of a run of failures, then at most one line per
    `interval_s` (with the count since) unless the kind of failure changes (say,
    from refused connections to error answers), and the recovery."""

    def __init__(
        self, what: str, interval_s: float, clock_s: Callable[[], float] = time.monotonic
    ) -> None:
        self.what = what
        self.interval_s = interval_s
        self.failures = 0
        self._clock_s = clock_s
        self._logged_at_s = 0.0
        self._logged_kind = ""
        self._unlogged = 0

    def failed(self, kind: str, detail: str = "") -> None:
        self.failures += 1
        now_s = self._clock_s()
        if (
            self.failures == 1
            or kind != self._logged_kind
            or now_s - self._logged_at_s >= self.interval_s
        ):
            reason = f"{kind}: {detail}" if detail else kind
            more = f" ({self._unlogged} more since the last report)" if self._unlogged else ""
            log.warning("%s failed: %s%s", self.what, reason, more)
            self._logged_at_s = now_s
            self._logged_kind = kind
            self._unlogged = 0
        else:
            self._unlogged += 1

    def succeeded(self) -> None:
        if self.failures:
            log.info("%s succeeded again after %d failures", self.what, self.failures)
        self.failures = 0
        self._logged_kind = ""
        self._unlogged = 0


class HeartbeatPusher:
    def __init__(
        self,
        url: str,
        interval_ms: int,
        timeout_ms: int,
        heartbeat: Callable[[], Heartbeat],
        client: httpx.AsyncClient,
    ) -> None:
        self.url = url
        self.interval_s = interval_ms / 1000
        self.timeout_s = timeout_ms / 1000
        self.sent = 0
        self.accepted = 0
        self._heartbeat = heartbeat
        self._client = client
        self._failures = FailureLog(f"heartbeat to {url}", FAILURE_LOG_INTERVAL_S)

    async def run(self) -> None:
        """Push until cancelled."""
        next_at_s = time.monotonic()
        while True:
            await self.push_once()
            next_at_s += self.interval_s
            now_s = time.monotonic()
            # A slow controller delays the next heartbeat; missed ones are skipped.
            next_at_s = max(next_at_s, now_s)
            await asyncio.sleep(next_at_s - now_s)

    async def push_once(self) -> bool:
        """Send the current heartbeat; whether the controller accepted it."""
        document = heartbeat_document(self._heartbeat())
        self.sent += 1
        try:
            # httpx's timeout bounds each phase (connect, write, read); this bounds
            # the whole request.
            async with asyncio.timeout(self.timeout_s):
                response = await self._client.post(self.url, json=document)
        except TimeoutError:
            self._failures.failed(f"no answer within {round(self.timeout_s * 1000)} ms")
            return False
        except httpx.HTTPError as error:
            self._failures.failed(type(error).__name__, str(error))
            return False
        if response.is_success:
            self.accepted += 1
            self._failures.succeeded()
            return True
        self._failures.failed(f"HTTP {response.status_code}", response.text[:ERROR_BODY_CHARS])
        return False


def new_client(timeout_ms: int, tls: LiveSSLContext | None = None) -> httpx.AsyncClient:
    """`tls`: the sidecar's certificate, presented to the controller (which takes
    a heartbeat only from the pod's own sidecar), and the CA to check it by."""
    # One connection is enough: one request at a time. The controller is dialled
    # directly: a proxy from the environment would only add a way to fail.
    if tls is None:
        return httpx.AsyncClient(
            timeout=timeout_ms / 1000,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            trust_env=False,
        )
    return httpx.AsyncClient(
        timeout=timeout_ms / 1000,
        limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        trust_env=False,
        verify=tls.context,
        # A rotated certificate is loaded before the request that may dial anew.
        event_hooks={"request": [tls.httpx_request_hook]},
    )
