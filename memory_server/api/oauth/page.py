"""The consent page's HTML and the headers that keep it safe.

No script at all, and a Content-Security-Policy that would refuse one: `default-src 'none'`, the one style
block allowed by its hash, forms posting only here (and, since browsers check `form-action` on the
redirect after a form too, to the origin of the client's redirect URI), never framed (`frame-ancestors
'none'` and `X-Frame-Options: DENY`: a framed consent page could be clickjacked), never cached, and no
Referer (the page's URL holds the request id). Every value from a client or a form is HTML-escaped.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from html import escape
from urllib.parse import urlsplit

from starlette.responses import HTMLResponse

from memory_server.auth.principal import READ, SCOPES, WRITE

CSS = """
body{font:16px/1.45 system-ui,sans-serif;margin:0;background:#f4f5f7;color:#1d232b}
main{max-width:34rem;margin:2rem auto;padding:1.5rem 2rem;background:#fff;border-radius:8px;
box-shadow:0 1px 4px rgba(0,0,0,.12)}
h1{font-size:1.3rem;margin:0 0 .8rem}fieldset{border:1px solid #d5d9de;border-radius:6px;margin:1rem 0}
legend{font-weight:600;padding:0 .3rem}label{display:block;margin:.45rem 0}
input[type=text],input[type=password]{width:100%;box-sizing:border-box;padding:.4rem;font:inherit}
.note{font-size:.9rem;color:#4a535e}.error{background:#fdecea;border:1px solid #f5c2bd;padding:.6rem;
border-radius:6px}code{font-size:.9em}.actions{display:flex;gap:.8rem;margin-top:1rem}
button{font:inherit;padding:.5rem 1.4rem;border-radius:6px;border:1px solid #8a939e;background:#fff}
button[value=allow]{background:#1f5fbf;color:#fff;border-color:#1f5fbf}
"""
_STYLE_HASH = base64.b64encode(hashlib.sha256(CSS.encode()).digest()).decode()
SCOPE_TEXT = {READ: "Read saved memories", WRITE: "Save, change and forget memories"}
LOG_TOOLS_NOTE = (
    "Conversation logs (append_memory, recall_memory, replay_memory, list_conversations) need the "
    "site's Basic credential: a client signed in here cannot use them."
)


@dataclass(frozen=True, slots=True)
class Form:
    """What the consent form shows: the request, and what the owner typed (kept after a failed try)."""

    request_id: str
    csrf: str
    client_name: str
    redirect_uri: str
    requested_scopes: tuple[str, ...]
    site: str = ""
    chosen_scopes: tuple[str, ...] | None = None  # None: all requested ones checked
    teams: str = ""
    projects: str = ""
    buckets: str = ""


def security_headers(redirect_uri: str | None = None) -> dict[str, str]:
    form_action = "'self'"
    if redirect_uri:
        form_action += f" {_source(redirect_uri)}"
    csp = (
        f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; form-action {form_action}; "
        "frame-ancestors 'none'; base-uri 'none'"
    )
    return {
        "Content-Security-Policy": csp,
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }


def _source(uri: str) -> str:
    """The CSP source naming where a redirect URI points: its origin, or its scheme for an app's own."""
    parts = urlsplit(uri)
    if parts.scheme in ("http", "https"):
        return f"{parts.scheme}://{_host(uri)}"
    return f"{parts.scheme}:"


def _host(uri: str) -> str:
    """Host and port, never a user name before them (`https://claude.ai@evil.example` goes to evil.example)."""
    return urlsplit(uri).netloc.rpartition("@")[2]


def consent_page(
    form: Form, *, error: str | None = None, status: int = 200, headers: dict[str, str] | None = None
) -> HTMLResponse:
    name, target = escape(form.client_name), escape(_where(form.redirect_uri))
    checked = form.chosen_scopes if form.chosen_scopes is not None else form.requested_scopes
    scopes = "".join(
        f'<label><input type="checkbox" name="scope" value="{s}"{" checked" if s in checked else ""}> '
        f"{SCOPE_TEXT[s]} (<code>{s}</code>)</label>"
        for s in SCOPES
        if s in form.requested_scopes
    )
    body = f"""<h1>Allow {name} to use this memory server?</h1>
<p><strong>{name}</strong> (as the client names itself) asks for access to one site of this server. If you
allow it, your browser goes back to <code>{target}</code>.</p>
{_error(error)}<form method="post" action="/oauth/consent">
<input type="hidden" name="request" value="{escape(form.request_id)}">
<input type="hidden" name="csrf" value="{escape(form.csrf)}">
<fieldset><legend>Sign in with the site's credential</legend>
<label>Site <input type="text" name="site" value="{escape(form.site)}" autocomplete="username" maxlength="64"
 required autofocus></label>
<label>Secret <input type="password" name="secret" autocomplete="current-password" maxlength="1024" required></label>
</fieldset>
<fieldset><legend>Permissions</legend>{scopes}</fieldset>
<fieldset><legend>Limit to (optional)</legend>
<p class="note">Comma-separated names; leave a field empty for no limit. The client then sees and writes
only memories filed under them.</p>
<label>Teams <input type="text" name="teams" value="{escape(form.teams)}" maxlength="2000"></label>
<label>Projects <input type="text" name="projects" value="{escape(form.projects)}" maxlength="2000"></label>
<label>Buckets <input type="text" name="buckets" value="{escape(form.buckets)}" maxlength="2000"></label>
</fieldset>
<p class="note">{escape(LOG_TOOLS_NOTE)}</p>
<p class="note">Access lasts until you revoke it: <code>memory-server token list --site SITE</code> shows it,
<code>memory-server token revoke ID</code> ends it.</p>
<div class="actions"><button type="submit" name="action" value="allow">Allow</button>
<button type="submit" name="action" value="deny" formnovalidate>Deny</button></div>
</form>"""
    return _page("Sign in to memory-server", body, status, {**security_headers(form.redirect_uri), **(headers or {})})


def message_page(title: str, message: str, *, status: int) -> HTMLResponse:
    body = f"<h1>{escape(title)}</h1>\n<p>{escape(message)}</p>"
    return _page(title, body, status, security_headers())


def _page(title: str, body: str, status: int, headers: dict[str, str]) -> HTMLResponse:
    html = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer"><title>{escape(title)}</title><style>{CSS}</style></head>
<body><main>
{body}
</main></body></html>
"""
    return HTMLResponse(html, status_code=status, headers=headers)


def _error(error: str | None) -> str:
    return f'<p class="error" role="alert">{escape(error)}</p>\n' if error else ""


def _where(uri: str) -> str:
    parts = urlsplit(uri)
    return f"{parts.scheme}://{_host(uri)}" if parts.netloc else f"{parts.scheme}:"
