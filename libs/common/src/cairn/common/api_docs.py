"""The OpenAPI page (`/docs`) of the controller's admin API and the gateway, served
from the process itself.

FastAPI's default page loads Swagger UI from a CDN, so without internet access (an
air-gapped cluster, a laptop offline) it is blank. The page here uses the build of
Swagger UI that the `fastapi-offline` package ships (a current 5.x, which renders
the OpenAPI 3.1 documents FastAPI writes), served as static files next to it.

Imported only by the programs that serve HTTP APIs (they depend on fastapi and
fastapi-offline; the storage pod does not).
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
from starlette.requests import Request
from starlette.responses import HTMLResponse

DOCS_PATH = "/docs"
ASSETS_PATH = "/docs/assets"


def serve_docs(app: FastAPI) -> None:
    """Serve Swagger UI for `app` at /docs, its scripts and styles at /docs/assets.
    Make `app` with `docs_url=None, redoc_url=None`. Like FastAPI's own page, these
    are plain routes outside the app's dependencies (no authentication): they
    describe the API and hold no data; the OpenAPI document is at `app.openapi_url`."""
    assets = files("fastapi_offline") / "static"
    app.mount(ASSETS_PATH, StaticFiles(directory=str(assets)), name="docs-assets")

    async def page(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title}: API",
            swagger_js_url=f"{root}{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_PATH}/favicon.png",
        )

    app.add_route(DOCS_PATH, page, include_in_schema=False)
