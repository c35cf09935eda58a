"""The web console in a real browser (Debian's Chromium driven by Playwright) against a real server process
with the real model: sign in, list (in either date order, counted), search (scores explained), a memory's
versions and expiry, edit (supersedes and expires_at too; errors beside their fields, seen through REST),
forget, read a log as a conversation, delete one, mint, label and revoke a token, list and revoke an OAuth
grant, a read-only token's view, forged and CSRF-less changes refused, every page at 375 px. Every request
the browser makes is recorded, and each test checks that none left 127.0.0.1. Screenshots of each page (1280
and 375 px wide) go to docs/console/.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest

from procs import ServerProcess, parse_fields, run_cli, server_env
from tests import backends
from tests.conftest import wait_ready
from tests.console_support import (
    ARGS,
    BIKE,
    CONVERSATION,
    DEPLOY_NEW,
    DEPLOY_OLD,
    LOG_ITEMS,
    RELEASE,
    SITE,
    WIFI,
    Console,
    Recorded,
    csrf_of,
    eventually,
    fits,
    seed_lines,
    shot,
    sign_in,
)

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(f"Chromium is not installed at {CHROMIUM} (.ci/system-packages installs it)", allow_module_level=True)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="the playwright package is not installed (pip install -e '.[test]')"
)

pytestmark = pytest.mark.backends  # the server's authority is SQLite, then PostgreSQL

WIDE, NARROW = 1280, 375


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
    context = browser.new_context(viewport={"width": WIDE, "height": 800}, base_url=console.base)
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


def card_dates(page: Any, which: str) -> list[str]:
    """The `which` ("occurred" or "saved") date of each memory card on the page, in page order."""
    return [
        re.search(rf"{which} (\S+ \S+) UTC", text).group(1)  # type: ignore[union-attr]
        for text in page.locator("ol.cards > li").all_inner_texts()
    ]


def card(page: Any, content: str) -> Any:
    """The card of the memory with this text (not one whose badge quotes it)."""
    return page.locator("ol.cards > li", has=page.locator("a.content", has_text=content))


def summary_total(page: Any) -> int:
    return int(page.locator("#summary strong").inner_text().replace(",", ""))


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


def test_the_list_is_sorted_by_the_date_it_shows_and_counted(page: Any, console: Console) -> None:
    """A back-dated import: the notes were saved together yesterday but occurred over 90 days. The list shows
    both dates, newest occurred first unless asked for the saved order, pages on in that order, and counts
    everything that matches."""
    everything = console.memories()
    sign_in(page, console)
    assert summary_total(page) == len(everything)
    assert "newest occurred first" in page.locator("#summary").inner_text()
    occurred = card_dates(page, "occurred")
    assert len(card_dates(page, "saved")) == 20
    while (following := page.get_by_role("link", name="Next page")).count():
        page.goto(following.get_attribute("href"))  # the next page, in the same order
        occurred += card_dates(page, "occurred")
    assert len(occurred) == len(everything) and occurred == sorted(occurred, reverse=True)
    assert occurred == sorted((m["occurred_at"].replace("T", " ")[:19] for m in everything), reverse=True)

    page.goto("/ui/memories")
    page.get_by_label("Sort").select_option("created")  # applied at once, in place
    page.wait_for_url("**order=created**")
    page.wait_for_function("document.querySelector('#summary').textContent.includes('newest saved first')")
    saved = card_dates(page, "saved")
    assert saved == sorted(saved, reverse=True) and card_dates(page, "occurred") != sorted(
        card_dates(page, "occurred"), reverse=True
    )  # the import's order is not the order things happened
    following = parse_qs(urlsplit(page.get_by_role("link", name="Next page").get_attribute("href")).query)
    assert following["order"] == ["created"]
    # A page of one order never continues the other.
    refused = page.request.get(f"/ui/memories?order=occurred&cursor={following['cursor'][0]}")
    assert refused.status == 422 and "cursor" in refused.text()
    assert page.request.get("/ui/memories?order=sideways").status == 422


def test_filters_in_place_are_counted_and_cleared(page: Any, console: Console) -> None:
    ops = [m for m in console.memories() if m["bucket"] == "ops"]
    sign_in(page, console)
    page.get_by_label("Bucket").fill("ops")
    page.get_by_role("button", name="Apply filters").click()
    page.wait_for_url("**bucket=ops**")
    page.wait_for_function("document.querySelector('#summary').textContent.includes('match these filters')")
    cards = page.locator("ol.cards li")
    assert cards.count() == len(ops) and all("bucket ops" in text for text in cards.all_inner_texts())
    assert summary_total(page) == len(ops)
    clear = page.locator("#results").get_by_role("link", name="Clear filters")
    assert clear.count() == 1  # in the part of the page the filter replaced
    clear.click()
    page.wait_for_url("**/ui/memories")
    assert summary_total(page) == len(console.memories()) and "match" not in page.locator("#summary").inner_text()
    week_ago = (datetime.now(UTC) - timedelta(days=7)).date().isoformat()
    page.get_by_label("Occurred from").fill(week_ago)
    page.get_by_role("button", name="Apply filters").click()
    page.wait_for_url(f"**from={week_ago}**")
    page.wait_for_function("document.querySelector('#summary').textContent.includes('match these filters')")
    recent = [m for m in console.memories() if m["occurred_at"][:10] >= week_ago]
    assert page.locator("ol.cards li").count() == summary_total(page) == len(recent)
    page.goto("/ui/memories?to=2000-01-01")
    assert "No memory matches these filters" in page.locator("#results").inner_text()
    assert summary_total(page) == 0
    page.goto("/ui/memories?from=someday")
    assert "occurred_after" in page.get_by_role("alert").inner_text()


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
    page.goto("/ui/search?q=when+is+the+deploy+window")
    recall = page.locator("section[aria-labelledby=recall-title]")
    old = recall.locator("li", has=page.locator("a.content", has_text=DEPLOY_OLD))
    assert f"superseded by “{DEPLOY_NEW}”" in old.inner_text()  # recall ranks it, marked by its successor's text
    strict = page.locator("section[aria-labelledby=search-title]")
    assert strict.locator("li", has=page.locator("a.content", has_text=DEPLOY_OLD)).count() == 0
    first = page.locator("section[aria-labelledby=search-title] li").first
    assert f"replaces “{DEPLOY_OLD}”" in first.inner_text() and "mem_deploy_window_1" not in first.inner_text()
    shot(page, "search")


def test_scores_say_what_they_mean(page: Any, console: Console) -> None:
    """An unrelated query: recall still answers with scores near 1, search_memory with nothing. The page says
    that recall's score ranks within the answer, and shows search_memory's threshold on its column."""
    sign_in(page, console, to="/ui/search")
    page.goto("/ui/search?q=quantum+chromodynamics+on+a+lattice")
    scores = [float(s) for s in page.locator("section[aria-labelledby=recall-title] .score").all_inner_texts()]
    assert scores and max(scores) > 0.5  # a weak match ranked first still scores high
    note = page.locator("#scores-note").inner_text()
    assert "ranks its hits within this answer" in note and "not a confidence" in note
    assert "threshold 0.5" in page.locator("#threshold").inner_text()
    assert "nothing reached the threshold 0.5" in page.locator("section[aria-labelledby=search-title]").inner_text()
    page.goto("/ui/search?q=quantum+chromodynamics&min_score=0.05")
    assert "threshold 0.05" in page.locator("#threshold").inner_text()
    assert page.locator("section[aria-labelledby=search-title] li").count() > 0


def test_versions_and_expiry_show_on_a_memory_and_in_the_list(page: Any, console: Console) -> None:
    sign_in(page, console, to="/ui/memories/mem_deploy_window_1")
    assert page.get_by_role("note").inner_text().startswith(f"Superseded by “{DEPLOY_NEW}”: valid until ")
    validity = page.locator("#validity").inner_text()
    assert re.fullmatch(r"from \S+ \S+ UTC until \S+ \S+ UTC \(then superseded\)", validity)
    versions = page.locator("#versions li")
    assert versions.count() == 2 and versions.nth(0).inner_text().startswith("This memory")
    assert "current" in versions.nth(1).inner_text()
    shot(page, "memory-versions")
    page.get_by_role("link", name=DEPLOY_NEW, exact=True).click()  # forward along the chain...
    page.wait_for_url("**/ui/memories/mem_deploy_window_2")
    assert page.locator("#validity").inner_text().endswith("on (current)")
    assert page.get_by_role("note").count() == 0
    page.get_by_role("link", name=DEPLOY_OLD, exact=True).click()  # ...and back
    page.wait_for_url("**/ui/memories/mem_deploy_window_1")

    page.goto("/ui/memories?bucket=ops")
    old, new = (card(page, text) for text in (DEPLOY_OLD, DEPLOY_NEW))
    # Each badge names the memory it points to by its text (its reference is the link's title), and leads to it.
    assert f"superseded by “{DEPLOY_NEW}”, valid until" in old.inner_text()
    assert f"replaces “{DEPLOY_OLD}”" in new.inner_text()
    assert "mem_deploy_window" not in old.inner_text() + new.inner_text()
    wifi = page.locator("ol.cards > li", has_text=WIFI)
    expires = next(m["expires_at"] for m in console.memories() if m["content"] == WIFI)
    assert f"expires {expires.replace('T', ' ')[:19]} UTC" in wifi.inner_text()
    page.goto(f"/ui/memories/{console.reference_of(WIFI)}")
    assert page.locator("#expiry").inner_text().startswith(expires.replace("T", " ")[:19])
    page.goto("/ui/memories?bucket=ops")
    badge = card(page, DEPLOY_NEW).locator(".badge.replaces a")
    assert badge.get_attribute("title") == "mem_deploy_window_1"
    badge.click()
    page.wait_for_url("**/ui/memories/mem_deploy_window_1")


def test_edit_a_memory_and_see_it_through_rest(page: Any, console: Console) -> None:
    reference = console.reference_of(RELEASE)
    sign_in(page, console, to=f"/ui/memories/{reference}")
    assert page.get_by_role("link", name="Open the conversation entry it came from (seq 73)").count() == 1
    shot(page, "memory")
    edited = RELEASE.replace("every second Thursday", "every Wednesday")
    page.get_by_label("Content").fill(edited)
    page.get_by_label("Tags").fill("release, schedule")
    page.get_by_role("button", name="Save changes").click()
    page.wait_for_url("**saved=1")
    assert "Saved" in page.get_by_role("status").inner_text()
    with console.rest() as http:
        memory = http.get(f"/v1/memories/{reference}").json()
        assert memory["content"] == edited and memory["tags"] == ["release", "schedule"]
        assert memory["team"] == "platform" and memory["provenance"]["seq"] == 73  # untouched fields kept
        hits = http.post("/v1/search", json={"query": "release train every Wednesday", "limit": 1}).json()
        assert hits["results"][0]["reference"] == reference  # re-embedded with its new text
    # Two fields wrong at once: each message beside its own field, the page focused on the first.
    page.get_by_label("Metadata (a JSON object)").fill("[1, 2]")
    page.get_by_label("Provenance (a JSON object)").fill("{")
    page.get_by_role("button", name="Save changes").click()
    page.wait_for_selector("#e-metadata-error")
    assert page.locator("#e-metadata-error").inner_text() == "invalid_parameters: metadata must be a JSON object"
    assert "provenance must be a JSON object" in page.locator("#e-provenance-error").inner_text()
    assert page.evaluate("document.activeElement.id") == "e-metadata"
    assert page.locator("#e-metadata").get_attribute("aria-invalid") == "true"
    page.get_by_label("Metadata (a JSON object)").fill("{}")
    page.get_by_label("Provenance (a JSON object)").fill("{}")
    page.get_by_label("Occurred at (RFC3339)").fill("last Tuesday")
    page.get_by_role("button", name="Save changes").click()
    page.wait_for_selector("#e-occurred_at-error")
    assert "occurred_at must be an RFC3339 timestamp" in page.locator("#e-occurred_at-error").inner_text()
    field, error = page.locator("#e-occurred_at").bounding_box(), page.locator("#e-occurred_at-error").bounding_box()
    assert 0 <= error["y"] - (field["y"] + field["height"]) < 40  # right under its field
    shot(page, "memory-edit-error", full=False)


def test_supersedes_and_expires_at_are_set_in_the_edit_form(page: Any, console: Console) -> None:
    """Through the same operation as PATCH: the links appear on both memories, the expiry on the memory,
    and a blank field takes them away again."""
    newer, older = (console.reference_of(f"Customer data never leaves the EU region. (note {n})") for n in (10, 22))
    sign_in(page, console, to=f"/ui/memories/{newer}")
    page.get_by_label("Replaces (a memory's reference)").fill("mem_nope")
    page.get_by_role("button", name="Save changes").click()
    page.wait_for_selector("#e-supersedes-error")
    assert "no memory with reference 'mem_nope' to supersede" in page.locator("#e-supersedes-error").inner_text()
    page.get_by_label("Replaces (a memory's reference)").fill(older)
    page.get_by_label("Expires at (RFC3339)").fill("soon")
    page.get_by_role("button", name="Save changes").click()
    page.wait_for_selector("#e-expires_at-error")
    assert "expires_at must be an RFC3339 timestamp" in page.locator("#e-expires_at-error").inner_text()
    with console.rest() as http:  # a refused change changed nothing
        assert http.get(f"/v1/memories/{newer}").json()["supersedes"] is None
    page.get_by_label("Expires at (RFC3339)").fill("2099-01-01T00:00:00Z")
    page.get_by_role("button", name="Save changes").click()
    page.wait_for_url("**saved=1")
    assert page.locator("#expiry").inner_text().startswith("2099-01-01 00:00:00 UTC")
    assert page.locator("#versions li").count() == 2
    with console.rest() as http:
        changed = http.get(f"/v1/memories/{newer}").json()
        assert changed["supersedes"] == older and changed["expires_at"] == "2099-01-01T00:00:00.000000Z"
        assert http.get(f"/v1/memories/{older}").json()["superseded_by"] == newer
    page.get_by_label("Replaces (a memory's reference)").fill("")
    page.get_by_label("Expires at (RFC3339)").fill("")
    page.get_by_role("button", name="Save changes").click()
    page.wait_for_url("**saved=1")
    assert page.locator("#expiry").inner_text() == "never" and page.locator("#versions").count() == 0
    with console.rest() as http:
        assert http.get(f"/v1/memories/{newer}").json()["expires_at"] is None
        assert http.get(f"/v1/memories/{older}").json()["superseded_by"] is None


def test_forget_a_memory_after_confirming(page: Any, console: Console) -> None:
    reference = console.reference_of(BIKE)
    sign_in(page, console, to=f"/ui/memories/{reference}")
    page.get_by_role("link", name="Forget this memory…").click()
    page.wait_for_url("**/forget")
    shot(page, "forget")
    page.get_by_role("button", name="Forget it").click()
    page.wait_for_url("**/ui/memories?forgotten=**")
    with console.rest() as http:
        assert http.get(f"/v1/memories/{reference}").status_code == 404


def test_add_a_memory_through_remember(page: Any, console: Console) -> None:
    """The add form calls remember as MCP and REST do: defaults for blank fields, the same memory twice is one,
    a refusal shows beside its field and saves nothing (a successor dated before what it replaces, issue 43
    item 6), a read-only token gets no form and its forged POST is refused."""
    sign_in(page, console)
    page.get_by_role("link", name="Add a memory").click()
    page.wait_for_url("**/ui/memories/new")
    first = "The coffee machine on floor 2 is descaled on Mondays."
    page.get_by_label("Content").fill(first)
    page.get_by_label("Bucket").fill("office")
    page.get_by_label("Tags").fill("kitchen, facilities")
    page.get_by_label("Occurred at (RFC3339)").fill("2025-05-01T09:59:58Z")
    shot(page, "remember")
    page.get_by_role("button", name="Remember").click()
    page.wait_for_url("**added=new")
    assert page.get_by_role("status").inner_text() == "Remembered: a new memory."
    older = urlsplit(page.url).path.rsplit("/", 1)[1]
    with console.rest() as http:
        saved = http.get(f"/v1/memories/{older}").json()
        assert (saved["content"], saved["bucket"], saved["tags"], saved["type"]) == (
            first,
            "office",
            ["kitchen", "facilities"],
            "note",
        )
        hits = http.post("/v1/search", json={"query": "when is the coffee machine descaled", "limit": 1}).json()
        assert hits["results"][0]["reference"] == older  # embedded and indexed like any remember
        count = len(console.memories())
    page.goto("/ui/memories/new")
    page.get_by_label("Content").fill(first)
    page.get_by_label("Bucket").fill("office")
    page.get_by_label("Tags").fill("kitchen, facilities")
    page.get_by_label("Occurred at (RFC3339)").fill("2025-05-01T09:59:58Z")
    page.get_by_role("button", name="Remember").click()
    page.wait_for_url(f"**/ui/memories/{older}?added=existing")
    assert page.get_by_role("status").inner_text().startswith("Already remembered")
    assert len(console.memories()) == count

    # A successor that occurred before the memory it replaces: refused beside occurred_at, naming both dates.
    page.goto("/ui/memories/new")
    second = "The coffee machine on floor 2 is descaled on Fridays now."
    page.get_by_label("Content").fill(second)
    page.get_by_label("Bucket").fill("office")
    page.get_by_label("Occurred at (RFC3339)").fill("2025-05-01T09:59:57Z")
    page.get_by_label("Replaces (a memory's reference)").fill(older)
    page.get_by_role("button", name="Remember").click()
    page.wait_for_selector("#e-occurred_at-error")
    message = page.locator("#e-occurred_at-error").inner_text()
    assert message.startswith("invalid_parameters: occurred_at 2025-05-01T09:59:57.000000Z is before")
    assert "2025-05-01T09:59:58.000000Z" in message and "give an occurred_at at or after" in message
    assert page.locator("#form-error").count() == 0  # all of it beside its field
    assert page.evaluate("document.activeElement.id") == "e-occurred_at"
    assert page.get_by_label("Content").input_value() == second  # the form is kept
    assert len(console.memories()) == count
    shot(page, "remember-error", full=False)
    page.get_by_label("Occurred at (RFC3339)").fill("")  # now
    page.get_by_role("button", name="Remember").click()
    page.wait_for_url("**added=new")
    newer = urlsplit(page.url).path.rsplit("/", 1)[1]
    assert page.locator(".badge.replaces, #versions").count() >= 1
    with console.rest() as http:
        assert http.get(f"/v1/memories/{older}").json()["superseded_by"] == newer
    page.goto("/ui/memories/new")
    page.get_by_role("button", name="Remember").click()  # no content
    page.wait_for_selector("#e-content-error")
    assert page.evaluate("document.activeElement.id") == "e-content"
    missing = page.request.post("/ui/memories/new", form={"content": "no CSRF token"})
    assert missing.status == 403 and "CSRF" in missing.text()

    _, token = console.token("--scope", "memory:read")
    reader = page.context.browser.new_context(base_url=console.base)
    try:
        tab = reader.new_page()
        sign_in(tab, console, token=token)
        assert tab.get_by_role("link", name="Add a memory").count() == 0
        forged = tab.request.post("/ui/memories/new", form={"csrf": csrf_of(tab), "content": "forged"})
        assert forged.status == 403 and "forbidden" in forged.text()
    finally:
        reader.close()
    assert len(console.memories()) == count + 1
    with console.rest() as http:  # leave the shared data as it was
        for reference in (newer, older):
            assert http.delete(f"/v1/memories/{reference}").status_code == 200


def test_filters_fold_on_a_narrow_screen_and_take_iso_dates(page: Any, console: Console) -> None:
    """At 1280 px the filters are open; at 375 px they fold until opened (the summary says how many apply),
    so the list comes first. Their dates are typed and shown as YYYY-MM-DD, like every date on the page, not in
    the browser's locale."""
    sign_in(page, console)
    filters = page.locator("details.filters")
    assert filters.evaluate("d => d.open") and page.get_by_label("Bucket").is_visible()
    for label in ("Occurred from", "Occurred to"):
        field = page.get_by_label(label)
        assert field.evaluate("f => f.type") == "text" and field.get_attribute("placeholder") == "YYYY-MM-DD"
    page.get_by_label("Occurred from").fill("2000-01-01")
    page.get_by_role("button", name="Apply filters").click()
    page.wait_for_url("**from=2000-01-01**")
    page.reload()
    assert page.get_by_label("Occurred from").input_value() == "2000-01-01"
    assert page.locator("details.filters summary").inner_text() == "Filters and order (1 applied)"

    page.set_viewport_size({"width": NARROW, "height": 780})
    page.goto("/ui/memories")
    assert not filters.evaluate("d => d.open") and not page.get_by_label("Bucket").is_visible()
    first_card = page.locator("ol.cards > li").first.bounding_box()
    assert first_card["y"] < 400  # the list starts near the top, not below a screenful of fields
    page.locator("details.filters summary").click()
    assert page.get_by_label("Bucket").is_visible() and fits(page)
    page.get_by_label("Bucket").fill("ops")
    page.get_by_role("button", name="Apply filters").click()
    page.wait_for_url("**bucket=ops**")
    page.wait_for_function("document.querySelector('#summary').textContent.includes('match these filters')")
    shot(page, "memories-filters-375", full=False)
    page.reload()  # folded again, saying a filter applies
    assert not filters.evaluate("d => d.open")
    assert page.locator("details.filters summary").inner_text() == "Filters and order (1 applied)"


