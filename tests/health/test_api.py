"""The sidecar's HTTP endpoints, in process: its answers and its errors."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from cairn.common.problems import PROBLEM_MEDIA_TYPE
from cairn.health.api import create_app
from cairn.health.core import Verdict


class _View:
    def liveness(self) -> Verdict:
        return Verdict(True, ())

    def readiness(self) -> Verdict:
        return Verdict(False, ("no probe yet",))

    def status(self) -> dict[str, Any]:
        return {}


def test_the_health_sidecars_errors_are_problem_documents() -> None:
    async def session(http: httpx.AsyncClient) -> None:
        assert (await http.get("/livez")).json() == {"live": True, "reasons": []}
        ready = await http.get("/readyz")
        assert ready.status_code == 503 and ready.json()["reasons"] == ["no probe yet"]
        missing = await http.get("/nothing-here")
        assert missing.status_code == 404
        assert missing.headers["content-type"] == PROBLEM_MEDIA_TYPE
        assert missing.json()["code"] == "not-found"
        wrong = await http.post("/readyz")
        assert wrong.status_code == 405 and wrong.headers["allow"] == "GET"
        assert wrong.json()["code"] == "method-not-allowed"

    async def main() -> None:
        transport = httpx.ASGITransport(app=create_app(_View()))
        async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as http:
            await session(http)

    asyncio.run(main())
