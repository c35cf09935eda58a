"""Signing in and out, and who has access to the site: its tokens and its connectors' OAuth grants (Basic
sign-in only).

Sign-in takes the site's Basic credential or a token, checked by the same Authenticator as every request
to /mcp and /v1 and limited by the same SignInGuard (failures per address, 429 with Retry-After). Token and
grant administration is memory_server.auth.admin, as the CLI's; a token is shown once, on the page that created it,
with the entries `client-config` would write for it (memory_server.api.console.client_setup). Its scopes default to
read and write, as `token create`'s do.
"""

from __future__ import annotations

import base64
import time
from functools import partial
from urllib.parse import urlencode

import anyio
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from memory_server.api.console.app import ROOT, Console, Visit, signed_in
from memory_server.api.console.client_setup import client_entries
from memory_server.api.console.forms import Form, bound_words, read_form
from memory_server.api.console.security import clear_cookie, refuse_cross_site, set_cookie
from memory_server.api.console.sessions import (
    ABSOLUTE_S,
    SESSION_COOKIE,
    SIGN_IN_COOKIE,
    SIGN_IN_FORM_S,
    csrf_ok,
    csrf_token,
    new_secret,
)
from memory_server.auth import admin
from memory_server.auth.principal import Principal
from memory_server.errors import AppError, Forbidden, InvalidParameters, RateLimited, Unauthorized
from memory_server.storage.oauth_records import OAuthGrant
from memory_server.storage.records import TokenRecord

SIGN_IN = f"{ROOT}/sign-in"
BASIC_ONLY = (
    "managing tokens needs the site's Basic sign-in (site name and secret): a token cannot list, "
    "create or revoke tokens"
)


def routes(console: Console) -> list[Route]:
    return [
        Route("/sign-in", partial(sign_in_page, console), methods=["GET"]),
        Route("/sign-in", partial(sign_in, console), methods=["POST"]),
        Route("/sign-out", signed_in(console, sign_out), methods=["POST"]),
        Route("/access", signed_in(console, access_page), methods=["GET"]),
        Route("/access/tokens", signed_in(console, create_token), methods=["POST"]),
        Route("/access/tokens/{token_id}/revoke", signed_in(console, revoke_token), methods=["POST"]),
        Route("/access/grants/{grant_id}/revoke", signed_in(console, revoke_grant), methods=["POST"]),
    ]


def next_page(value: str | None) -> str:
    """Where to go after signing in: a console page of this server only (never another site)."""
    if (
        value
        and value.startswith(f"{ROOT}/")
        and not value.startswith("//")
        and "\\" not in value
        and not value.startswith(SIGN_IN)
    ):
        return value
    return f"{ROOT}/memories"


def form_secret(request: Request) -> str:
    secret = request.cookies.get(SIGN_IN_COOKIE)
    return secret if secret and 20 <= len(secret) <= 100 else new_secret()


def sign_in_form(
    console: Console, request: Request, *, status: int = 200, error: AppError | None = None, form: Form | None = None
) -> Response:
    secret = form_secret(request)
    query = Form(list(request.query_params.multi_items()))
    headers = {"Retry-After": str(error.retry_after)} if isinstance(error, RateLimited) else None
    response = console.render.page(
        request,
        "sign_in.html",
        status=status,
        headers=headers,
        error=error,
        csrf=csrf_token(secret),
        next=next_page((form or query).given("next")),
        site=(form.get("site") if form else ""),
        method=(form.get("method") if form else "") or "basic",
        ended=query.given("ended") is not None and error is None,
        signed_out=query.given("signed_out"),
    )
    set_cookie(response, request, SIGN_IN_COOKIE, secret, max_age=SIGN_IN_FORM_S, path=SIGN_IN)
    return response


async def sign_in_page(console: Console, request: Request) -> Response:
    try:
        refuse_cross_site(request)
        if await console.sessions.resume(request.cookies.get(SESSION_COOKIE)) is not None:
            return RedirectResponse(next_page(request.query_params.get("next")), status_code=303)
    except Exception as exc:
        return console.fail(request, exc)
    return sign_in_form(console, request)


def credential_header(form: Form) -> str:
    """The form's credential as an Authorization header value, which the Authenticator checks."""
    if form.get("method") == "token":
        token = form.given("token")
        if token is None:
            raise InvalidParameters("token: paste a token (mst_...)")
        return f"Bearer {token}"
    site, secret = form.given("site"), form.get("secret")
    if site is None or not secret:
        raise InvalidParameters("site and secret: both are required")
    return "Basic " + base64.b64encode(f"{site}:{secret}".encode()).decode()


