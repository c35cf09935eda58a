"""What the OAuth tests share: the MCP SDK's OAuth client wired to a site owner who answers the consent page
the way a person would (over HTTP with httpx2: the page is fetched, its form parsed, filled and posted),
and the raw steps of the flow for the tests that break them on purpose.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
from fastmcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken


class MemoryTokenStorage:
    """The SDK client's TokenStorage, kept in memory (what a desktop client keeps in its keychain)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class FormParser(HTMLParser):
    """The consent page's form: its action and every input's default value, as a browser would submit it."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: list[tuple[str, str]] = []
        self.checkboxes: list[tuple[str, str, bool]] = []
        self.errors: list[str] = []
        self._in_error = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.action = a.get("action")
        elif tag == "input" and a.get("type") == "checkbox":
            self.checkboxes.append((a["name"], a["value"], "checked" in a))
        elif tag == "input" and "name" in a:
            self.fields.append((a["name"], a.get("value", "")))
        elif tag == "p" and a.get("class") == "error":
            self._in_error = True

    def handle_data(self, data: str) -> None:
        if self._in_error:
            self.errors.append(data.strip())
            self._in_error = False


def parse_form(html: str) -> FormParser:
    parser = FormParser()
    parser.feed(html)
    return parser


@dataclass
class Owner:
    """The site's owner at the consent page. `scopes` None: leave the checkboxes as the page shows them."""

    site: str
    secret: str
    scopes: list[str] | None = None
    teams: str = ""
    projects: str = ""
    buckets: str = ""
    action: str = "allow"
    pages: list[httpx2.Response] = field(default_factory=list)  # every consent page seen, for the tests

    async def consent(self, http: httpx2.AsyncClient, authorization_url: str) -> httpx2.Response:
        """Open the authorization URL, follow it to the consent page, submit the form; the response to the
        submission (a 303 to the client's redirect URI when it went through)."""
        start = await http.get(authorization_url)
        assert start.status_code == 302, start.text
        page = await http.get(start.headers["location"])
        self.pages.append(page)
        assert page.status_code == 200, page.text
        return await self.submit(http, page)

    async def submit(self, http: httpx2.AsyncClient, page: httpx2.Response, **override: str) -> httpx2.Response:
        form = parse_form(page.text)
        data = [(k, v) for k, v in form.fields if k not in ("site", "secret", "teams", "projects", "buckets")]
        data += [
            ("site", self.site),
            ("secret", self.secret),
            ("teams", self.teams),
            ("projects", self.projects),
            ("buckets", self.buckets),
            ("action", self.action),
        ]
        chosen = self.scopes if self.scopes is not None else [v for _, v, on in form.checkboxes if on]
        data += [("scope", scope) for scope in chosen]
        data = [(k, override.get(k, v)) for k, v in data]
        assert form.action is not None
        return await http.post(
            str(page.url.join(form.action)),
            content=urlencode(data).encode(),
            headers={"content-type": "application/x-www-form-urlencoded"},
        )


def callback_of(response: httpx2.Response) -> dict[str, str]:
    assert response.status_code == 303, response.text
    query = parse_qs(urlsplit(response.headers["location"]).query)
    return {k: v[0] for k, v in query.items()}


def oauth_client(
    server_url: str,
    owner: Owner,
    *,
    redirect_uri: str = "http://127.0.0.1:38123/callback",
    storage: MemoryTokenStorage | None = None,
    client_name: str = "Test connector",
    **metadata: Any,
) -> tuple[OAuthClientProvider, MemoryTokenStorage]:
    """The SDK's OAuth client for `server_url`; its browser step is `owner` answering the consent page."""
    storage = storage or MemoryTokenStorage()
    answers: list[AuthorizationCodeResult] = []

    async def redirect_handler(url: str) -> None:
        async with httpx2.AsyncClient(timeout=30) as http:
            query = callback_of(await owner.consent(http, url))
        answers.append(
            AuthorizationCodeResult(code=query.get("code", ""), state=query.get("state"), iss=query.get("iss"))
        )

    async def callback_handler() -> AuthorizationCodeResult:
        return answers.pop()

    client_metadata = OAuthClientMetadata.model_validate(
        {"client_name": client_name, "redirect_uris": [redirect_uri], **metadata}
    )
    provider = OAuthClientProvider(
        server_url, client_metadata, storage, redirect_handler=redirect_handler, callback_handler=callback_handler
    )
    return provider, storage


