"""Registered clients as the MCP SDK's handlers see them, and how a client proves who it is at the token
and revocation endpoints.

Three places where the SDK's defaults do not fit, each replaced at the seam the SDK offers for it:

- `OAuthClientInformationFull.validate_redirect_uri` accepts a registered URI only; `RegisteredClient`
  also accepts a loopback redirect that differs from a registered one in its port alone (RFC 8252 §7.3:
  a native app listens on whatever port is free). Everything else is compared exactly.
- `validate_scope` refuses any scope outside the registered ones, unknown ones included; ours drops the
  unknown ones (clients ask for offline_access or openid by habit) and keeps the registered scopes of this
  server as the upper bound (a registration naming none of them is bounded by all of them).
- `ClientAuthenticator` compares the presented client secret with a stored plaintext one; the store holds
  only digests, so `DigestClientAuthenticator` compares digests (in constant time).
"""

from __future__ import annotations

import base64
import binascii
import hmac
from urllib.parse import unquote, urlsplit

from fastmcp.server.auth.redirect_validation import is_loopback_host, is_redirect_uri_allowed_for_application_type
from mcp.server.auth.middleware.client_auth import AuthenticationError, ClientAuthenticator
from mcp.server.auth.provider import RegistrationError
from mcp.shared.auth import InvalidRedirectUriError, InvalidScopeError, OAuthClientInformationFull
from pydantic import AnyUrl, Field
from starlette.datastructures import FormData
from starlette.requests import Request

from memory_server.auth.oauth import MAX_SECRET_LENGTH, digest
from memory_server.auth.principal import SCOPES

# What one anonymous registration may store: a client registers one to six redirect URIs (VS Code: six) and
# its whole metadata is a few hundred bytes.
MAX_REDIRECT_URIS = 10
MAX_URI_LENGTH = 2000
MAX_CLIENT_NAME = 200
MAX_METADATA_BYTES = 4096


class RegisteredClient(OAuthClientInformationFull):
    secret_hash: str | None = Field(default=None, exclude=True)  # never serialized: stays in the store

    def validate_redirect_uri(self, redirect_uri: AnyUrl | None) -> AnyUrl:
        if redirect_uri is None:
            return super().validate_redirect_uri(None)  # the one registered URI, or an error
        given = str(redirect_uri)
        for registered in self.redirect_uris or []:
            if given == str(registered) or loopback_port_variant(given, str(registered)):
                return redirect_uri
        raise InvalidRedirectUriError(f"redirect_uri {given[:MAX_URI_LENGTH]!r} is not registered for this client")

    def validate_scope(self, requested_scope: str | None) -> list[str] | None:
        """The requested scopes this server knows and the client registered for (the owner grants some or
        all of them on the consent page); no scope requested: the registered ones. Unknown ones
        (offline_access, openid) are left out rather than refused: clients ask for them by habit, and the
        refresh token comes anyway. Known ones beyond the registration are left out too (RFC 6749 §3.3: the
        token response says what was granted); nothing left is `invalid_scope`."""
        allowed = self.allowed_scopes()
        if requested_scope is None:
            return allowed
        known = [scope for scope in dict.fromkeys(requested_scope.split()) if scope in SCOPES]
        if not known:
            raise InvalidScopeError(f"none of the requested scopes is known here; ask for {' and/or '.join(SCOPES)}")
        granted = [scope for scope in known if scope in allowed]
        if not granted:
            raise InvalidScopeError(f"this client registered for {' '.join(allowed)} only")
        return granted

    def allowed_scopes(self) -> list[str]:
        """The upper bound of what this client may be granted: its registered scopes that this server
        knows, or all of them if it registered none of them."""
        registered = set((self.scope or "").split())
        return [scope for scope in SCOPES if scope in registered] or list(SCOPES)


