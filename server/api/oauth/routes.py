"""The OAuth 2.1 routes: the MCP SDK's handlers and metadata models around our provider, plus the consent page.

    GET  /.well-known/oauth-protected-resource[/mcp]  RFC 9728 metadata of the /mcp resource   SDK handler
    GET  /.well-known/oauth-authorization-server      RFC 8414 metadata                        SDK handler
    POST /register                                    RFC 7591 dynamic client registration     SDK handler
    GET  /authorize                                   authorization code + PKCE S256           SDK handler
    GET|POST /oauth/consent                           the site owner signs in and grants       ours
    POST /token                                       authorization_code, refresh_token        SDK handler
    POST /revoke                                      RFC 7009                                  SDK handler

Assembled here rather than with the SDK's `create_auth_routes` for three reasons: the token and revocation
handlers get our client authenticator (digests, see `clients`), the token endpoint refuses a `resource`
other than ours (RFC 8707: the SDK passes it on to no one), and every route sits behind `OAuthEdge`, which
bounds the body and turns a failure below (a busy or full store) into a 503 with an OAuth error body,
never a 500.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

from fastmcp.server.auth.redirect_validation import build_client_redirect
from mcp.server.auth.handlers.authorize import AuthorizationHandler
from mcp.server.auth.handlers.metadata import MetadataHandler, ProtectedResourceMetadataHandler
from mcp.server.auth.handlers.register import RegistrationHandler
from mcp.server.auth.handlers.revoke import RevocationHandler
from mcp.server.auth.handlers.token import TokenHandler
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

from server.api.failures import unexpected
from server.api.middleware import read_body, replay_body
from server.api.oauth.clients import DigestClientAuthenticator
from server.api.oauth.consent import ConsentPage
from server.api.oauth.provider import CONSENT_PATH, SiteAuthorizationServer
from server.auth.oauth import canonical_resource
from server.auth.principal import SCOPES
from server.errors import AppError
from server.storage.health import StorageHealth

log = logging.getLogger("memory_server.oauth")

MAX_OAUTH_BODY = 64 * 1024  # registrations, token requests and the consent form are a few hundred bytes
PROTECTED_RESOURCE_PATHS = ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp")
_URL = TypeAdapter(AnyHttpUrl, config=ConfigDict(url_preserve_empty_path=True))  # no slash added to an origin

Handler = Callable[[Request], Awaitable[Response]]


def resource_metadata_url(public_base: str) -> str:
    """Where a 401 from /mcp points clients to (RFC 9728 §5.1)."""
    return f"{public_base}{PROTECTED_RESOURCE_PATHS[1]}"


def authorization_metadata(issuer: str) -> OAuthMetadata:
    metadata = build_metadata(_URL.validate_python(issuer), None, ClientRegistrationOptions(enabled=True),
                              RevocationOptions(enabled=True))
    metadata.scopes_supported = list(SCOPES)
    # Public clients (PKCE, no secret) register with "none"; OAuth 2.1 expects servers to take them.
    metadata.token_endpoint_auth_methods_supported = ["client_secret_post", "client_secret_basic", "none"]
    metadata.authorization_response_iss_parameter_supported = True  # every redirect carries `iss` (RFC 9207)
    return metadata


def resource_metadata(issuer: str, resource: str) -> ProtectedResourceMetadata:
    return ProtectedResourceMetadata.model_validate({
        "resource": resource, "authorization_servers": [issuer], "scopes_supported": list(SCOPES),
        "resource_name": "memory-server"})


def oauth_routes(provider: SiteAuthorizationServer, consent: ConsentPage, *, health: StorageHealth) -> list[Route]:
    registration = ClientRegistrationOptions(enabled=True, default_scopes=list(SCOPES))
    clients = DigestClientAuthenticator(provider)
    token = TokenHandler(provider, clients)
    resource = resource_metadata(provider.issuer, provider.resource)

    def edge(handler: Handler, methods: list[str] | None = None) -> ASGIApp:
        app: ASGIApp = OAuthEdge(request_response(handler), health=health)
        if methods is None:  # the browser navigates to these: no cross-origin access
            return app
        return CORSMiddleware(app, allow_origins=["*"], allow_methods=methods,
                              allow_headers=[MCP_PROTOCOL_VERSION_HEADER, "authorization", "content-type"])

    get, post = ["GET", "OPTIONS"], ["POST", "OPTIONS"]
    routes = [Route(path, edge(ProtectedResourceMetadataHandler(resource).handle, get), methods=get)
              for path in PROTECTED_RESOURCE_PATHS]
    return routes + [
        Route("/.well-known/oauth-authorization-server",
              edge(MetadataHandler(authorization_metadata(provider.issuer)).handle, get), methods=get),
        Route("/register", edge(RegistrationHandler(provider, registration).handle, post), methods=post),
        Route("/authorize", edge(with_issuer(provider.issuer, AuthorizationHandler(provider).handle)),
              methods=["GET", "POST"]),
        Route(CONSENT_PATH, edge(consent.handle), methods=["GET", "POST"]),
        Route("/token", edge(only_for(provider.resource, token.handle), post), methods=post),
        Route("/revoke", edge(RevocationHandler(provider, clients).handle, post), methods=post),
    ]


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
    return JSONResponse({"error": error, "error_description": description}, status_code=status,
                        headers={"Cache-Control": "no-store"})


class OAuthEdge:
    """Bounds the request body, and answers whatever goes wrong below with an OAuth error body."""

    def __init__(self, app: ASGIApp, *, health: StorageHealth) -> None:
        self.app = app
        self._health = health

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = await read_body(receive, MAX_OAUTH_BODY)
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
            await _send(send, status, error, failure.message)


async def _send(send: Send, status: int, error: str, description: str) -> None:
    body = json.dumps({"error": error, "error_description": description}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store")]})
    await send({"type": "http.response.body", "body": body})
