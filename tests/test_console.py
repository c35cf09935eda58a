"""The web console in a real browser (Debian's Chromium driven by Playwright) against a real server process
with the real model: sign in, search, edit (seen through REST), forget, page through a log, mint and revoke a
token, a read-only token's view, forged and CSRF-less changes refused. Every request the browser makes is
recorded, and each test checks that none left 127.0.0.1. Screenshots of each page go to docs/console/.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest

from procs import ServerProcess, parse_fields, run_cli, server_env
from tests import backends
from tests.conftest import wait_ready
from tests.console_support import (
    ARGS,
    CONVERSATION,
    LOG_ITEMS,
    RELEASE,
    SITE,
    Console,
    Recorded,
    csrf_of,
    seed_lines,
    shot,
    sign_in,
)

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(f"Chromium is not installed at {CHROMIUM} (.ci/system-packages installs it)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed "
                               "(pip install -e '.[test]')")

pytestmark = pytest.mark.backends  # the server's authority is SQLite, then PostgreSQL


@pytest.fixture(scope="module")
def console(storage_backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    data = tmp_path_factory.mktemp("console") / "data"
    secret = parse_fields(run_cli("site", "create", SITE, data_dir=data).stdout)["secret"]
    seed = data.parent / "seed.jsonl"
    seed.write_text("".join(json.dumps(line) + "\n" for line in seed_lines(datetime.now(UTC))))
    imported = run_cli("import", str(seed), data_dir=data)
    assert imported.returncode == 0, imported.stderr
    process = ServerProcess(data, env=server_env())
    process.start()
    try:
        wait_ready(process.base)
        yield Console(process, secret)
    finally:
        process.kill()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any, console: Console) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1100, "height": 800}, base_url=console.base)
    recorded = Recorded()
    context.on("request", lambda request: recorded.urls.append(request.url))
    tab = context.new_page()
    tab.on("console", lambda message: recorded.console(message.type, f"{message.text} at {message.location}"))
    tab.on("pageerror", lambda error: recorded.problems.append(str(error)))
    tab.on("response", lambda response: recorded.response(response.url, response.status))
    try:
        yield tab
    finally:
        context.close()
    recorded.check()


def test_sign_in_page_and_its_headers(page: Any, console: Console) -> None:
    response = page.goto("/ui/")
    assert page.url.endswith("/ui/sign-in?next=/ui/memories")
    headers = response.headers
    csp = headers["content-security-policy"]
    for rule in ("default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"):
        assert rule in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert headers["x-frame-options"] == "DENY" and headers["referrer-policy"] == "no-referrer"
    assert headers["cache-control"] == "no-store"
    shot(page, "sign-in")
    page.get_by_label("Site", exact=True).fill(SITE)
    page.get_by_label("Secret").fill("not-the-secret")
    page.get_by_role("button", name="Sign in with the site credential").click()
    assert page.get_by_role("alert").inner_text().startswith("unauthorized")
    sign_in(page, console)
    cookie = next(c for c in page.context.cookies() if c["name"] == "memory_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
    assert not cookie["secure"]  # plain HTTP here; Secure when the request came over HTTPS
    assert page.locator("ol.cards li").count() == 20 and page.get_by_role("link", name="Next page").count() == 1
    shot(page, "memories")


def test_filters_and_paging_of_memories(page: Any, console: Console) -> None:
    sign_in(page, console)
    page.get_by_label("Bucket").fill("ops")
    page.get_by_role("button", name="Apply filters").click()
    page.wait_for_url("**bucket=ops**")
    cards = page.locator("ol.cards li")
    assert cards.count() == 12 and all("bucket ops" in text for text in cards.all_inner_texts())
    page.get_by_label("Bucket").fill("")
    week_ago = (datetime.now(UTC) - timedelta(days=7)).date().isoformat()
    page.get_by_label("Occurred from").fill(week_ago)
    page.get_by_role("button", name="Apply filters").click()
    page.wait_for_url(f"**from={week_ago}**")
    assert 0 < page.locator("ol.cards li").count() < 10
    page.goto("/ui/memories?to=2000-01-01")
    assert "No memory matches these filters" in page.locator("#results").inner_text()
    page.goto("/ui/memories?from=someday")
    assert "occurred_after" in page.get_by_role("alert").inner_text()
    page.goto("/ui/memories")
    seen = set(page.locator("ol.cards li a").all_inner_texts())
    page.get_by_role("link", name="Next page").click()
    page.wait_for_url("**cursor=**")
    following = set(page.locator("ol.cards li a").all_inner_texts())
    assert following and not seen & following and len(seen | following) == 38


def test_find_a_memory_by_search(page: Any, console: Console) -> None:
    sign_in(page, console, to="/ui/search")
    page.get_by_label("Query").fill("when does the release train leave")
    page.get_by_role("button", name="Search").click()
    page.wait_for_url("**q=when**")
    recall = page.locator("section[aria-labelledby=recall-title] li").first
    strict = page.locator("section[aria-labelledby=search-title] li").first
    assert RELEASE in recall.inner_text() and RELEASE in strict.inner_text()
    assert re.fullmatch(r"0\.\d{4}", recall.locator(".score").inner_text())
    assert re.fullmatch(r"0\.\d{4}", strict.locator(".score").inner_text())
    shot(page, "search")


def test_edit_a_memory_and_see_it_through_rest(page: Any, console: Console) -> None:
    reference = console.reference_of(RELEASE)
    sign_in(page, console, to=f"/ui/memories/{reference}")
    assert page.get_by_role("link", name="Open the conversation entry it came from (seq 73)").count() == 1
    shot(page, "memory")
    edited = RELEASE.replace("every second Thursday", "every Wednesday")
    page.get_by_label("Content").fill(edited)
    page.get_by_label("Tags (comma-separated)").fill("release, schedule")
    page.get_by_role("button", name="Save changes").click()
    page.wait_for_url("**saved=1")
    assert "Saved" in page.get_by_role("status").inner_text()
    with console.rest() as http:
        memory = http.get(f"/v1/memories/{reference}").json()
        assert memory["content"] == edited and memory["tags"] == ["release", "schedule"]
        assert memory["team"] == "platform" and memory["provenance"]["seq"] == 73  # untouched fields kept
        hits = http.post("/v1/search", json={"query": "release train every Wednesday", "limit": 1}).json()
        assert hits["results"][0]["reference"] == reference  # re-embedded with its new text
    page.get_by_label("Metadata (a JSON object)").fill("[1, 2]")
    page.get_by_role("button", name="Save changes").click()
    assert page.get_by_role("alert").inner_text() == "invalid_parameters: metadata must be a JSON object"
    page.get_by_label("Metadata (a JSON object)").fill("{}")
    page.get_by_label("Occurred at (RFC3339)").fill("last Tuesday")
    page.get_by_role("button", name="Save changes").click()
    assert "occurred_at must be an RFC3339 timestamp" in page.get_by_role("alert").inner_text()


def test_forget_a_memory_after_confirming(page: Any, console: Console) -> None:
    reference = console.reference_of("My bike is in the shed behind the office.")
    sign_in(page, console, to=f"/ui/memories/{reference}")
    page.get_by_role("link", name="Forget this memory…").click()
    page.wait_for_url("**/forget")
    shot(page, "forget")
    page.get_by_role("button", name="Forget it").click()
    page.wait_for_url("**/ui/memories?forgotten=**")
    with console.rest() as http:
        assert http.get(f"/v1/memories/{reference}").status_code == 404


def test_page_through_a_three_page_conversation(page: Any, console: Console) -> None:
    sign_in(page, console, to="/ui/conversations")
    assert page.locator("tbody tr").count() == 3
    shot(page, "conversations")
    page.get_by_role("link", name=CONVERSATION).click()
    page.wait_for_url(f"**/ui/conversations/{CONVERSATION}")
    seqs = page.locator("ol.log li h2")
    assert seqs.first.inner_text().startswith("seq 0") and seqs.count() == 50
    assert '"text": "turn 0 of the planning chat"' in page.locator("ol.log li pre").first.inner_text()
    for first, count in ((50, 50), (100, 20)):
        page.get_by_role("link", name="Next").first.click()  # htmx swaps the page in and updates the address
        page.wait_for_url(f"**offset={first}**")
        page.wait_for_function(f"document.querySelector('ol.log li h2').textContent.startsWith('seq {first} ')")
        assert seqs.count() == count
    assert page.get_by_role("link", name="Next").count() == 0
    assert f"of {LOG_ITEMS}" in page.locator("#log p").first.inner_text()
    page.get_by_role("link", name="First").first.click()
    page.wait_for_url("**offset=0**")
    page.wait_for_function("document.querySelector('ol.log li h2').textContent.startsWith('seq 0 ')")
    # A page of its own for the screenshot, taken last: after a screenshot, Playwright's marks on the page
    # trip the CSP when htmx swaps content in.
    page.goto(f"/ui/conversations/{CONVERSATION}?offset=60&limit=20")
    shot(page, "conversation", full=False)


def test_provenance_opens_the_log_entry(page: Any, console: Console) -> None:
    reference = console.reference_of(RELEASE.replace("every second Thursday", "every Wednesday"))
    sign_in(page, console, to=f"/ui/memories/{reference}")
    page.get_by_role("link", name=re.compile("Open the conversation entry")).click()
    page.wait_for_url("**#item-73")
    assert page.locator("#item-73 h2").inner_text().startswith("seq 73")


def test_create_and_revoke_a_token(page: Any, console: Console) -> None:
    sign_in(page, console, to="/ui/access")
    page.get_by_label("memory:write (remember, edit, forget)").check()
    page.get_by_label("Buckets").fill("eng")
    page.get_by_role("button", name="Create token").click()
    token = page.get_by_label("New token").input_value()
    assert token.startswith("mst_")
    page.get_by_role("button", name="Copy").click()
    page.wait_for_function("document.getElementById('new-token-status').textContent.length > 0")
    shot(page, "access")
    with httpx2.Client(base_url=console.base, timeout=60) as http:
        listed = http.get("/v1/memories", headers={"Authorization": f"Bearer {token}"})
        assert listed.status_code == 200 and {m["bucket"] for m in listed.json()["memories"]} == {"eng"}
    token_id = page.locator("h2#new-title").inner_text().split()[1]
    page.goto("/ui/access")
    assert token not in page.content()  # shown once
    page.get_by_role("button", name=f"Revoke token {token_id}").click()
    page.wait_for_url("**revoked=**")
    assert "revoked" in page.locator(f"tr:has-text('{token_id}')").inner_text()
    with httpx2.Client(base_url=console.base, timeout=60) as http:
        assert http.get("/v1/memories", headers={"Authorization": f"Bearer {token}"}).status_code == 401


def test_a_read_only_token_sees_no_edit_control_and_a_forged_post_is_refused(page: Any, console: Console) -> None:
    _, token = console.token("--scope", "memory:read")
    reference = console.reference_of("Bob owns the billing service. (note 8)")
    sign_in(page, console, token=token)
    assert page.get_by_role("link", name="Access").count() == 0
    page.goto(f"/ui/memories/{reference}")
    assert page.locator("textarea").count() == 0 and page.get_by_role("button", name="Save changes").count() == 0
    assert page.get_by_role("link", name=re.compile("Forget")).count() == 0
    shot(page, "memory-read-only")
    forged = page.request.post(f"/ui/memories/{reference}", form={"csrf": csrf_of(page), "content": "forged"})
    assert forged.status == 403 and "forbidden" in forged.text()
    assert page.request.post(f"/ui/memories/{reference}/forget", form={"csrf": csrf_of(page)}).status == 403
    with console.rest() as http:
        assert http.get(f"/v1/memories/{reference}").json()["content"] == "Bob owns the billing service. (note 8)"
    page.goto("/ui/conversations")
    assert "Basic" in page.get_by_role("status").inner_text()
    shot(page, "conversations-token")
    assert page.goto("/ui/access").status == 403


def test_a_bounded_token_sees_only_its_bounds(page: Any, console: Console) -> None:
    _, token = console.token("--scope", "memory:read", "--bucket", "ops")
    sign_in(page, console, token=token)
    buckets = {re.search(r"bucket (\S+)", text).group(1) for text in page.locator("ol.cards li").all_inner_texts()}
    assert buckets == {"ops"}
    assert "bounded to buckets ops" in page.locator(".who").inner_text()
    page.goto("/ui/status")
    assert page.locator("#memory-count").inner_text() == "12"


def test_changes_without_the_csrf_token_are_refused(page: Any, console: Console) -> None:
    reference = console.reference_of("Backups are kept for 35 days. (note 5)")
    sign_in(page, console, to=f"/ui/memories/{reference}")
    for form in ({"content": "no token"}, {"content": "wrong token", "csrf": "0" * 64}):
        refused = page.request.post(f"/ui/memories/{reference}", form=form)
        assert refused.status == 403 and "CSRF" in refused.text()
    assert page.request.post("/ui/sign-out", form={}).status == 403
    assert page.request.post("/ui/access/tokens", form={"scope": "memory:read"}).status == 403
    with console.rest() as http:
        assert http.get(f"/v1/memories/{reference}").json()["content"] == "Backups are kept for 35 days. (note 5)"
    page.goto(f"/ui/memories/{reference}")  # still signed in: refusals changed nothing
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/ui/sign-in?signed_out=1")
    assert page.goto(f"/ui/memories/{reference}").url.endswith(f"/ui/sign-in?next=/ui/memories/{reference}")


def test_status_page(page: Any, console: Console) -> None:
    sign_in(page, console, to="/ui/status")
    page.wait_for_selector("#saved-chart canvas")
    assert int(page.locator("#memory-count").inner_text()) >= 36
    assert page.locator("#conversation-count").inner_text() == "3"
    storage = "PostgreSQL" if backends.current.name == "postgres" else "SQLite"
    assert "all-MiniLM-L6-v2" in page.content() and storage in page.content()
    shot(page, "status")


def test_readable_at_375_px(page: Any, console: Console) -> None:
    page.set_viewport_size({"width": 375, "height": 780})
    sign_in(page, console)
    for path in ("/ui/memories", "/ui/search?q=deploy+freeze", f"/ui/conversations/{CONVERSATION}", "/ui/status"):
        page.goto(path)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), path
    page.goto("/ui/memories")
    shot(page, "memories-375", full=False)
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"


def test_sessions_end_when_the_token_is_revoked(page: Any, console: Console) -> None:
    token_id, token = console.token("--scope", "memory:read")
    sign_in(page, console, token=token)
    revoked = run_cli("token", "revoke", token_id, data_dir=console.process.data_dir)
    assert revoked.returncode == 0, revoked.stderr
    page.goto("/ui/memories")
    assert "/ui/sign-in" in page.url and "Your session has ended" in page.get_by_role("status").inner_text()


def test_bad_input_gets_a_spec_error_never_a_500(page: Any, console: Console) -> None:
    sign_in(page, console)
    csrf = csrf_of(page)
    reference = console.reference_of("Alice prefers dark mode in every editor. (note 2)")
    for path, status, code in (("/ui/memories?limit=abc", 422, "invalid_parameters"),
                               ("/ui/memories?cursor=forged", 422, "invalid_parameters"),
                               ("/ui/memories?tag=a%20b!", 422, "invalid_parameters"),
                               ("/ui/conversations/bad id", 422, "invalid_parameters"),
                               (f"/ui/conversations/{CONVERSATION}?offset=-1", 422, "invalid_parameters"),
                               (f"/ui/conversations/{CONVERSATION}?limit=5000", 422, "invalid_parameters"),
                               ("/ui/conversations?cursor=xyz", 422, "invalid_parameters"),
                               ("/ui/memories/mem_unknown", 404, "not_found"),
                               ("/ui/nowhere", 404, "not_found"),
                               ("/ui/search?q=%20%20", 422, "invalid_parameters")):
        response = page.request.get(path)
        assert response.status == status, (path, response.status, response.text()[:300])
        if code:
            assert f"<strong>{code}</strong>" in response.text(), path
    for form in ({"csrf": csrf, "metadata": "{" * 5000}, {"csrf": csrf, "content": ""},
                 {"csrf": csrf, "content": "x" * 40000}, {"csrf": csrf, "provenance": "\"text\""}):
        response = page.request.post(f"/ui/memories/{reference}", form=form)
        assert response.status in (413, 422) and "Traceback" not in response.text(), response.text()[:300]
    raw = page.request.post(f"/ui/memories/{reference}", data=json.dumps({"csrf": csrf}),
                            headers={"content-type": "application/json"})
    assert raw.status == 422 and "application/x-www-form-urlencoded" in raw.text()
    with httpx2.Client(base_url=console.base, timeout=60) as http:
        foreign = http.post("/ui/sign-in", data={"site": SITE}, headers={"Origin": "http://evil.example"})
        assert foreign.status_code == 403
        marked = http.post("/ui/sign-in", data={"site": SITE}, headers={"Sec-Fetch-Site": "cross-site"})
        assert marked.status_code == 403
        assert http.post("/ui/sign-in", data={"site": SITE, "secret": "x"}).status_code == 403  # no form token


def test_sign_in_failures_are_rate_limited(tmp_path: Path, browser: Any) -> None:
    """Its own server: once an address is limited, new sign-ins from it are refused for a minute."""
    data = tmp_path / "data"
    secret = parse_fields(run_cli("site", "create", SITE, data_dir=data).stdout)["secret"]
    with ServerProcess(data, env=server_env(MEMORY_SIGN_IN_FAILURES_PER_MINUTE="3")) as process:
        context = browser.new_context(base_url=process.base)
        try:
            tab = context.new_page()
            statuses = []
            for guess in ("a", "b", "c", "d"):
                tab.goto("/ui/sign-in")
                tab.get_by_label("Site", exact=True).fill(SITE)
                tab.get_by_label("Secret").fill(guess)
                with tab.expect_response(lambda r: r.request.method == "POST") as answer:
                    tab.get_by_role("button", name="Sign in with the site credential").click()
                statuses.append(answer.value.status)
                if answer.value.status == 429:
                    assert int(answer.value.headers["retry-after"]) >= 1
            assert statuses == [401, 401, 401, 429]
            assert "rate_limited" in tab.get_by_role("alert").inner_text()
            with httpx2.Client(base_url=process.base, timeout=60) as http:  # Basic on /v1: the same guard
                assert http.get("/v1/memories", auth=(SITE, "e")).status_code == 429
                assert http.get("/v1/memories", auth=(SITE, secret)).status_code == 429  # never used here before
        finally:
            context.close()
