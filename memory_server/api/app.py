"""create_app(settings) -> the one ASGI app: MCP at /mcp, REST under /v1 (OpenAPI at /openapi.json),
the web console under /ui/, health at /healthz and /readyz, metrics at /metrics, and the OAuth 2.1
authorization server of the sites (metadata under /.well-known/, /register, /authorize, /oauth/consent,
/token, /revoke: see api/oauth).

Every request passes, outermost first: observability (request id, access log, HTTP metrics), the browser
guard (Origin, Host), authentication (a Principal in the scope) and the body limit; then the REST app, or
the MCP fast path in front of the MCP SDK's app.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import RedirectResponse
from starlette.routing import BaseRoute, Mount, Route

from memory_server.api.console.app import console_app
from memory_server.api.mcp.fast_path import LogToolsFastPath
from memory_server.api.mcp.server import build_mcp
from memory_server.api.metrics import Metrics
from memory_server.api.middleware import AuthMiddleware, BrowserGuard, SignInGuard, is_loopback
from memory_server.api.oauth.consent import ConsentPage
from memory_server.api.oauth.provider import Capacity, Lifetimes, SiteAuthorizationServer
from memory_server.api.oauth.routes import oauth_routes, resource_metadata_url
from memory_server.api.observability import RequestObservabilityMiddleware, metrics_endpoint
from memory_server.api.readiness import probes
from memory_server.api.rest.app import RestApp
from memory_server.embeddings.base import Embedder
from memory_server.index.base import VectorIndex
from memory_server.services import Services, open_services
from memory_server.settings import Settings
from memory_server.storage.oauth_records import Quota


def create_app(
    settings: Settings,
    *,
    services: Services | None = None,
    embedder: Embedder | None = None,
    index: VectorIndex | None = None,
) -> Starlette:
    """The whole HTTP surface. The model loads in the background after start-up; until it is ready,
    /readyz answers 503 and the saved-memory operations answer `unavailable`."""
    services = services or open_services(settings)
    services.authenticator.nowait = True  # a server settles known credentials on its event loop
    metrics = Metrics()
    metrics.attach(services)
    sign_in = SignInGuard(failures_per_minute=settings.sign_in_failures_per_minute)
    mcp_app = build_mcp(services, metrics=metrics).http_app(path="/mcp", stateless_http=True, json_response=True)

    async def load() -> None:
        try:
            await anyio.to_thread.run_sync(lambda: services.load_memories(embedder=embedder, index=index))
        except Exception:
            return  # kept in services.memory_error, reported by /readyz and the tools
        services.start_maintenance()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with mcp_app.lifespan(app), anyio.create_task_group() as tasks:
            lift_sdk_body_limit(mcp_app, settings.max_request_bytes)
            services.start_log_retention()
            tasks.start_soon(load)
            try:
                yield
            finally:
                tasks.cancel_scope.cancel()
                sign_in.close()
                services.close()

    healthz, readyz = probes(services)
    rest = RestApp(services)
    # Plain log-tool calls are answered without the SDK's per-request machinery (see its module).
    fast_path = LogToolsFastPath(mcp_app, ops=services.logs, metrics=metrics, health=services.storage.health)
    public_host = urlsplit(settings.public_url).hostname if settings.public_url else None
    console = console_app(services, sign_in=sign_in)  # its own sessions: AuthMiddleware guards only /mcp, /v1
    app = Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics_endpoint(metrics)),
            Route("/openapi.json", rest.openapi_endpoint),
            *oauth(settings, services, sign_in),
            rest.route,
            Route("/", lambda request: RedirectResponse("/ui/"), methods=["GET", "HEAD"]),  # a person's first look
            Route("/ui", lambda request: RedirectResponse("/ui/", status_code=308)),
            Mount("/ui", app=console),
            Mount("/", app=fast_path),
        ],
        middleware=[
            Middleware(RequestObservabilityMiddleware, metrics=metrics),  # outermost: sees every response
            Middleware(
                BrowserGuard,
                allowed_origins=settings.origins,
                loopback_only=is_loopback(settings.host),
                public_host=public_host,
            ),
            Middleware(
                AuthMiddleware,
                authenticator=services.authenticator,
                max_body=settings.max_request_bytes,
                sign_in=sign_in,
                resource_metadata=resource_metadata_url(settings.public_base),
            ),
        ],
        lifespan=lifespan,
    )
    app.state.services = services
    app.state.metrics = metrics
    app.state.log_fast_path = fast_path
    return app


def oauth(settings: Settings, services: Services, sign_in: SignInGuard) -> list[BaseRoute]:
    """The authorization server: issuer MEMORY_PUBLIC_URL, tokens bound to its /mcp; failed sign-ins on
    the consent page count with those on /mcp and /v1 (one SignInGuard)."""
    lifetimes = Lifetimes(
        access_s=settings.oauth_access_token_s,
        refresh_s=settings.oauth_refresh_token_s,
        code_s=settings.oauth_code_s,
        unused_client_s=settings.oauth_unused_client_s,
    )
    capacity = Capacity(
        unused_clients=Quota(
            total=settings.oauth_max_unused_clients,
            per_network=settings.oauth_max_unused_clients_per_network,
            per_address=settings.oauth_max_unused_clients_per_address,
        ),
        pending=Quota(
            total=settings.oauth_max_pending,
            per_network=settings.oauth_max_pending_per_network,
            per_address=settings.oauth_max_pending_per_address,
        ),
    )
    provider = SiteAuthorizationServer(
        services.storage.oauth,
        issuer=settings.public_base,
        resource=settings.mcp_resource,
        lifetimes=lifetimes,
        capacity=capacity,
    )
    consent = ConsentPage(
        provider,
        authenticator=services.authenticator,
        sign_in=sign_in,
        secure_cookie=settings.public_base.startswith("https://"),
    )
    return list(
        oauth_routes(
            provider, consent, health=services.storage.health, requests_per_minute=settings.oauth_requests_per_minute
        )
    )


def lift_sdk_body_limit(mcp_app: Any, limit: int) -> None:
    """The MCP SDK caps bodies at 4 MiB with a plain-text 413 of its own. AuthMiddleware enforces the
    configured limit first, with the contract's error body, so raise the SDK's cap to the same value. The session
    manager only exists once fastmcp's lifespan has started."""
    for route in mcp_app.routes:
        manager = getattr(getattr(route, "endpoint", None), "session_manager", None)
        limiter = getattr(manager, "asgi_app", None)
        if manager is not None and limiter is not None and hasattr(limiter, "max_body_size"):
            manager.max_request_body_size = limit
            limiter.max_body_size = limit
