"""create_app(settings) -> the ASGI app: MCP at /mcp, health at /healthz and /readyz, metrics at /metrics."""

from __future__ import annotations

import contextlib
import logging
from typing import Any, AsyncIterator, Callable

import anyio
from fastmcp import FastMCP
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from embeddings.base import Embedder
from server.auth.core import Principal
from server.api.middleware import AuthMiddleware, BrowserGuard, SignInGuard, is_loopback
from server.api.mcp.log_tools import LogToolsFastPath, register_log_tools
from server.api.mcp.memory_tools import register_memory_tools
from server.api.metrics import Metrics, ToolMetricsMiddleware
from server.api.observability import RequestObservabilityMiddleware, StorageProbe, metrics_endpoint, readiness
from server.api.rest.app import build_rest_app
from server.services import Services, open_services
from server.settings import Settings
from server.api.mcp.tools import ErrorMiddleware, principal_resolver, quiet_expected_errors
from server.version import __version__

log = logging.getLogger("memory_server")

INSTRUCTIONS = "\n".join((
    "Conversation logs (append_memory, recall_memory, replay_memory, list_conversations; the site's Basic "
    "credential only): each conversation's own durable, ordered record; never searched.",
    "Saved memories (remember, recall, search_memory, recall_context, forget; Bearer tokens with "
    "memory:read/memory:write work): facts, decisions and preferences found again by meaning.",
    "To look up: recall for a quick best-effort answer; search_memory when only a strict match will do (empty "
    "means nothing passed min_score); recall_context for a token-bounded pack at the start of a task.",
    "To keep: append_memory for what was said in this conversation; remember for a fact worth finding later. "
    "forget takes the reference that remember returned and every hit carries.",
    "Errors start with their code. unavailable is safe to retry (buffer the batch meanwhile; duplicates from "
    "retries are tolerated); every other code is permanent: fix the call instead.",
))


def build_mcp(services: Services, *, local: Callable[[], Principal] | None = None) -> FastMCP:
    mcp = FastMCP("memory-server", instructions=INSTRUCTIONS, version=__version__, mask_error_details=True)
    if services.metrics is not None:  # outside ErrorMiddleware, so it sees each call's final outcome
        mcp.add_middleware(ToolMetricsMiddleware(services.metrics, mcp))
    mcp.add_middleware(ErrorMiddleware(services.writer.health))
    quiet_expected_errors()
    current = principal_resolver(local)
    register_log_tools(mcp, services.logs, current, settings=services.settings)
    register_memory_tools(mcp, services.memory, current, services.settings, services.token_counter)
    return mcp


def create_app(
    settings: Settings,
    *,
    services: Services | None = None,
    embedder: Embedder | None = None,
    index: Any = None,
) -> Starlette:
    """The whole HTTP surface. The model loads in the background after start-up; until it is ready,
    /readyz answers 503 and the saved-memory tools answer `unavailable`."""
    services = services or open_services(settings)
    services.authenticator.allow_nowait(settings.db_path)
    metrics = Metrics()
    metrics.attach(services)  # before the MCP tools and REST routes take hold of services.logs
    storage = StorageProbe(settings.db_path)
    sign_in = SignInGuard(failures_per_minute=settings.sign_in_failures_per_minute)
    mcp = build_mcp(services)
    mcp_app = mcp.http_app(path="/mcp", stateless_http=True, json_response=True)

    async def load() -> None:
        try:
            await anyio.to_thread.run_sync(lambda: services.load_memory(embedder=embedder, index=index))
        except Exception:
            return  # kept in services.memory_error, reported by /readyz and the tools
        services.start_maintenance()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with mcp_app.lifespan(app), anyio.create_task_group() as tasks:
            lift_sdk_body_limit(mcp_app, settings.max_request_bytes)
            tasks.start_soon(load)
            try:
                yield
            finally:
                tasks.cancel_scope.cancel()
                sign_in.close()
                services.close()

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> JSONResponse:
        reasons = await anyio.to_thread.run_sync(readiness, services, storage)
        if reasons:
            return JSONResponse({"status": "unavailable", "reasons": reasons}, status_code=503)
        return JSONResponse({"status": "ready"})

    rest = build_rest_app(services)  # REST under /v1 (before the MCP catch-all); OpenAPI at /openapi.json
    # Plain log-tool calls are answered without the SDK's per-request machinery (see server.api.mcp.log_tools).
    fast_path = LogToolsFastPath(mcp_app, logs=services.logs, metrics=metrics, health=services.writer.health)
    app = Starlette(
        routes=[Route("/healthz", healthz), Route("/readyz", readyz), Route("/metrics", metrics_endpoint(metrics)),
                Route("/openapi.json", rest.openapi_endpoint), rest.route, Mount("/", app=fast_path)],
        middleware=[
            Middleware(RequestObservabilityMiddleware, metrics=metrics),  # outermost: sees every response
            Middleware(BrowserGuard, allowed_origins=settings.origins, loopback_only=is_loopback(settings.host)),
            Middleware(AuthMiddleware, authenticator=lambda: services.authenticator,
                       max_body=settings.max_request_bytes, sign_in=sign_in)
        ],
        lifespan=lifespan,
    )
    app.state.services = services
    app.state.metrics = metrics
    app.state.log_fast_path = fast_path
    return app


def lift_sdk_body_limit(mcp_app: Starlette, limit: int) -> None:
    """The MCP SDK caps bodies at 4 MiB with a plain-text 413 of its own. AuthMiddleware enforces the
    configured limit first, with a SPEC error body, so raise the SDK's cap to the same value. The session
    manager only exists once fastmcp's lifespan has started."""
    for route in mcp_app.routes:
        manager = getattr(getattr(route, "endpoint", None), "session_manager", None)
        limiter = getattr(manager, "asgi_app", None)
        if limiter is not None and hasattr(limiter, "max_body_size"):
            manager.max_request_body_size = limit
            limiter.max_body_size = limit
