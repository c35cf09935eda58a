"""The consent page in a real browser (headless Chromium driven by Playwright): the MCP SDK's OAuth client
sends its owner there, the owner signs in and allows, and the browser lands on the client's loopback
redirect URI with a code. Under the page's own Content-Security-Policy (no script; forms to here and to
the client's redirect origin only) nothing is refused, and the page will not show inside a frame.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

from conftest import free_port, wait_ready
from oauth_support import MemoryTokenStorage, mcp_client
from procs import ServerProcess, parse_fields, run_cli

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]

pytestmark = pytest.mark.skipif(shutil.which(CHROMIUM) is None, reason=f"no Chromium at {CHROMIUM}")
async_api = pytest.importorskip("playwright.async_api", reason="playwright is not installed")


class Callback:
    """The client's loopback redirect URI: a one-page server that records what it was sent."""

    def __init__(self) -> None:
        self.queries: list[dict[str, str]] = []
        callback = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                url = urlsplit(self.path)
                if url.path == "/callback":  # not the browser's own /favicon.ico
                    callback.queries.append({k: v[0] for k, v in parse_qs(url.query).items()})
                body = b"<!doctype html><title>Signed in</title><h1>You can close this window.</h1>"
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.uri = f"http://127.0.0.1:{self.server.server_address[1]}/callback"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def callback() -> Iterator[Callback]:
    served = Callback()
    try:
        yield served
    finally:
        served.close()


async def test_the_owner_signs_in_on_the_consent_page_in_chromium(tmp_path: Path, callback: Callback) -> None:
    data = tmp_path / "data"
    secret = parse_fields(run_cli("site", "create", "acme", data_dir=data).stdout)["secret"]
    refused: list[str] = []
    async with async_api.async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = await browser.new_page()
        page.on("console", lambda message: refused.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: refused.append(str(error)))
        seen: dict[str, Any] = {}

        async def redirect_handler(url: str) -> None:
            await page.goto(url)  # /authorize redirects the browser to the consent page
            seen["consent"] = page.url
            seen["title"] = await page.title()
            await page.fill("input[name=site]", "acme")
            await page.fill("input[name=secret]", secret)
            await page.uncheck("input[value='memory:write']")
            await page.fill("input[name=buckets]", "personal")
            async with page.expect_navigation(url=f"{callback.uri}*"):
                await page.click("button[value=allow]")

        async def callback_handler() -> AuthorizationCodeResult:
            query = callback.queries[-1]
            return AuthorizationCodeResult(code=query["code"], state=query["state"], iss=query.get("iss"))

        with ServerProcess(data) as server:
            wait_ready(server.base)
            metadata = OAuthClientMetadata.model_validate(
                {"client_name": "Browser test", "redirect_uris": [callback.uri]}
            )
            auth = OAuthClientProvider(
                server.url,
                metadata,
                MemoryTokenStorage(),
                redirect_handler=redirect_handler,
                callback_handler=callback_handler,
            )
            async with mcp_client(server.url, auth) as client:
                hits = await client.call_tool("recall", {"query": "anything"}, raise_on_error=False)
                assert not hits.is_error, hits.content[0].text
                written = await client.call_tool("remember", {"content": "x"}, raise_on_error=False)
                assert written.content[0].text.startswith("forbidden: ")  # memory:write was left unchecked
            assert seen["consent"].startswith(f"{server.base}/oauth/consent?request=")
            assert seen["title"] == "Sign in to memory-server"
            assert await page.text_content("h1") == "You can close this window."
            listed = run_cli("token", "list", "--site", "acme", data_dir=data).stdout
            assert "\tmemory:read\tbuckets=personal\tactive\toauth client: Browser test" in listed
            assert refused == []  # the page's CSP refused nothing it needed

            framing = await browser.new_page()
            shown = {}
            for src in (seen["consent"], f"{server.base}/healthz"):  # /healthz: proof that frames load here
                await framing.set_content(f'<iframe src="{src}"></iframe>')
                await framing.wait_for_load_state("load")
                shown[src] = framing.frames[-1].url
            assert shown[f"{server.base}/healthz"] == f"{server.base}/healthz"
            assert shown[seen["consent"]].startswith("chrome-error:")  # refused: frame-ancestors 'none', DENY
        await browser.close()
