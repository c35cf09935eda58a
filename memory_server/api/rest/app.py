"""The REST API under /v1: thin routes over the same operations, validation and errors as the MCP tools.

A FastAPI app (so the OpenAPI document is generated from the routes and the operations' models, never
written by hand), placed in the one ASGI app behind the same AuthMiddleware: by the time a route runs, the
caller is authenticated and its `Principal` is in the ASGI scope's state. Descriptions naming configured
limits are filled in from the settings when the document is served.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import URLPath
from starlette.routing import BaseRoute, Match, NoMatchFound
from starlette.types import Message, Receive, Scope, Send

from memory_server.api.rest import errors
from memory_server.api.rest.errors import HANDLED, error_response
from memory_server.api.rest.logs import log_routes
from memory_server.api.rest.memories import memory_routes
from memory_server.arguments import described_schema
from memory_server.errors import Unavailable
from memory_server.services import Services

log = logging.getLogger("memory_server.rest")

PREFIX = "/v1"


class RestApp:
    """The FastAPI app serving /v1, placed in the server's routes by `.route`. Its routes carry the full
    /v1/... paths (so the OpenAPI document shows them); if it is mounted with `Mount("/v1", ...)` instead,
    the mount's root_path is undone before FastAPI routes the request. An exception that escapes FastAPI
    (Starlette re-raises it after our 503 was sent) stops here instead of reaching the server's 500."""

    def __init__(self, services: Services) -> None:
        api = FastAPI(
            title="memory-server",
            version="1",
            summary="Durable conversation logs and searchable saved memories for AI agents.",
            description="The REST face of the MCP tools: same operations, same validation, same errors "
            '(`{"error": {"code", "message", "retryable"}}` with the documented HTTP status).',
            openapi_url=None,
            docs_url=None,
            redoc_url=None,
            generate_unique_id_function=lambda route: route.name,  # operationId = the handler's name
        )
        routers = [memory_routes(services.memory_ops), log_routes(services.logs)]
        for router in routers:
            api.include_router(router)
        api.state.route_table = [route for router in routers for route in router.routes]  # for 405's Allow
        api.state.health = services.storage.health
        errors.install(api)
        self.api = api
        self._settings = services.settings
        self._document: dict[str, Any] | None = None
        self.route = RestRoute(self)  # in the server's routes, before the MCP app's catch-all mount

    def openapi(self) -> dict[str, Any]:
        if self._document is None:
            self._document = described_schema(self.api.openapi(), self._settings)
        return self._document

    async def openapi_endpoint(self, request: Request) -> JSONResponse:
        return JSONResponse(self.openapi())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        root = scope.get("root_path", "")
        if root.endswith(PREFIX):
            scope = {**scope, "root_path": root[: -len(PREFIX)]}
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.api(scope, receive, tracking)
        except Exception as exc:
            if not exc.__dict__.get(HANDLED):
                log.error("REST request failed unexpectedly", exc_info=exc)
            if not started and scope["type"] == "http":
                await error_response(Unavailable("internal error; it has been logged, retry later"))(
                    scope, receive, send
                )


class RestRoute(BaseRoute):
    """Routes every request under /v1 (and /v1 itself) to the REST app, whatever its path holds: a Mount
    would not match a path with a newline in it (its pattern is `.*`), letting it fall through to the MCP
    app's plain-text 404."""

    def __init__(self, app: RestApp) -> None:
        self.app = app

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] == "http":
            path, root = scope["path"], scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root) :]
            if path == PREFIX or path.startswith(PREFIX + "/"):
                return Match.FULL, {}
        return Match.NONE, {}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:  # Starlette's signature
        raise NoMatchFound(name, path_params)