def test_page_through_a_three_page_conversation(page: Any, console: Console) -> None:
    sign_in(page, console, to="/ui/conversations")
    assert page.locator("tbody tr").count() == 3
    shot(page, "conversations")
    page.get_by_role("link", name=CONVERSATION).click()
    page.wait_for_url(f"**/ui/conversations/{CONVERSATION}")
    seqs = page.locator("ol.log li h2")
    assert seqs.first.inner_text().startswith("seq 0") and seqs.count() == 50
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


def test_a_log_reads_as_a_conversation_with_its_json_one_click_away(page: Any, console: Console) -> None:
    sign_in(page, console, to=f"/ui/conversations/{CONVERSATION}")
    messages = page.locator("ol.log li.message")
    assert messages.count() == 50 and page.locator("ol.log li.data").count() == 0
    first = messages.first
    assert first.locator(".speaker").inner_text() == "user"
    assert messages.nth(1).locator(".speaker").inner_text() == "assistant"
    assert first.locator(".said").inner_text() == "turn 0 of the planning chat"
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", first.locator("h2").inner_text())  # as elsewhere
    raw = first.locator("details.json pre")
    assert not raw.is_visible()
    first.locator("details.json summary").click()
    assert raw.is_visible() and '"tokens": 12' in raw.inner_text()
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height < 4000, height  # 50 items; as pretty-printed JSON they took 14,800 px
    # A message of content parts, and an item that is no message (its JSON shown as it is).
    page.goto("/ui/conversations/conv-console-0002")
    said = page.locator("ol.log li.message")
    assert said.locator(".speaker").inner_text() == "Alice"
    assert said.locator(".said").inner_text() == "Shall we ship?\n\nTests are green."
    assert '"event": "deploy"' in page.locator("ol.log li.data pre").inner_text()
    page.goto(f"/ui/conversations/{CONVERSATION}?offset=60&limit=20")
    shot(page, "conversation", full=False)


