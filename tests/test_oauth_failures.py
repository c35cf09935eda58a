"""Every way an OAuth sign-in must fail, against a real server process: each step of the flow driven by hand
(`oauth_support.RawClient`) so that the test chooses what goes wrong: a wrong PKCE verifier, a code used
twice, an unregistered redirect URI, a token for another resource, a forged consent form, guessed secrets,
a rotated refresh token used again, and malformed requests of every kind (an OAuth error, never a 500).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest

from memory_server.auth.principal import READ, WRITE

from conftest import wait_ready
from oauth_support import Owner, RawClient, callback_of, parse_form, pkce
from procs import ServerProcess, parse_fields, run_cli, server_env

pytestmark = pytest.mark.backends

LIMIT = 5  # MEMORY_SIGN_IN_FAILURES_PER_MINUTE of the rate-limit test's server


class Site:
    def __init__(self, root: Path, *, failures_per_minute: int = 100_000) -> None:
        data = root / "data"
        created = run_cli("site", "create", "acme", data_dir=data)
        self.secret = parse_fields(created.stdout)["secret"]
        env = server_env(
            MEMORY_SIGN_IN_FAILURES_PER_MINUTE=str(failures_per_minute), MEMORY_OAUTH_REQUESTS_PER_MINUTE="100000"
        )
        self.process = ServerProcess(data, env=env).start()
        self.base = self.process.base

    def owner(self, **choices: Any) -> Owner:
        return Owner("acme", self.secret, **choices)


@pytest.fixture(scope="module")
def site(storage_backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """One server for the checks below; they send bad credentials on purpose and register many clients from
    one address, so its limits are out of their way (one test has a server with the limit of its own)."""
    server = Site(tmp_path_factory.mktemp("oauth-failures"))
    try:
        wait_ready(server.base)
        yield server
    finally:
        server.process.kill()


@pytest.fixture
async def http() -> Any:
    async with httpx2.AsyncClient(timeout=60) as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def works(http: httpx2.AsyncClient, site: Site, access: str) -> bool:
    return (await http.get(f"{site.base}/v1/memories", headers=bearer(access))).status_code == 200


# --- codes ----------------------------------------------------------------------------------------------


async def test_a_wrong_pkce_verifier_is_refused(site: Site, http: httpx2.AsyncClient) -> None:
    raw = await RawClient.register(http, site.base)
    code, verifier, _ = await raw.sign_in(http, site.owner())
    wrong = await raw.exchange(http, code, pkce()[0])
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant", wrong.text
    assert (await raw.exchange(http, code, verifier)).status_code == 200


async def test_only_s256_challenges_are_taken(site: Site, http: httpx2.AsyncClient) -> None:
    raw = await RawClient.register(http, site.base)
    verifier, challenge = pkce()
    for params in ({"code_challenge_method": "plain"}, {"code_challenge": verifier[:20]}):
        response = await http.get(raw.authorize_url(challenge, **params))
        assert response.status_code == 302, response.text
        query = parse_qs(urlsplit(response.headers["location"]).query)
        assert query["error"] == ["invalid_request"] and query["state"] == ["st-123"]
        assert query["iss"] == [site.base]  # the SDK's own error redirects get `iss` too (RFC 9207)


async def test_a_code_works_once_and_a_replay_revokes_what_it_gave(site: Site, http: httpx2.AsyncClient) -> None:
    raw = await RawClient.register(http, site.base)
    code, verifier, _ = await raw.sign_in(http, site.owner())
    first = await raw.exchange(http, code, verifier)
    assert first.status_code == 200
    tokens = first.json()
    assert await works(http, site, tokens["access_token"])
    replay = await raw.exchange(http, code, verifier)
    assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
    assert not await works(http, site, tokens["access_token"])  # the code was in other hands: grant revoked
    assert (await raw.refresh(http, tokens["refresh_token"])).json()["error"] == "invalid_grant"


async def test_a_code_of_another_client_is_unknown(site: Site, http: httpx2.AsyncClient) -> None:
    one, other = await RawClient.register(http, site.base), await RawClient.register(http, site.base)
    code, verifier, _ = await one.sign_in(http, site.owner())
    other.redirect_uri = one.redirect_uri
    assert (await other.exchange(http, code, verifier)).json()["error"] == "invalid_grant"
    assert (await one.exchange(http, code, verifier)).status_code == 200


# --- redirect URIs and state ----------------------------------------------------------------------------


async def test_redirect_uris_are_compared_exactly(site: Site, http: httpx2.AsyncClient) -> None:
    raw = await RawClient.register(http, site.base, redirect_uri="http://127.0.0.1:38124/cb")
    _, challenge = pkce()
    for uri in (
        "http://127.0.0.1:38124/cb2",
        "http://127.0.0.1:38124/cb/",
        "http://127.0.0.1:38124/cb?x=1",
        "http://127.0.0.2:38124/cb",
        "https://127.0.0.1:38124/cb",
        "http://evil.example:38124/cb",
        "http://127.0.0.1@evil.example:38124/cb",
    ):
        response = await http.get(raw.authorize_url(challenge, redirect_uri=uri))
        assert response.status_code == 400 and "location" not in response.headers, uri
        assert response.json()["error"] == "invalid_request", uri
    web = await RawClient.register(http, site.base, redirect_uri="https://app.example/cb")
    response = await http.get(web.authorize_url(challenge, redirect_uri="https://app.example:8443/cb"))
    assert response.status_code == 400  # only loopback redirects may change their port


async def test_a_loopback_redirect_may_use_another_port(site: Site, http: httpx2.AsyncClient) -> None:
    raw = await RawClient.register(http, site.base, redirect_uri="http://127.0.0.1:38124/cb")
    raw.redirect_uri = "http://127.0.0.1:40999/cb"  # RFC 8252 §7.3: the app listens where it can
    code, verifier, _ = await raw.sign_in(http, site.owner())
    assert (await raw.exchange(http, code, verifier)).status_code == 200


async def test_the_token_request_must_repeat_the_redirect_uri(site: Site, http: httpx2.AsyncClient) -> None:
    raw = await RawClient.register(
        http, site.base, redirect_uris=["http://127.0.0.1:38124/cb", "http://127.0.0.1:38124/other"]
    )
    code, verifier, _ = await raw.sign_in(http, site.owner())
    moved = await raw.exchange(http, code, verifier, redirect_uri="http://127.0.0.1:38124/other")
    assert moved.status_code == 400 and moved.json()["error"] == "invalid_request"


async def test_state_is_passed_through_on_allow_and_on_deny(site: Site, http: httpx2.AsyncClient) -> None:
    raw = await RawClient.register(http, site.base)
    state = "s t&a=t/é?#" + "x" * 100
    for action, expected in (("allow", "code"), ("deny", "error")):
        _, challenge = pkce()
        query = callback_of(await site.owner(action=action).consent(http, raw.authorize_url(challenge, state=state)))
        assert query["state"] == state and query["iss"] == site.base and expected in query
    assert query["error"] == "access_denied"


# --- resources (RFC 8707) -------------------------------------------------------------------------------


async def test_no_token_is_minted_for_another_resource(site: Site, http: httpx2.AsyncClient) -> None:
    raw = await RawClient.register(http, site.base)
    _, challenge = pkce()
    response = await http.get(raw.authorize_url(challenge, resource="https://other.example/mcp"))
    assert response.status_code == 302
    query = parse_qs(urlsplit(response.headers["location"]).query)
    assert query["error"] == ["invalid_target"] and query["state"] == ["st-123"] and query["iss"] == [site.base]
    code, verifier, _ = await raw.sign_in(http, site.owner())
    other = await raw.exchange(http, code, verifier, resource="https://other.example/mcp")
    assert other.status_code == 400 and other.json()["error"] == "invalid_target"
    assert (await raw.exchange(http, code, verifier, resource=f"{site.base}/mcp/")).status_code == 200


# --- refresh tokens ---------------------------------------------------------------------------------------


async def test_a_rotated_refresh_token_used_again_revokes_the_grant(site: Site, http: httpx2.AsyncClient) -> None:
    raw = await RawClient.register(http, site.base, token_endpoint_auth_method="none")
    assert raw.client_secret is None  # a public client: PKCE alone proves it
    old = await raw.tokens(http, site.owner())
    new = (await raw.refresh(http, old["refresh_token"])).json()
    assert await works(http, site, new["access_token"])
    replay = await raw.refresh(http, old["refresh_token"])
    assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
    assert not await works(http, site, new["access_token"])
    assert (await raw.refresh(http, new["refresh_token"])).json()["error"] == "invalid_grant"


async def test_a_refresh_may_narrow_the_scopes_but_never_widen_them(site: Site, http: httpx2.AsyncClient) -> None:
    raw = await RawClient.register(http, site.base)
    tokens = await raw.tokens(http, site.owner(scopes=[READ]))
    wider = await raw.token(
        http, grant_type="refresh_token", refresh_token=tokens["refresh_token"], scope=f"{READ} {WRITE}"
    )
    assert wider.status_code == 400 and wider.json()["error"] == "invalid_scope"


async def test_client_credentials_are_checked_at_the_token_endpoint(site: Site, http: httpx2.AsyncClient) -> None:
    raw = await RawClient.register(http, site.base)
    code, verifier, _ = await raw.sign_in(http, site.owner())
    secret, raw.client_secret = raw.client_secret, "mcs_wrong"
    refused = await raw.exchange(http, code, verifier)
    assert refused.status_code == 401 and refused.json()["error"] == "invalid_client"
    raw.client_secret = None
    assert (await raw.exchange(http, code, verifier)).status_code == 401
    raw.client_secret = secret
    assert (await raw.exchange(http, code, verifier)).status_code == 200


# --- the consent page -------------------------------------------------------------------------------------


async def consent_page(http: httpx2.AsyncClient, site: Site) -> httpx2.Response:
    raw = await RawClient.register(http, site.base)
    start = await http.get(raw.authorize_url(pkce()[1]))
    return await http.get(start.headers["location"])


async def test_the_consent_page_cannot_be_framed_and_runs_no_script(site: Site, http: httpx2.AsyncClient) -> None:
    page = await consent_page(http, site)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = {part.split()[0]: part.split()[1:] for part in page.headers["content-security-policy"].split("; ")}
    assert csp["frame-ancestors"] == ["'none'"] and csp["default-src"] == ["'none'"]
    assert "script-src" not in csp and not any("unsafe" in v for values in csp.values() for v in values)
    assert csp["form-action"] == ["'self'", "http://127.0.0.1:38124"]
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["referrer-policy"] == "no-referrer" and page.headers["cache-control"] == "no-store"
    cookie = page.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/oauth/consent" in cookie
    assert "<script" not in page.text.lower() and not re.search(r"<[^>]*\son[a-z]+\s*=", page.text, re.I)
    assert "need the site's Basic credential" in html.unescape(page.text)


async def test_the_consent_form_needs_its_own_csrf_token(site: Site, http: httpx2.AsyncClient) -> None:
    page, other = await consent_page(http, site), await consent_page(http, site)
    owner = site.owner()
    other_csrf = dict(parse_form(other.text).fields)["csrf"]
    async with httpx2.AsyncClient(timeout=30) as stranger:  # another browser: no cookie
        assert (await owner.submit(stranger, page)).status_code == 403
    assert (await owner.submit(http, page, csrf="forged")).status_code == 403
    assert (await owner.submit(http, page, csrf=other_csrf)).status_code == 403
    assert (await owner.submit(http, page)).status_code == 303  # the genuine form still goes through
    assert (await owner.submit(http, page)).status_code == 400  # ...once


async def test_failed_sign_ins_on_the_consent_page_are_limited_like_basic(tmp_path: Path) -> None:
    site = Site(tmp_path, failures_per_minute=LIMIT)
    try:
        await _limited(site)
    finally:
        site.process.kill()


async def _limited(site: Site) -> None:
    transport = httpx2.AsyncHTTPTransport(local_address="127.0.0.9")  # an address of its own
    async with httpx2.AsyncClient(transport=transport, timeout=60) as http:
        page = await consent_page(http, site)
        wrong = Owner("acme", "not-the-secret")
        for _ in range(LIMIT):
            failed = await wrong.submit(http, page)
            assert failed.status_code == 403 and "Sign-in failed" in failed.text
        limited = await site.owner().submit(http, page)  # even the right secret: not checked at all
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 0
        basic = await http.post(f"{site.base}/mcp", json={}, auth=("acme", site.secret))
        assert basic.status_code == 429  # one count for the consent page, /mcp and /v1
    async with httpx2.AsyncClient(timeout=60) as http:  # other addresses are not affected
        raw = await RawClient.register(http, site.base)
        assert callback_of(await site.owner().consent(http, raw.authorize_url(pkce()[1])))["code"]


async def test_the_owner_grants_only_what_was_asked_for(site: Site, http: httpx2.AsyncClient) -> None:
    raw = await RawClient.register(http, site.base, scope=READ)
    start = await http.get(raw.authorize_url(pkce()[1], scope=f"{READ} offline_access"))
    page = await http.get(start.headers["location"])
    assert [value for _, value, _ in parse_form(page.text).checkboxes] == [READ]
    forged = await Owner("acme", site.secret, scopes=[READ, WRITE]).submit(http, page)
    assert forged.status_code == 400 and "asked for" in forged.text
    nothing = await Owner("acme", site.secret, scopes=[]).submit(http, page)
    assert nothing.status_code == 400
    too_many = await Owner("acme", site.secret, teams=",".join(f"t{i}" for i in range(40))).submit(http, page)
    assert too_many.status_code == 400
    assert (await site.owner().submit(http, page)).status_code == 303


# --- bad input ---------------------------------------------------------------------------------------------


BAD_REQUESTS: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/authorize", {}),
    ("GET", "/authorize", {"params": {"client_id": "nobody", "response_type": "code", "code_challenge": "x" * 43}}),
    ("GET", "/authorize", {"params": {"client_id": "x" * 5000}}),
    ("POST", "/authorize", {"content": b"\xff\xfe", "headers": {"content-type": "application/x-www-form-urlencoded"}}),
    ("POST", "/token", {}),
    ("POST", "/token", {"data": {"grant_type": "password", "client_id": "nobody"}}),
    ("POST", "/token", {"data": {"grant_type": "authorization_code"}}),
    ("POST", "/token", {"content": b"{not json", "headers": {"content-type": "application/json"}}),
    ("POST", "/token", {"content": b"x" * 100_000, "headers": {"content-type": "application/x-www-form-urlencoded"}}),
    ("POST", "/register", {"content": b"{not json"}),
    ("POST", "/register", {"json": []}),
    ("POST", "/register", {"json": {"redirect_uris": []}}),
    ("POST", "/register", {"json": {"redirect_uris": ["not a url"]}}),
    ("POST", "/register", {"json": {"redirect_uris": ["javascript:alert(1)"]}}),
    ("POST", "/register", {"json": {"redirect_uris": ["http://example.com/cb"]}}),
    ("POST", "/register", {"json": {"redirect_uris": ["https://app.example/cb#frag"]}}),
    ("POST", "/register", {"json": {"redirect_uris": ["https://app.example/cb"], "client_name": "n" * 500}}),
    ("POST", "/register", {"json": {"redirect_uris": ["https://app.example/cb"], "grant_types": ["implicit"]}}),
    ("POST", "/revoke", {}),
    ("POST", "/revoke", {"data": {"client_id": "nobody", "token": "x"}}),
    ("GET", "/oauth/consent", {}),
    ("GET", "/oauth/consent", {"params": {"request": "forged"}}),
    ("POST", "/oauth/consent", {}),
    ("POST", "/oauth/consent", {"data": {"request": "forged", "csrf": "x", "site": "acme", "secret": "s"}}),
    ("POST", "/oauth/consent", {"content": b"--x\r\n", "headers": {"content-type": "multipart/form-data; boundary=x"}}),
    ("PUT", "/token", {}),
]


@pytest.mark.parametrize(
    "method, path, kwargs", BAD_REQUESTS, ids=[f"{m} {p} {i}" for i, (m, p, _) in enumerate(BAD_REQUESTS)]
)
async def test_bad_requests_get_oauth_errors_never_a_500(
    site: Site, http: httpx2.AsyncClient, method: str, path: str, kwargs: dict[str, Any]
) -> None:
    response = await http.request(method, f"{site.base}{path}", **kwargs)
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    if response.headers.get("content-type", "").startswith("application/json"):
        assert isinstance(response.json().get("error"), (str, dict)), response.text
    assert "Traceback" not in response.text


@pytest.mark.parametrize("token", ["msa_" + "A" * 43, "msa_", "msa_" + "A" * 300, "msr_" + "A" * 43])
async def test_unknown_oauth_tokens_get_401_with_the_challenge(
    site: Site, http: httpx2.AsyncClient, token: str
) -> None:
    for response in (
        await http.post(f"{site.base}/mcp", json={}, headers=bearer(token)),
        await http.get(f"{site.base}/v1/memories", headers=bearer(token)),
    ):
        assert response.status_code == 401 and response.json()["error"]["code"] == "unauthorized"
        challenge = response.headers["www-authenticate"]
        assert challenge.startswith(
            'Bearer realm="memory-server", error="invalid_token", resource_metadata="'
            f'{site.base}/.well-known/oauth-protected-resource/mcp"'
        )
        assert 'Basic realm="memory-server"' in challenge


async def test_a_refresh_token_is_no_access_token(site: Site, http: httpx2.AsyncClient) -> None:
    raw = await RawClient.register(http, site.base)
    tokens = await raw.tokens(http, site.owner())
    assert not await works(http, site, tokens["refresh_token"])
    assert (await raw.exchange(http, tokens["access_token"], pkce()[0])).json()["error"] == "invalid_grant"
