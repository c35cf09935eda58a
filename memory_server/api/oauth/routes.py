"""The OAuth 2.1 routes: the MCP SDK's handlers and metadata models around our provider, plus the consent page.

    GET  /.well-known/oauth-protected-resource[/mcp]  RFC 9728 metadata of the /mcp resource   SDK handler
    GET  /.well-known/oauth-authorization-server      RFC 8414 metadata                        SDK handler
    POST /register                                    RFC 7591 dynamic client registration     SDK handler
    GET  /authorize                                   authorization code + PKCE S256           SDK handler
    GET|POST /oauth/consent                           the site owner signs in and grants       ours
    POST /token                                       authorization_code, refresh_token        SDK handler
    POST /revoke                                      RFC 7009                                  ours

Assembled here rather than with the SDK's `create_auth_routes` for these reasons: the token and revocation
endpoints get our client authenticator (digests, see `clients`); revocation is ours (the SDK's demands a
`client_secret` even of a public client, which has none); the token endpoint refuses a `resource` other
than ours (RFC 8707: the SDK passes it on to no one); `/register` and `/authorize`, which store something
for anyone who asks, are limited per client address (`PerAddress`: 429 with Retry-After before the body is
read), and what they store counts against that address's shares of the caps (see `provider`); and every
route sits behind `OAuthEdge`, which bounds the body and turns a failure below (a busy or unavailable store)
into a 503 with an OAuth error body and Retry-After, never a 500.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from functools import partial

from fastmcp.server.auth.redirect_validation import build_client_redirect
from mcp.server.auth.handlers.authorize import AuthorizationHandler
from mcp.server.auth.handlers.metadata import MetadataHandler, ProtectedResourceMetadataHandler
from mcp.server.auth.handlers.register import RegistrationHandler
from mcp.server.auth.handlers.token import TokenHandler
from mcp.server.auth.middleware.client_auth import AuthenticationError
from mcp.server.auth.routes import build_metadata
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from pydantic import AnyHttpUrl, ConfigDict, TypeAdapter
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, request_response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_server.api.failures import unexpected
from memory_server.api.middleware import AddressWindow, ClientGone, read_body, replay_body
from memory_server.api.oauth.clients import DigestClientAuthenticator
from memory_server.api.oauth.consent import ConsentPage
from memory_server.api.oauth.provider import CONSENT_PATH, GrantAccessToken, GrantRefreshToken, SiteAuthorizationServer
from memory_server.api.oauth.sources import requester
from memory_server.auth.oauth import canonical_resource
from memory_server.auth.principal import SCOPES
from memory_server.errors import AppError, RateLimited, Unavailable
from memory_server.storage.health import StorageHealth

log = logging.getLogger("memory_server.oauth")

MAX_OAUTH_BODY = 64 * 1024  # registrations, token requests and the consent form are a few hundred bytes
PROTECTED_RESOURCE_PATHS = ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp")
_URL = TypeAdapter(AnyHttpUrl, config=ConfigDict(url_preserve_empty_path=True))  # no slash added to an origin

Handler = Callable[[Request], Awaitable[Response]]


def resource_metadata_url(public_base: str) -> str:
    """Where a 401 from /mcp points clients to (RFC 9728 §5.1)."""
    return f"{public_base}{PROTECTED_RESOURCE_PATHS[1]}"


def authorization_metadata(issuer: str) -> OAuthMetadata:
    metadata = build_metadata(
        _URL.validate_python(issuer), None, ClientRegistrationOptions(enabled=True), RevocationOptions(enabled=True)
    )
    metadata.scopes_supported = list(SCOPES)
    # Public clients (PKCE, no secret) register with "none"; OAuth 2.1 expects servers to take them.
    metadata.token_endpoint_auth_methods_supported = ["client_secret_post", "client_secret_basic", "none"]
    # ... and revoke with their client_id alone (`revoke` below), as at the token endpoint.
    metadata.revocation_endpoint_auth_methods_supported = ["client_secret_post", "client_secret_basic", "none"]
    metadata.authorization_response_iss_parameter_supported = True  # every redirect carries `iss` (RFC 9207)
    return metadata


def resource_metadata(issuer: str, resource: str) -> ProtectedResourceMetadata:
    return ProtectedResourceMetadata.model_validate(
        {
            "resource": resource,
            "authorization_servers": [issuer],
            "scopes_supported": list(SCOPES),
            "resource_name": "memory-server",
        }
    )


def oauth_routes(
    provider: SiteAuthorizationServer, consent: ConsentPage, *, health: StorageHealth, requests_per_minute: int
) -> list[Route]:
    registration = ClientRegistrationOptions(enabled=True, default_scopes=list(SCOPES))
    clients = DigestClientAuthenticator(provider)
    token = TokenHandler(provider, clients)
    resource = resource_metadata(provider.issuer, provider.resource)
    registrations = AddressWindow(requests_per_minute, "too many client registrations from this address")
    authorizations = AddressWindow(requests_per_minute, "too many authorization requests from this address")

    def edge(handler: Handler, methods: list[str] | None = None, *, limit: AddressWindow | None = None) -> ASGIApp:
        app: ASGIApp = OAuthEdge(request_response(handler), health=health)
        if limit is not None:
            app = PerAddress(app, limit)
        if methods is None:  # the browser navigates to these: no cross-origin access
            return app
        return CORSMiddleware(
            app,
            allow_origins=["*"],
            allow_methods=methods,
            allow_headers=[MCP_PROTOCOL_VERSION_HEADER, "authorization", "content-type"],
        )

    get, post = ["GET", "OPTIONS"], ["POST", "OPTIONS"]
    routes = [
        Route(path, edge(ProtectedResourceMetadataHandler(resource).handle, get), methods=get)
        for path in PROTECTED_RESOURCE_PATHS
    ]
    return routes + [
        Route(
            "/.well-known/oauth-authorization-server",
            edge(MetadataHandler(authorization_metadata(provider.issuer)).handle, get),
            methods=get,
        ),
        Route(
            "/register",
            edge(RegistrationHandler(provider, registration).handle, post, limit=registrations),
            methods=post,
        ),
        Route(
            "/authorize",
            edge(with_issuer(provider.issuer, AuthorizationHandler(provider).handle), limit=authorizations),
            methods=["GET", "POST"],
        ),
        Route(CONSENT_PATH, edge(consent.handle), methods=["GET", "POST"]),
        Route("/token", edge(only_for(provider.resource, token.handle), post), methods=post),
        Route("/revoke", edge(partial(revoke, provider, clients), post), methods=post),
    ]


async def revoke(provider: SiteAuthorizationServer, clients: DigestClientAuthenticator, request: Request) -> Response:
    """RFC 7009: the client authenticates as at the token endpoint (a public client by its `client_id`
    alone); a token of its own ends its grant; any other token, or none we know, is answered 200 all the
    same (the RFC: an invalid token is no error, and a client learns nothing of others' tokens)."""
    try:
        client = await clients.authenticate_request(request)
    except AuthenticationError as exc:
        return oauth_error(401, "invalid_client", exc.message)
    form = await request.form()
    presented, hint = form.get("token"), form.get("token_type_hint")
    if not isinstance(presented, str) or not presented:
        return oauth_error(400, "invalid_request", "token is required")
    loaders: list[Callable[[str], Awaitable[GrantAccessToken | GrantRefreshToken | None]]] = [
        provider.load_access_token,
        partial(provider.load_refresh_token, client),
    ]
    if hint == "refresh_token":
        loaders.reverse()
    for load in loaders:
        found = await load(presented)
        if found is not None:
            if found.client_id == client.client_id:
                await provider.revoke_token(found)
            break
    return Response(status_code=200, headers={"Cache-Control": "no-store", "Pragma": "no-cache"})


def with_issuer(issuer: str, handler: Handler) -> Handler:
    """The SDK's own error redirects (a refused scope or resource) carry no `iss`; ours all do (RFC 9207:
    once the metadata promises it, a client refuses a response without it)."""

    async def handled(request: Request) -> Response:
        response = await handler(request)
        location = response.headers.get("location")
        if response.status_code == 302 and location and not location.startswith(f"{issuer}{CONSENT_PATH}?"):
            response.headers["location"] = build_client_redirect(location, {}, iss=issuer)
        return response

    return handled


def only_for(resource: str, handler: Handler) -> Handler:
    """RFC 8707 §2.2: a token request for a resource other than this server's /mcp is `invalid_target`."""

    async def checked(request: Request) -> Response:
        asked = (await request.form()).get("resource")  # Starlette keeps the parsed form for the handler
        if isinstance(asked, str) and canonical_resource(asked) != canonical_resource(resource):
            return oauth_error(400, "invalid_target", f"this server issues tokens for {resource} only")
        return await handler(request)

    return checked


def oauth_error(status: int, error: str, description: str) -> JSONResponse:
    return JSONResponse(
        {"error": error, "error_description": description}, status_code=status, headers={"Cache-Control": "no-store"}
    )


class PerAddress:
    """At most so many requests per client address per minute; beyond, 429 with Retry-After, before the
    body is read or anything is stored. The address is the provider's too (`sources.requester`): what the
    request stores counts against its address's and network's shares."""

    def __init__(self, app: ASGIApp, window: AddressWindow) -> None:
        self.app = app
        self._window = window

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        address = client[0] if client else "unknown"
        if scope["type"] == "http" and scope.get("method") != "OPTIONS":  # a CORS preflight stores nothing
            try:
                self._window.take(address)
            except RateLimited as exc:
                await _send(send, 429, "rate_limited", exc.message, retry_after=exc.retry_after)
                return
        token = requester.set(address)
        try:
            await self.app(scope, receive, send)
        finally:
            requester.reset(token)


class OAuthEdge:
    """Bounds the request body, and answers whatever goes wrong below with an OAuth error body."""

    def __init__(self, app: ASGIApp, *, health: StorageHealth) -> None:
        self.app = app
        self._health = health

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            body = await read_body(receive, MAX_OAUTH_BODY)
        except ClientGone:
            log.debug("%s: the client went away before its request body was complete", scope["path"])
            return
        if body is None:
            await _send(send, 413, "invalid_request", f"request body over {MAX_OAUTH_BODY} bytes")
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, replay_body(body, receive), tracked)
        except Exception as exc:
            failure = exc if isinstance(exc, AppError) else unexpected(exc, health=self._health, where="OAuth")
            if started:  # nothing more can be said on this response
                log.warning("OAuth response cut short: %s", failure)
                return
            status = failure.status if failure.status != 500 else 503
            error = "temporarily_unavailable" if status >= 500 else "invalid_request"
            retry_after: int | None = getattr(failure, "retry_after", None)
            if status == 503 and retry_after is None:
                retry_after = Unavailable.retry_after
            await _send(send, status, error, failure.message, retry_after=retry_after)


async def _send(send: Send, status: int, error: str, description: str, *, retry_after: int | None = None) -> None:
    body = json.dumps({"error": error, "error_description": description}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