def test_delete_a_conversation_after_confirming(page: Any, console: Console) -> None:
    sign_in(page, console, to="/ui/conversations/conv-console-0003")
    page.get_by_role("link", name="Delete this conversation…").click()
    page.wait_for_url("**/conv-console-0003/delete")
    assert "Its 1 item and idempotency keys are deleted for good" in page.locator("main").inner_text()
    shot(page, "conversation-delete")
    page.get_by_role("link", name="Keep it").click()
    page.wait_for_url("**/ui/conversations/conv-console-0003")
    page.get_by_role("link", name="Delete this conversation…").click()
    page.get_by_role("button", name="Delete the conversation").click()
    page.wait_for_url("**/ui/conversations?deleted=conv-console-0003**")
    assert page.get_by_role("status").inner_text() == (
        "Deleted conversation conv-console-0003: 1 item, 0 memories unlinked."
    )
    assert page.locator("tbody tr", has_text="conv-console-0003").count() == 0
    with console.rest() as http:
        listed = http.get("/v1/conversations").json()["conversations"]
        assert "conv-console-0003" not in {c["conversation_id"] for c in listed}
    again = page.request.post("/ui/conversations/conv-console-0003/delete", form={"csrf": csrf_of(page)})
    assert again.status == 404 and "not_found" in again.text()
    # A notice is only about a conversation that is gone: a made-up link says nothing.
    page.goto(f"/ui/conversations?deleted={CONVERSATION}&items=9")
    assert page.get_by_role("status").count() == 0