def loopback_port_variant(given: str, registered: str) -> bool:
    """http on the same loopback host, path and query as a registered URI, on any port."""
    try:
        a, b = urlsplit(given), urlsplit(registered)
        _ = (a.port, b.port)  # a malformed port is no match
    except ValueError:
        return False
    if a.scheme != "http" or b.scheme != "http" or a.username or a.password or b.username or b.password:
        return False
    host = a.hostname or ""
    return (
        host == (b.hostname or "")
        and is_loopback_host(host)
        and (a.path, a.query, a.fragment) == (b.path, b.query, b.fragment)
    )


def check_registration(client: OAuthClientInformationFull) -> str:
    """The metadata to store (JSON, without the secret), or RegistrationError for a registration whose
    redirect URIs could send a code where it must not go (unsafe schemes such as javascript: or data:,
    plain http to anything but a loopback address, fragments, a user name before the host: the consent page
    would name `claude.ai` for `https://claude.ai@evil.example`), or that is larger than a client needs."""
    uris = client.redirect_uris or []
    if len(uris) > MAX_REDIRECT_URIS:
        raise RegistrationError("invalid_redirect_uri", f"at most {MAX_REDIRECT_URIS} redirect URIs")
    for uri in uris:
        text = str(uri)
        if uri.username is not None or uri.password is not None:
            raise RegistrationError(
                "invalid_redirect_uri",
                (f"redirect URI {text[:200]!r} is not allowed: it carries user information (user@host)"),
            )
        allowed = is_redirect_uri_allowed_for_application_type(uri, client.application_type)
        if len(text) > MAX_URI_LENGTH or uri.fragment or not allowed:
            raise RegistrationError(
                "invalid_redirect_uri",
                (
                    f"redirect URI {text[:200]!r} is not allowed: use https://, http:// to a loopback address "
                    f"(127.0.0.1, [::1], localhost) or an app's own scheme, without a fragment, at most "
                    f"{MAX_URI_LENGTH} characters"
                ),
            )
    if client.client_name is not None and len(client.client_name) > MAX_CLIENT_NAME:
        raise RegistrationError("invalid_client_metadata", f"client_name is longer than {MAX_CLIENT_NAME} characters")
    metadata = client.model_dump_json(exclude={"client_secret"}, exclude_none=True)
    if len(metadata.encode()) > MAX_METADATA_BYTES:
        raise RegistrationError(
            "invalid_client_metadata",
            f"the registration is larger than {MAX_METADATA_BYTES} bytes (client_name, URIs, contacts, jwks… together)",
        )
    return metadata


class DigestClientAuthenticator(ClientAuthenticator):
    """The SDK's client authentication (client_secret_basic, client_secret_post or none) against stored
    digests. A client may send its secret either way: which one it registered says nothing about trust."""

    async def authenticate_request(self, request: Request) -> OAuthClientInformationFull:
        form = await request.form()
        client_id = form.get("client_id")
        if not isinstance(client_id, str) or not client_id:
            raise AuthenticationError("Missing client_id")
        client = await self.provider.get_client(client_id[:MAX_SECRET_LENGTH])
        if not isinstance(client, RegisteredClient):
            raise AuthenticationError("Invalid client_id")
        if client.secret_hash is None:  # a public client: PKCE is its proof
            return client
        presented = _presented_secret(request, form, client_id)
        if presented is None or not hmac.compare_digest(digest(presented), client.secret_hash):
            raise AuthenticationError("Invalid client credentials")
        return client


def _presented_secret(request: Request, form: FormData, client_id: str) -> str | None:
    header = request.headers.get("authorization", "")
    if header[:6].lower() == "basic ":
        try:
            user, sep, secret = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise AuthenticationError("Invalid Basic authentication header") from None
        if not sep or unquote(user) != client_id:  # RFC 6749 §2.3.1: both parts are form-encoded
            raise AuthenticationError("Client ID mismatch in Basic authentication")
        return unquote(secret)
    secret_field = form.get("client_secret")
    return secret_field if isinstance(secret_field, str) and secret_field else None
