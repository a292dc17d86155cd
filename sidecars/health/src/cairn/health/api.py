"""The sidecar's HTTP endpoints, for the kubelet and for people:

GET /livez   200, or 503 when the pod has failed its probes for too long
GET /readyz  200, or 503 with the reasons it is not ready
GET /status  the pod as last seen: addresses, reachability, shards, lags

Errors (an unknown path, another method) are problem documents, as the
controller's and the gateway's are.
"""

from __future__ import annotations

from typing import Any, Protocol

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from cairn.common.problems_http import install_problem_handlers
from cairn.health.core import Verdict


class HealthView(Protocol):
    def liveness(self) -> Verdict: ...

    def readiness(self) -> Verdict: ...

    def status(self) -> dict[str, Any]: ...


def _verdict_response(key: str, verdict: Verdict) -> JSONResponse:
    return JSONResponse(
        {key: verdict.ok, "reasons": list(verdict.reasons)},
        status_code=200 if verdict.ok else 503,
        # Each answer is about now: never serve one from a cache.
        headers={"Cache-Control": "no-store"},
    )


def create_app(view: HealthView) -> FastAPI:
    # No generated docs: nobody browses a sidecar's API.
    app = FastAPI(title="cairn-health", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/livez")
    async def livez() -> JSONResponse:
        return _verdict_response("live", view.liveness())

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        return _verdict_response("ready", view.readiness())

    @app.get("/status")
    async def status() -> JSONResponse:
        return JSONResponse(view.status(), headers={"Cache-Control": "no-store"})

    install_problem_handlers(app, "health sidecar")
    return app