def test_provenance_opens_the_log_entry(page: Any, console: Console) -> None:
    reference = console.reference_of(RELEASE.replace("every second Thursday", "every Wednesday"))
    sign_in(page, console, to=f"/ui/memories/{reference}")
    page.get_by_role("link", name=re.compile("Open the conversation entry")).click()
    page.wait_for_url("**#item-73")
    assert page.locator("#item-73 h2").inner_text().startswith("seq 73")


def test_a_token_sees_no_provenance_link_it_cannot_follow(page: Any, console: Console) -> None:
    _, token = console.token("--scope", "memory:read")
    reference = console.reference_of(RELEASE.replace("every second Thursday", "every Wednesday"))
    sign_in(page, console, token=token, to=f"/ui/memories/{reference}")
    assert page.get_by_role("link", name=re.compile("Open the conversation entry")).count() == 0
    assert "open with the site credential only" in page.locator("#log-hint").inner_text()


def test_create_label_and_revoke_a_token_and_see_its_last_use(page: Any, console: Console) -> None:
    sign_in(page, console, to="/ui/access")
    page.get_by_label("Label (what it is for)").fill("ci: nightly import")
    page.get_by_label("memory:write (remember, edit, forget)").check()
    page.get_by_label("Buckets").fill("eng")
    page.get_by_role("button", name="Create token").click()
    token = page.get_by_label("New token").input_value()
    assert token.startswith("mst_")
    page.get_by_role("button", name="Copy").click()
    page.wait_for_function("document.getElementById('new-token-status').textContent.length > 0")
    token_id = page.locator("h2#new-title").inner_text().split()[1]
    row = page.locator(f"#token-{token_id}")
    assert "ci: nightly import" in row.inner_text() and row.locator(".last-used").inner_text() == "never"
    with httpx2.Client(base_url=console.base, timeout=60) as http:
        listed = http.get("/v1/memories", headers={"Authorization": f"Bearer {token}"})
        assert listed.status_code == 200 and {m["bucket"] for m in listed.json()["memories"]} == {"eng"}
    eventually(page, "/ui/access", lambda p: p.locator(f"#token-{token_id} .last-used").inner_text() != "never")
    assert re.fullmatch(r"\S+ \S+ UTC", row.locator(".last-used").inner_text())
    assert token not in page.content()  # shown once
    page.get_by_role("button", name=f"Revoke token {token_id} (ci: nightly import)").click()
    page.wait_for_url("**revoked=**")
    assert "revoked" in page.locator(f"#token-{token_id}").inner_text()
    with httpx2.Client(base_url=console.base, timeout=60) as http:
        assert http.get("/v1/memories", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    for label in ("x" * 101, "two\nlines"):
        refused = page.request.post(
            "/ui/access/tokens", form={"csrf": csrf_of(page), "scope": "memory:read", "label": label}
        )
        assert refused.status == 422 and "label:" in refused.text()


def test_a_new_token_reads_and_writes_and_comes_with_each_clients_entry(page: Any, console: Console) -> None:
    """The form's scopes default to read and write, as `token create`'s do; the page that shows the new token
    shows what `client-config CLIENT --transport http` prints for it, with no token in any entry whose client reads
    variables (only Claude Desktop's holds it), and where the header's value goes."""
    sign_in(page, console, to="/ui/access")
    assert page.get_by_label("memory:read (recall, search, list)").is_checked()
    assert page.get_by_label("memory:write (remember, edit, forget)").is_checked()
    page.get_by_label("Label (what it is for)").fill("agent: defaults")
    page.get_by_role("button", name="Create token").click()
    token = page.get_by_label("New token").input_value()
    token_id = page.locator("h2#new-title").inner_text().split()[1]
    assert "memory:read, memory:write" in page.locator(f"#token-{token_id}").inner_text()
    with httpx2.Client(base_url=console.base, timeout=60, headers={"Authorization": f"Bearer {token}"}) as http:
        saved = http.post("/v1/memories", json={"content": "Written with a console token.", "bucket": "agents"})
        assert saved.status_code == 201, saved.text  # it can remember
        assert http.delete(f"/v1/memories/{saved.json()['reference']}").status_code == 200

    url = f"{console.base}/mcp"
    assert page.locator("#mcp-url").inner_text() == url
    for client in ("claude-desktop", "claude-code", "cursor", "vscode", "windsurf", "codex"):
        shown = page.locator(f"#entry-{client}").input_value()
        printed = run_cli(
            "client-config", client, "--transport", "http", "--token", "--site", SITE, "--url", url,
            data_dir=console.process.data_dir,
        )  # fmt: skip
        assert printed.returncode == 0, printed.stderr
        if client == "claude-desktop":  # its file expands no variables: the entry holds the token
            cli_token = re.search(r"mst_[A-Za-z0-9_-]+", printed.stdout).group(0)  # type: ignore[union-attr]
            assert f"Bearer {token}" in shown and shown == printed.stdout.replace(cli_token, token)
            continue
        assert shown == printed.stdout, client  # exactly what client-config prints
        assert token not in shown and "mst_" not in shown, client
        assert ("${input:mcp-memory-authorization}" if client == "vscode" else "MCP_MEMORY_AUTHORIZATION") in shown
    page.locator("#client-codex summary").click()
    assert page.locator("#env-codex").input_value() == f"export MCP_MEMORY_AUTHORIZATION='Bearer {token}'"
    page.locator("#client-vscode summary").click()
    assert f"Bearer {token}" in page.locator("#client-vscode").inner_text()  # pasted when VS Code asks
    page.locator("#client-claude-code summary").click()
    page.get_by_role("button", name="Copy the Claude Code entry").click()
    page.wait_for_function("document.getElementById('entry-claude-code-status').textContent.length > 0")
    assert fits(page)
    shot(page, "access-new-token")
    # Unticking a scope still works, and a refused form keeps what was ticked.
    page.goto("/ui/access")
    page.get_by_label("memory:write (remember, edit, forget)").uncheck()
    page.get_by_label("memory:read (recall, search, list)").uncheck()
    page.get_by_role("button", name="Create token").click()
    assert "a token needs at least one scope" in page.get_by_role("alert").inner_text()
    page.get_by_label("memory:write (remember, edit, forget)").uncheck()
    page.get_by_role("button", name="Create token").click()
    made = page.locator("h2#new-title").inner_text().split()[1]
    assert "memory:read" in page.locator(f"#token-{made}").inner_text()
    assert "memory:write" not in page.locator(f"#token-{made}").inner_text()


def test_oauth_grants_are_listed_with_their_client_and_revoked(page: Any, console: Console) -> None:
    access = console.oauth_grant("Claude Desktop", buckets="eng")
    sign_in(page, console, to="/ui/access")
    row = page.locator("#grants tbody tr", has_text="Claude Desktop")
    assert row.count() == 1
    text = row.inner_text()
    assert "memory:read" in text and "buckets: eng" in text and "active" in text
    # Exchanging the sign-in's code is the grant's first use.
    assert re.fullmatch(r"\S+ \S+ UTC", row.locator(".last-used").inner_text())
    grant_id = re.search(r"oa_\S+", text).group(0)  # type: ignore[union-attr]
    with httpx2.Client(base_url=console.base, timeout=60) as http:
        assert http.get("/v1/memories", headers={"Authorization": f"Bearer {access}"}).status_code == 200
    shot(page, "access")
    listed = run_cli("token", "list", "--site", SITE, data_dir=console.process.data_dir).stdout
    assert re.search(rf"{grant_id}\t.*\toauth client: Claude Desktop\tlast used: \d{{4}}-", listed)
    # Another site's owner cannot revoke it: to them it does not exist.
    other = parse_fields(run_cli("site", "create", "globex", data_dir=console.process.data_dir).stdout)["secret"]
    elsewhere = page.context.browser.new_context(base_url=console.base)
    try:
        tab = elsewhere.new_page()
        tab.goto("/ui/sign-in")
        tab.get_by_label("Site", exact=True).fill("globex")
        tab.get_by_label("Secret").fill(other)
        tab.get_by_role("button", name="Sign in with the site credential").click()
        tab.wait_for_url("**/ui/memories")
        assert tab.request.post(f"/ui/access/grants/{grant_id}/revoke", form={"csrf": csrf_of(tab)}).status == 404
    finally:
        elsewhere.close()
    page.reload()
    assert "active" in page.locator(f"#grant-{grant_id}").inner_text()
    page.get_by_role("button", name=f"Revoke OAuth grant of Claude Desktop ({grant_id})").click()
    page.wait_for_url("**revoked=oa_**")
    assert "OAuth grant" in page.get_by_role("status").inner_text()
    assert "revoked" in page.locator(f"#grant-{grant_id}").inner_text()
    with httpx2.Client(base_url=console.base, timeout=60) as http:
        assert http.get("/v1/memories", headers={"Authorization": f"Bearer {access}"}).status_code == 401
    refused = page.request.post(f"/ui/access/grants/{grant_id}/revoke", form={"csrf": csrf_of(page)})
    assert refused.status == 404  # revoked already


def test_the_cli_labels_a_token_and_lists_its_last_use(page: Any, console: Console) -> None:
    token_id, token = console.token("--scope", "memory:read", "--label", "laptop: Claude Code")
    data_dir = console.process.data_dir
    line = next(
        line
        for line in run_cli("token", "list", "--site", SITE, data_dir=data_dir).stdout.splitlines()
        if line.startswith(token_id)
    )
    assert line.endswith("\tactive\tlabel: laptop: Claude Code\tlast used: never")
    with httpx2.Client(base_url=console.base, timeout=60) as http:
        assert http.get("/v1/memories", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    sign_in(page, console, to="/ui/access")
    eventually(page, "/ui/access", lambda p: p.locator(f"#token-{token_id} .last-used").inner_text() != "never")
    assert "laptop: Claude Code" in page.locator(f"#token-{token_id}").inner_text()
    line = next(
        line
        for line in run_cli("token", "list", "--site", SITE, data_dir=data_dir).stdout.splitlines()
        if line.startswith(token_id)
    )
    assert re.search(r"\tlast used: \d{4}-\d\d-\d\dT", line)
    refused = run_cli("token", "create", "--site", SITE, "--scope", "memory:read", "--label", "a\tb", data_dir=data_dir)
    assert refused.returncode != 0 and "label: printable text only" in refused.stderr
    assert "Traceback" not in refused.stderr


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
    deleting = page.request.post(f"/ui/conversations/{CONVERSATION}/delete", form={"csrf": csrf_of(page)})
    assert deleting.status == 422 and "unprocessable_parameters" in deleting.text()
    with console.rest() as http:
        assert len(http.get(f"/v1/conversations/{CONVERSATION}/items", params={"count": 1}).json()["items"]) == 1


def test_a_bounded_token_sees_only_its_bounds(page: Any, console: Console) -> None:
    _, token = console.token("--scope", "memory:read", "--bucket", "ops")
    sign_in(page, console, token=token)
    buckets = {re.search(r"bucket (\S+)", text).group(1) for text in page.locator("ol.cards li").all_inner_texts()}
    assert buckets == {"ops"}
    ops = len([m for m in console.memories() if m["bucket"] == "ops"])
    assert summary_total(page) == ops
    assert "bounded to buckets ops" in page.locator(".who").inner_text()
    page.goto("/ui/status")
    assert page.locator("#memory-count").inner_text() == str(ops)


def test_changes_without_the_csrf_token_are_refused(page: Any, console: Console) -> None:
    reference = console.reference_of("Backups are kept for 35 days. (note 5)")
    sign_in(page, console, to=f"/ui/memories/{reference}")
    for form in ({"content": "no token"}, {"content": "wrong token", "csrf": "0" * 64}):
        refused = page.request.post(f"/ui/memories/{reference}", form=form)
        assert refused.status == 403 and "CSRF" in refused.text()
    assert page.request.post("/ui/sign-out", form={}).status == 403
    assert page.request.post("/ui/access/tokens", form={"scope": "memory:read"}).status == 403
    assert page.request.post("/ui/access/grants/oa_x/revoke", form={}).status == 403
    assert page.request.post(f"/ui/conversations/{CONVERSATION}/delete", form={}).status == 403
    with console.rest() as http:
        assert http.get(f"/v1/memories/{reference}").json()["content"] == "Backups are kept for 35 days. (note 5)"
        assert len(http.get(f"/v1/conversations/{CONVERSATION}/items", params={"count": 1}).json()["items"]) == 1
    page.goto(f"/ui/memories/{reference}")  # still signed in: refusals changed nothing
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/ui/sign-in?signed_out=1")
    assert page.goto(f"/ui/memories/{reference}").url.endswith(f"/ui/sign-in?next=/ui/memories/{reference}")


def test_status_page_charts_memories_by_the_day_they_occurred(page: Any, console: Console) -> None:
    """The import saved most memories on one day; the chart and its table count them by occurred day."""
    today = datetime.now(UTC).date()
    first = today - timedelta(days=89)
    expected: dict[str, int] = {}
    for memory in console.memories():
        if first <= date.fromisoformat(memory["occurred_at"][:10]) <= today:
            expected[memory["occurred_at"][:10]] = expected.get(memory["occurred_at"][:10], 0) + 1
    sign_in(page, console, to="/ui/status")
    page.wait_for_selector("#occurred-chart canvas")
    assert int(page.locator("#memory-count").inner_text()) >= 36
    with console.rest() as http:
        conversations = len(http.get("/v1/conversations").json()["conversations"])
    assert page.locator("#conversation-count").inner_text() == str(conversations)
    storage = "PostgreSQL" if backends.current.name == "postgres" else "SQLite"
    assert "multilingual-e5-small" in page.content() and storage in page.content()
    rows = page.evaluate(
        "Array.from(document.querySelectorAll('details table tbody tr'))"
        ".map(row => [row.cells[0].textContent, Number(row.cells[1].textContent)])"
    )
    assert dict(rows) == expected and len(expected) > 10  # not one spike on the import's day
    assert page.locator("#occurred-count").inner_text() == str(sum(expected.values()))
    legend = page.locator(".u-legend").inner_text()
    assert "--" not in legend and f"{first.isoformat()} to {today.isoformat()}" in legend
    assert f"{sum(expected.values())} in all" in legend
    shot(page, "status")
    box = page.locator("#occurred-chart .u-over").bounding_box()
    page.mouse.move(box["x"] + box["width"] - 3, box["y"] + box["height"] / 2)  # over today's bar
    page.wait_for_function(f"document.querySelector('.u-legend').textContent.includes('{today.isoformat()}')")
    assert re.search(r"\d+ memor(y|ies)", page.locator(".u-legend").inner_text())


def test_every_page_fits_375_px(page: Any, console: Console) -> None:
    """No page scrolls sideways at 375 px; the tables of tokens, grants and conversations become one card a
    row with every button in view; fields sit under their labels; an edit's error shows beside its field."""
    console.oauth_grant("A connector with a rather long name, to wrap", buckets="eng")
    console.token("--scope", "memory:read", "--team", "platform", "--label", "a long label for the narrow table")
    page.set_viewport_size({"width": NARROW, "height": 780})
    page.goto("/ui/sign-in")
    assert fits(page)
    sign_in(page, console)
    assert page.goto("/ui/nowhere").status == 404 and fits(page)  # the error page
    reference = console.reference_of("Alice prefers dark mode in every editor. (note 2)")
    pages = {
        "memories": "/ui/memories",
        "memory": "/ui/memories/mem_deploy_window_1",
        "search": "/ui/search?q=deploy+window",
        "conversations": "/ui/conversations",
        "conversation": f"/ui/conversations/{CONVERSATION}",
        "access": "/ui/access",
        "status": "/ui/status",
        "forget": f"/ui/memories/{reference}/forget",
        "delete": f"/ui/conversations/{CONVERSATION}/delete",
    }
    for name, path in pages.items():
        page.goto(path)
        assert fits(page), path
        if name in ("memories", "memory", "search", "conversations", "conversation", "access", "status"):
            shot(page, f"{name}-375", full=name in ("access", "conversations", "status", "search"))
    page.goto("/ui/access")
    for button in page.get_by_role("button", name="Revoke").all():
        box = button.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= NARROW, box
    for table in ("#tokens", "#grants"):  # every row's cells in view
        for cell in page.locator(f"{table} td").all():
            box = cell.bounding_box()
            assert box["x"] + box["width"] <= NARROW + 0.5, box
    teams, projects = page.get_by_label("Teams"), page.get_by_label("Projects")
    assert teams.bounding_box()["y"] == projects.bounding_box()["y"]  # side by side, level
    label = page.locator("label[for=t-teams]").bounding_box()
    assert 0 <= teams.bounding_box()["y"] - (label["y"] + label["height"]) < 10
    page.goto("/ui/conversations")
    for cell in page.locator("tbody td").all():
        box = cell.bounding_box()
        assert box["x"] + box["width"] <= NARROW + 0.5, box
    page.goto(f"/ui/memories/{reference}")
    page.get_by_label("Expires at (RFC3339)").fill("next week")
    page.get_by_role("button", name="Save changes").click()
    page.wait_for_selector("#e-expires_at-error")
    assert fits(page)
    field, error = page.locator("#e-expires_at").bounding_box(), page.locator("#e-expires_at-error").bounding_box()
    assert 0 <= error["y"] - (field["y"] + field["height"]) < 80  # under its field (and its hint)
    assert page.evaluate("document.activeElement.id") == "e-expires_at"  # scrolled to, focused
    assert 0 <= field["y"] < 780
    shot(page, "memory-edit-error-375", full=False)
    page.goto("/ui/memories")
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
    for path, status, code in (
        ("/ui/memories?limit=abc", 422, "invalid_parameters"),
        ("/ui/memories?cursor=forged", 422, "invalid_parameters"),
        ("/ui/memories?order=random", 422, "invalid_parameters"),
        ("/ui/memories?tag=a%20b!", 422, "invalid_parameters"),
        ("/ui/conversations/bad id", 422, "invalid_parameters"),
        ("/ui/conversations/bad id/delete", 422, "invalid_parameters"),
        (f"/ui/conversations/{CONVERSATION}?offset=-1", 422, "invalid_parameters"),
        (f"/ui/conversations/{CONVERSATION}?limit=5000", 422, "invalid_parameters"),
        ("/ui/conversations?cursor=xyz", 422, "invalid_parameters"),
        ("/ui/conversations?deleted=bad%20id&items=x", 200, ""),
        ("/ui/memories/mem_unknown", 404, "not_found"),
        ("/ui/nowhere", 404, "not_found"),
        ("/ui/search?q=%20%20", 422, "invalid_parameters"),
    ):
        response = page.request.get(path)
        assert response.status == status, (path, response.status, response.text()[:300])
        if code:
            assert f"<strong>{code}</strong>" in response.text(), path
    for form in (
        {"csrf": csrf, "metadata": "{" * 5000},
        {"csrf": csrf, "content": ""},
        {"csrf": csrf, "content": "x" * 40000},
        {"csrf": csrf, "provenance": '"text"'},
        {"csrf": csrf, "supersedes": "x" * 500},
        {"csrf": csrf, "expires_at": "9999-99-99"},
    ):
        response = page.request.post(f"/ui/memories/{reference}", form=form)
        assert response.status in (413, 422) and "Traceback" not in response.text(), response.text()[:300]
    for path in (
        "/ui/conversations/bad id/delete",
        "/ui/access/tokens/nope/revoke",
        "/ui/access/grants/oa_nope/revoke",
    ):
        response = page.request.post(path, form={"csrf": csrf})
        assert response.status in (404, 422) and "Traceback" not in response.text(), (path, response.status)
    raw = page.request.post(
        f"/ui/memories/{reference}", data=json.dumps({"csrf": csrf}), headers={"content-type": "application/json"}
    )
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
