"""/docs works without internet: the page loads Swagger UI from the process itself
(issue 47), for the gateway and the controller's admin API alike."""

from __future__ import annotations

import asyncio
import re

import httpx
from fastapi import Depends, FastAPI, HTTPException

from cairn.common.api_docs import serve_docs


def refuse_everyone() -> None:
    raise HTTPException(status_code=401)


def test_the_docs_page_and_its_assets_are_served_locally() -> None:
    # An app whose every API route needs credentials, as with authentication on.
    app = FastAPI(title="t", docs_url=None, redoc_url=None, dependencies=[Depends(refuse_everyone)])

    @app.get("/things")
    def things() -> list[str]:
        return []

    serve_docs(app)
    asyncio.run(check_docs(app))


async def check_docs(app: FastAPI) -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://cairn") as client:
        assert (await client.get("/things")).status_code == 401
        page = await client.get("/docs")
        assert page.status_code == 200
        sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert sources, page.text
        for source in sources:
            # Nothing from another host: every script, style and icon is ours.
            assert source.startswith("/"), source
            asset = await client.get(source)
            assert asset.status_code == 200, source
            assert asset.content
        assert "/openapi.json" in page.text
        assert (await client.get("/openapi.json")).status_code == 200