async def sign_in(console: Console, request: Request) -> Response:
    form = None
    try:
        refuse_cross_site(request)
        form = await read_form(request, limit=console.max_form)
        if not csrf_ok(request.cookies.get(SIGN_IN_COOKIE), form.get("csrf")):
            raise Forbidden("the sign-in form has expired or did not come from this console; reload it")
        header = credential_header(form)
        authenticator = console.services.authenticator
        client = request.client
        # As on /mcp and /v1: a credential this server verified before is settled at once, even from an address
        # that is being rate-limited; any other goes through the guard (counted, one verifying thread).
        principal = authenticator.authenticate_nowait(header) or await console.sign_in.check(
            client.host if client else "unknown",
            header,
            authenticator.authenticate,
            known=authenticator.authenticate_known,
        )
        binding = await anyio.to_thread.run_sync(authenticator.binding, header)
        if binding is None:
            raise Unauthorized("the credential changed while signing in; sign in again")
        secret = await console.sessions.start(principal, binding)
        await console.sessions.end(request.cookies.get(SESSION_COOKIE))  # never two sessions in one cookie
    except AppError as exc:
        return sign_in_form(console, request, status=exc.status, error=exc, form=form)
    except Exception as exc:
        return console.fail(request, exc)
    response = RedirectResponse(next_page(form.given("next")), status_code=303)
    set_cookie(response, request, SESSION_COOKIE, secret, max_age=ABSOLUTE_S, path=ROOT)
    clear_cookie(response, request, SIGN_IN_COOKIE, path=SIGN_IN)
    return response


async def sign_out(visit: Visit) -> Response:
    await visit.console.sessions.end(visit.session.secret)
    response = RedirectResponse(f"{SIGN_IN}?signed_out=1", status_code=303)
    clear_cookie(response, visit.request, SESSION_COOKIE, path=ROOT)
    return response


def require_site_credential(principal: Principal) -> None:
    if principal.kind != "basic":
        raise Forbidden(BASIC_ONLY)


async def tokens_page(
    visit: Visit, *, status: int = 200, new_token: tuple[str, str] | None = None, error: AppError | None = None
) -> Response:
    storage, site = visit.console.services.storage, visit.principal.site

    def read() -> tuple[list[TokenRecord], list[OAuthGrant]]:
        return admin.list_tokens(storage.sites, site), admin.list_site_grants(storage.sites, storage.oauth, site)

    tokens, grants = await anyio.to_thread.run_sync(read)
    mcp_url = visit.console.services.settings.mcp_resource
    entries = client_entries(mcp_url, new_token[1]) if new_token else []
    return visit.page(
        "access.html",
        status=status,
        tokens=list(reversed(tokens)),
        grants=list(reversed(grants)),
        now=time.time(),
        new_token=new_token,
        entries=entries,
        mcp_url=mcp_url,
        error=error,
        form=visit.form,
        revoked=visit.form.given("revoked"),
    )


async def access_page(visit: Visit) -> Response:
    if visit.principal.kind != "basic":
        return visit.page(
            "access.html",
            status=403,
            tokens=[],
            grants=[],
            now=time.time(),
            new_token=None,
            entries=[],
            revoked=None,
            form=visit.form,
            error=Forbidden(BASIC_ONLY),
        )
    return await tokens_page(visit)


async def create_token(visit: Visit) -> Response:
    require_site_credential(visit.principal)
    form = visit.form
    try:
        teams, projects, buckets = (bound_words(name, form.get(name)) for name in ("teams", "projects", "buckets"))
        created = await anyio.to_thread.run_sync(
            lambda: admin.create_token(
                visit.console.services.storage.sites,
                visit.principal.site,
                scopes=form.all("scope"),
                teams=teams,
                projects=projects,
                buckets=buckets,
                label=form.get("label"),
            )
        )
    except AppError as exc:
        return await tokens_page(visit, status=exc.status, error=exc)
    return await tokens_page(visit, status=201, new_token=created)


async def revoke_token(visit: Visit) -> Response:
    require_site_credential(visit.principal)
    token_id = visit.request.path_params["token_id"]
    await anyio.to_thread.run_sync(
        admin.revoke_site_token, visit.console.services.storage.sites, visit.principal.site, token_id
    )
    return RedirectResponse(f"{ROOT}/access?{urlencode({'revoked': token_id})}", status_code=303)


async def revoke_grant(visit: Visit) -> Response:
    require_site_credential(visit.principal)
    grant_id = visit.request.path_params["grant_id"]
    storage = visit.console.services.storage
    await anyio.to_thread.run_sync(
        admin.revoke_site_grant, storage.sites, storage.oauth, visit.principal.site, grant_id
    )
    return RedirectResponse(f"{ROOT}/access?{urlencode({'revoked': grant_id})}", status_code=303)
