"""The consent page (`/oauth/consent`): where a site's owner signs in with the site credential (site name +
Basic secret) and grants a client `memory:read` and/or `memory:write`, optionally bounded to teams,
projects and buckets: what `memory-server token create` takes.

GET shows the form for a pending authorization request (the SDK's /authorize handler redirected here) with a
fresh CSRF token, in a hidden field and in a SameSite=Strict cookie of the page's own path; its digest is
stored with the request, so a POST must come from a page this server rendered for this very request, in
this browser. The secret is checked like a Basic credential through the same `SignInGuard` as /mcp and
/v1, so failed sign-ins here count, and are rate-limited, together with theirs; as there, a credential this
server verified before is settled at once, even from an address being rate-limited. Allow issues a code and
deny an `access_denied`, both by a 303 to the client's redirect URI with its `state`.
"""

from __future__ import annotations

import base64
import hmac

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from memory_server.api.middleware import SignInGuard
from memory_server.api.oauth.page import Form, consent_page, message_page, security_headers
from memory_server.api.oauth.provider import CONSENT_PATH, ConsentView, SiteAuthorizationServer
from memory_server.auth.authenticator import Authenticator
from memory_server.auth.oauth import digest
from memory_server.errors import AppError, RateLimited
from memory_server.storage.oauth_records import Bounds

MAX_BOUND_VALUES = 32
MAX_BOUND_LENGTH = 128
EXPIRED = (
    "This sign-in request has expired or was already used",
    "Nothing was granted. Start again from your client: it will open a new sign-in page.",
)


class ChoiceError(Exception):
    """What the owner chose cannot be granted; the message says why."""


class ConsentPage:
    def __init__(
        self,
        provider: SiteAuthorizationServer,
        *,
        authenticator: Authenticator,
        sign_in: SignInGuard,
        secure_cookie: bool,
    ) -> None:
        self._provider = provider
        self._authenticator = authenticator
        self._sign_in = sign_in
        self._secure = secure_cookie  # https: the cookie never travels in clear

    async def handle(self, request: Request) -> Response:
        if request.method == "POST":
            return await self._submit(request)
        return await self._show(request)

    async def _show(self, request: Request) -> Response:
        request_id = request.query_params.get("request", "")
        begun = await self._provider.begin_consent(request_id)
        if begun is None:
            return message_page(*EXPIRED, status=400)
        view, csrf = begun
        response = consent_page(_form(request_id, csrf, view))
        response.set_cookie(
            _cookie(request_id),
            csrf,
            max_age=self._provider.lifetimes.request_s,
            path=CONSENT_PATH,
            secure=self._secure,
            httponly=True,
            samesite="strict",
        )
        return response

    async def _submit(self, request: Request) -> Response:
        form = await request.form()
        request_id, csrf = _field(form, "request"), _field(form, "csrf")
        view = await self._provider.consent_view(request_id)
        if view is None:
            return message_page(*EXPIRED, status=400)
        cookie = request.cookies.get(_cookie(request_id), "")
        if not (
            csrf
            and view.csrf_hash
            and hmac.compare_digest(cookie, csrf)
            and hmac.compare_digest(digest(csrf), view.csrf_hash)
        ):
            return message_page(
                "This form could not be verified",
                "Its security token is missing or stale (was "
                "it sent from another page, or opened twice?). Reload the page and try again.",
                status=403,
            )
        if _field(form, "action") == "deny":
            return _redirect(await self._provider.deny(request_id), view)
        return await self._allow(request, form, _form(request_id, csrf, view, form), view)

    async def _allow(self, request: Request, fields: FormData, shown: Form, view: ConsentView) -> Response:
        try:
            bounds = choice(fields, view.requested_scopes)
        except ChoiceError as exc:
            return consent_page(shown, error=str(exc), status=400)
        site, secret = _field(fields, "site").strip(), _field(fields, "secret")
        if not site or not secret:
            return consent_page(shown, error="Enter the site's name and its secret.", status=400)
        header = "Basic " + base64.b64encode(f"{site}:{secret}".encode()).decode()
        client = request.client
        try:
            authenticator = self._authenticator
            principal = authenticator.authenticate_nowait(header) or await self._sign_in.check(
                client.host if client else "unknown",
                header,
                authenticator.authenticate,
                known=authenticator.authenticate_known,
            )
        except RateLimited as exc:
            return consent_page(
                shown,
                error=f"Too many failed sign-ins from this address; try again in {exc.retry_after} s.",
                status=429,
                headers={"Retry-After": str(exc.retry_after)},
            )
        except AppError:
            return consent_page(shown, error="Sign-in failed: the site name or the secret is wrong.", status=403)
        return _redirect(await self._provider.approve(shown.request_id, principal.site_id, bounds), view)


def choice(fields: FormData, requested: tuple[str, ...]) -> Bounds:
    """The scopes and bounds the owner chose, checked as `token create` would take them."""
    scopes = tuple(sorted({value for value in fields.getlist("scope") if isinstance(value, str)}))
    if not scopes:
        raise ChoiceError("Choose at least one permission.")
    if not set(scopes) <= set(requested):
        raise ChoiceError("Only the permissions the client asked for can be granted.")
    return Bounds(
        scopes=scopes,
        teams=_names(fields, "teams"),
        projects=_names(fields, "projects"),
        buckets=_names(fields, "buckets"),
    )


def _names(fields: FormData, name: str) -> tuple[str, ...] | None:
    values = sorted({part.strip() for part in _field(fields, name).split(",") if part.strip()})
    if len(values) > MAX_BOUND_VALUES:
        raise ChoiceError(f"At most {MAX_BOUND_VALUES} {name}.")
    for value in values:
        if len(value) > MAX_BOUND_LENGTH or not value.isprintable():
            raise ChoiceError(f"{name.capitalize()} are names of at most {MAX_BOUND_LENGTH} printable characters.")
    return tuple(values) or None


def _field(fields: FormData, name: str) -> str:
    value = fields.get(name)
    return value if isinstance(value, str) else ""


def _cookie(request_id: str) -> str:
    """One cookie per request, so two sign-in pages open at once do not spoil each other's token."""
    return f"memory_consent_{digest(request_id)[:16]}"


def _form(request_id: str, csrf: str, view: ConsentView, typed: FormData | None = None) -> Form:
    if typed is None:
        return Form(
            request_id=request_id,
            csrf=csrf,
            client_name=view.client_name,
            redirect_uri=view.redirect_uri,
            requested_scopes=view.requested_scopes,
        )
    chosen = tuple(v for v in typed.getlist("scope") if isinstance(v, str))
    return Form(
        request_id=request_id,
        csrf=csrf,
        client_name=view.client_name,
        redirect_uri=view.redirect_uri,
        requested_scopes=view.requested_scopes,
        site=_field(typed, "site")[:64],
        chosen_scopes=chosen,
        teams=_field(typed, "teams")[:2000],
        projects=_field(typed, "projects")[:2000],
        buckets=_field(typed, "buckets")[:2000],
    )


def _redirect(url: str | None, view: ConsentView) -> Response:
    if url is None:
        return message_page(*EXPIRED, status=400)
    # 303: the browser follows with a GET, so the form is not posted again to the client.
    return RedirectResponse(url, status_code=303, headers=security_headers(view.redirect_uri))
