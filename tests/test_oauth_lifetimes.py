"""Tokens that run out and tokens meant for another server, against real server processes: an access token
of a short lifetime (MEMORY_OAUTH_ACCESS_TOKEN_S) is refused once it expires and the SDK client refreshes
without asking its owner again; a token issued while the server was reached at one public URL is refused
once MEMORY_PUBLIC_URL names another (RFC 8707: its audience is the old /mcp).
"""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest
from pydantic import ValidationError

from memory_server.settings import Settings

from conftest import wait_ready
from oauth_support import Owner, RawClient, mcp_client, oauth_client, wait_for
from procs import ServerProcess, parse_fields, run_cli, server_env

pytestmark = pytest.mark.backends


def make_site(data: Path) -> str:
    created = run_cli("site", "create", "acme", data_dir=data)
    assert created.returncode == 0, created.stderr
    return parse_fields(created.stdout)["secret"]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_an_expired_access_token_is_refused_and_the_client_refreshes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    secret = make_site(data)
    with ServerProcess(data, env=server_env(MEMORY_OAUTH_ACCESS_TOKEN_S="2")) as server:
        wait_ready(server.base)
        owner = Owner("acme", secret)
        auth, storage = oauth_client(server.url, owner)
        async with mcp_client(server.url, auth) as client, httpx2.AsyncClient(timeout=30) as http:
            assert not (await client.call_tool("recall", {"query": "anything"}, raise_on_error=False)).is_error
            assert storage.tokens is not None and storage.tokens.expires_in == 2
            first = storage.tokens

            async def expired() -> bool:
                response = await http.get(f"{server.base}/v1/memories", headers=bearer(first.access_token))
                if response.status_code == 200:
                    return False
                assert response.status_code == 401 and "expired" in response.json()["error"]["message"]
                return not auth.context.is_token_valid()  # the client's own clock agrees

            await wait_for(expired, timeout=30)
            assert not (await client.call_tool("recall", {"query": "anything"}, raise_on_error=False)).is_error
        assert len(owner.pages) == 1  # refreshed, not sent back to the consent page
        assert storage.tokens.access_token != first.access_token
        assert storage.tokens.refresh_token != first.refresh_token


async def test_a_token_for_another_resource_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    secret = make_site(data)
    async with httpx2.AsyncClient(timeout=60) as http:
        with ServerProcess(data) as before:
            raw = await RawClient.register(http, before.base)
            tokens = await raw.tokens(http, Owner("acme", secret))
            assert (
                await http.get(f"{before.base}/v1/conversations", headers=bearer(tokens["access_token"]))
            ).status_code == 422  # signed in (a Bearer caller on a Basic-only route)
        port = before.port
        renamed = f"http://localhost:{port}"
        env = server_env(MEMORY_PUBLIC_URL=renamed)
        with ServerProcess(data, port=port, env=env) as after:
            wait_ready(after.base)
            refused = await http.get(f"{after.base}/v1/conversations", headers=bearer(tokens["access_token"]))
            assert refused.status_code == 401
            assert refused.json()["error"]["message"] == (
                f"this token was issued for another resource, not {renamed}/mcp"
            )
            resource = (await http.get(f"{after.base}/.well-known/oauth-protected-resource/mcp")).json()
            assert resource["resource"] == f"{renamed}/mcp" and resource["authorization_servers"] == [renamed]
            assert (await raw.refresh(http, tokens["refresh_token"])).json()["error"] == "invalid_target"
            plain = await raw.token(http, grant_type="refresh_token", refresh_token=tokens["refresh_token"])
            assert plain.json()["error"] == "invalid_grant"  # the grant stays bound to the old resource
            # A client that uses the new URL signs in afresh and gets tokens for it.
            auth, _ = oauth_client(f"{renamed}/mcp", Owner("acme", secret))
            async with mcp_client(f"{renamed}/mcp", auth) as client:
                assert not (await client.call_tool("recall", {"query": "x"}, raise_on_error=False)).is_error


def test_codes_live_at_most_a_minute() -> None:
    assert Settings().oauth_code_s == 60 and Settings().oauth_access_token_s == 3600
    with pytest.raises(ValidationError):
        Settings(oauth_code_s=61)