def mcp_client(server_url: str, auth: httpx2.Auth | str) -> Client:
    return Client(server_url, auth=auth, timeout=60)


# --- the raw flow, step by step ----------------------------------------------------------------------------


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


@dataclass
class RawClient:
    """A registered client driven by hand: every parameter of every request is the test's to choose."""

    base: str
    client_id: str
    client_secret: str | None
    redirect_uri: str

    @classmethod
    async def register(
        cls, http: httpx2.AsyncClient, base: str, *, redirect_uri: str = "http://127.0.0.1:38124/cb", **metadata: Any
    ) -> RawClient:
        body = {"client_name": "Raw client", "redirect_uris": [redirect_uri], **metadata}
        response = await http.post(f"{base}/register", json=body)
        assert response.status_code == 201, response.text
        info = response.json()
        return cls(base, info["client_id"], info.get("client_secret"), redirect_uri)

    def authorize_url(self, challenge: str, *, state: str = "st-123", **params: str) -> str:
        query = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": self.redirect_uri,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": state,
            "resource": f"{self.base}/mcp",
            **params,
        }
        return f"{self.base}/authorize?{urlencode(query)}"

    async def token(self, http: httpx2.AsyncClient, **form: str) -> httpx2.Response:
        data = {"client_id": self.client_id, **form}
        if self.client_secret is not None:
            data["client_secret"] = self.client_secret
        return await http.post(f"{self.base}/token", data=data)

    async def exchange(self, http: httpx2.AsyncClient, code: str, verifier: str, **form: str) -> httpx2.Response:
        fields = {
            "grant_type": "authorization_code",
            "code": code,
            "code_verifier": verifier,
            "redirect_uri": self.redirect_uri,
            "resource": f"{self.base}/mcp",
            **form,
        }
        return await self.token(http, **fields)

    async def refresh(self, http: httpx2.AsyncClient, refresh_token: str) -> httpx2.Response:
        return await self.token(
            http, grant_type="refresh_token", refresh_token=refresh_token, resource=f"{self.base}/mcp"
        )

    async def revoke(self, http: httpx2.AsyncClient, token: str) -> httpx2.Response:
        data = {"client_id": self.client_id, "token": token}
        if self.client_secret is not None:
            data["client_secret"] = self.client_secret
        return await http.post(f"{self.base}/revoke", data=data)

    async def sign_in(self, http: httpx2.AsyncClient, owner: Owner) -> tuple[str, str, dict[str, str]]:
        """Authorize through the consent page: (code, verifier, the callback's query)."""
        verifier, challenge = pkce()
        query = callback_of(await owner.consent(http, self.authorize_url(challenge)))
        return query["code"], verifier, query

    async def tokens(self, http: httpx2.AsyncClient, owner: Owner) -> dict[str, Any]:
        code, verifier, _ = await self.sign_in(http, owner)
        response = await self.exchange(http, code, verifier)
        assert response.status_code == 200, response.text
        tokens: dict[str, Any] = response.json()
        return tokens


async def wait_for(condition: Callable[[], Awaitable[bool]], *, timeout: float = 30.0, step: float = 0.05) -> None:
    """Poll `condition` until it holds (no fixed sleeps: the test waits exactly as long as it must)."""
    import anyio

    with anyio.fail_after(timeout):
        while not await condition():
            await anyio.sleep(step)
