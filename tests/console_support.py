"""Helpers of the console's browser tests (tests/test_console.py): the seed data, the server under test with
its REST and CLI, what a browser context recorded, screenshots and sign-in."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx2

from memory_server.auth.principal import READ

from oauth_support import Owner, RawClient
from procs import REPO_ROOT, ServerProcess, parse_fields, run_cli
from tests import backends

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
SHOTS = REPO_ROOT / "docs" / "console"
SITE = "acme"
CONVERSATION = "conv-console-0001"
LOG_ITEMS = 120  # three pages of 50
RELEASE = "The release train leaves every second Thursday at 10:00 UTC, after the go/no-go call."
BIKE = "My bike is in the shed behind the office."
DEPLOY_OLD = "The deploy window is Tuesdays from 14:00 to 16:00 UTC."
DEPLOY_NEW = "The deploy window moved to Thursdays from 10:00 to 12:00 UTC."
WIFI = "The guest Wi-Fi password is rotated every Friday; ask the front desk."
NOTES = 36
TOPICS = [
    "Deploys are frozen during the last week of December.",
    "The staging database is rebuilt every Monday.",
    "Alice prefers dark mode in every editor.",
    "On-call hand-over happens on Mondays at 09:00.",
    "We authenticate MCP clients with a Basic credential per site.",
    "Backups are kept for 35 days.",
    "The style guide asks for British spelling in docs.",
    "Incident reviews are blameless and written.",
    "Bob owns the billing service.",
    "Feature flags are removed two releases after launch.",
    "Customer data never leaves the EU region.",
    "The API is versioned in the path: /v1, /v2.",
]


def rfc3339(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


def seed_lines(now: datetime) -> list[dict[str, Any]]:
    """A back-dated import: NOTES memories saved together yesterday, each of which occurred on a day of the
    last 90 (the list's two orders and the status chart tell them apart), one of them taken from a log entry;
    a decision superseded by a newer one (imported with its links), a memory that expires; a conversation of
    LOG_ITEMS chat messages plus two short ones, one with a message of content parts and an item that is no
    message."""
    imported = rfc3339(now - timedelta(days=1))
    lines: list[dict[str, Any]] = [{"kind": "header", "version": 1}]
    for n in range(NOTES):
        occurred = rfc3339(now - timedelta(days=(n * n * 11 + 3 * n) % 90 + 1, hours=n % 5))
        lines.append(
            {
                "kind": "memory",
                "site": SITE,
                "content": f"{TOPICS[n % len(TOPICS)]} (note {n})",
                "type": ["fact", "decision", "note", "preference"][n % 4],
                "bucket": "eng" if n % 3 else "ops",
                "project": "memory-os",
                "tags": ["team-notes"],
                "occurred_at": occurred,
                "created_at": imported,
                "updated_at": imported,
            }
        )
    lines.append(
        {
            "kind": "memory",
            "site": SITE,
            "content": RELEASE,
            "type": "decision",
            "bucket": "eng",
            "project": "memory-os",
            "team": "platform",
            "tags": ["release"],
            "provenance": {"source": "chat", "agent": "planner", "conversation_id": CONVERSATION, "seq": 73},
        }
    )
    lines.append({"kind": "memory", "site": SITE, "content": BIKE, "bucket": "personal", "type": "note"})
    old_at, new_at = rfc3339(now - timedelta(days=40)), rfc3339(now - timedelta(days=6))
    lines.append(
        {
            "kind": "memory",
            "site": SITE,
            "reference": "mem_deploy_window_1",
            "content": DEPLOY_OLD,
            "type": "decision",
            "bucket": "ops",
            "team": "platform",
            "occurred_at": old_at,
            "superseded_by": "mem_deploy_window_2",
            "valid_to": new_at,
        }
    )
    lines.append(
        {
            "kind": "memory",
            "site": SITE,
            "reference": "mem_deploy_window_2",
            "content": DEPLOY_NEW,
            "type": "decision",
            "bucket": "ops",
            "team": "platform",
            "occurred_at": new_at,
            "supersedes": "mem_deploy_window_1",
        }
    )
    lines.append(
        {
            "kind": "memory",
            "site": SITE,
            "content": WIFI,
            "type": "fact",
            "bucket": "ops",
            "expires_at": rfc3339(now + timedelta(days=30)),
        }
    )
    recorded = rfc3339(now - timedelta(hours=3))
    for seq in range(LOG_ITEMS):
        payload = {
            "role": "user" if seq % 2 == 0 else "assistant",
            "text": f"turn {seq} of the planning chat",
            "meta": {"seq": seq, "tokens": 12 + seq % 7},
        }
        lines.append(
            {
                "kind": "log_item",
                "site": SITE,
                "conversation_id": CONVERSATION,
                "seq": seq,
                "recorded_at": recorded,
                "payload": payload,
            }
        )
    others = {
        "conv-console-0002": [
            {
                "speaker": "Alice",
                "content": [{"type": "text", "text": "Shall we ship?"}, {"type": "text", "text": "Tests are green."}],
            },
            {"event": "deploy", "status": "started"},
        ],
        "conv-console-0003": [{"role": "user", "text": "hello"}],
    }
    for other, payloads in others.items():
        for seq, payload in enumerate(payloads):
            lines.append(
                {
                    "kind": "log_item",
                    "site": SITE,
                    "conversation_id": other,
                    "seq": seq,
                    "recorded_at": recorded,
                    "payload": payload,
                }
            )
    return lines


class Console:
    """The server under test, its site secret, and helpers to reach it over REST and the CLI."""

    def __init__(self, process: ServerProcess, secret: str) -> None:
        self.process = process
        self.base = process.base
        self.secret = secret

    def rest(self, auth: Any = None) -> httpx2.Client:
        return httpx2.Client(base_url=self.base, auth=auth or (SITE, self.secret), timeout=60)

    def token(self, *args: str) -> tuple[str, str]:
        done = run_cli("token", "create", "--site", SITE, *args, data_dir=self.process.data_dir)
        assert done.returncode == 0, done.stderr
        fields = parse_fields(done.stdout)
        return fields.get("id", ""), fields["token"]

    def oauth_grant(self, client_name: str, *, buckets: str = "") -> str:
        """A connector signed in through the real OAuth flow (registration, the consent page answered by the
        site's owner, PKCE): its access token."""
        owner = Owner(SITE, self.secret, scopes=[READ], buckets=buckets)

        async def flow() -> str:
            async with httpx2.AsyncClient(timeout=60) as http:
                client = await RawClient.register(http, self.base, client_name=client_name)
                return str((await client.tokens(http, owner))["access_token"])

        found: list[str] = []
        worker = threading.Thread(target=lambda: found.append(asyncio.run(flow())))  # off the browser's loop
        worker.start()
        worker.join()
        assert found, "the OAuth flow did not finish"
        return found[0]

    def memories(self) -> list[dict[str, Any]]:
        """Every memory the site credential sees, over REST."""
        found: list[dict[str, Any]] = []
        cursor = None
        with self.rest() as http:
            while True:
                page = http.get("/v1/memories", params={"limit": 100, **({"cursor": cursor} if cursor else {})}).json()
                found += page["memories"]
                cursor = page["next_cursor"]
                if cursor is None:
                    return found

    def reference_of(self, content: str) -> str:
        found = [m["reference"] for m in self.memories() if m["content"] == content]
        assert found, content
        return str(found[0])


class Recorded:
    """Every request a browser context makes, and what its pages reported (errors, CSP violations)."""

    def __init__(self) -> None:
        self.urls: list[str] = []
        self.problems: list[str] = []

    def console(self, kind: str, text: str) -> None:
        # A page answered with 4xx (a refused sign-in, say) logs "Failed to load resource": not a problem
        # of the page; a missing asset is caught by `response`. CSP violations and script errors are.
        if kind == "error" and not text.startswith("Failed to load resource"):
            self.problems.append(text)

    def response(self, url: str, status: int) -> None:
        if "/ui/static/" in url and status >= 400:
            self.problems.append(f"{url}: {status}")

    def check(self) -> None:
        outside = [url for url in self.urls if urlsplit(url).hostname != "127.0.0.1"]
        assert not outside, f"requests left 127.0.0.1: {outside}"
        assert self.urls, "the browser made no request"
        assert not self.problems, self.problems


def shot(page: Any, name: str, *, full: bool = True) -> None:
    """A screenshot for the docs, taken on the default setup (SQLite) only."""
    if backends.current.name != "sqlite":
        return
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full)


def sign_in(page: Any, console: Console, *, token: str | None = None, to: str = "/ui/memories") -> None:
    page.goto(to)
    assert "/ui/sign-in" in page.url
    if token is None:
        page.get_by_label("Site", exact=True).fill(SITE)
        page.get_by_label("Secret").fill(console.secret)
        page.get_by_role("button", name="Sign in with the site credential").click()
    else:
        page.get_by_label("Token (mst_…)").fill(token)
        page.get_by_role("button", name="Sign in with a token").click()
    page.wait_for_url(f"**{to}**")


def eventually(page: Any, path: str, holds: Callable[[Any], bool], *, timeout: float = 30.0) -> None:
    """Load `path` again until `holds(page)`: for what the server records off the request path (a credential's
    last use), never a fixed wait."""
    deadline = time.monotonic() + timeout
    while True:
        page.goto(path)
        if holds(page):
            return
        assert time.monotonic() < deadline, f"{path}: still not as expected after {timeout} s"
        page.wait_for_timeout(200)


def fits(page: Any) -> bool:
    """Nothing on the page is wider than the window (no sideways scrolling)."""
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def csrf_of(page: Any) -> str:
    return str(page.locator("input[name=csrf]").first.get_attribute("value"))
