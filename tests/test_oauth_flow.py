"""OAuth 2.1 sign-in with the MCP Python SDK's own client (`mcp.client.auth.OAuthClientProvider`) against a
real `memory-server serve` process: given nothing but the /mcp URL, it discovers the authorization server
(RFC 9728, RFC 8414), registers (RFC 7591), sends the owner to the consent page (answered over HTTP as a
person would: page fetched, form parsed and posted), exchanges the code with PKCE, calls tools, refreshes
and is revoked. The access token then works on /mcp and /v1 exactly as a Bearer token with its grant's
scopes and bounds would.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from memory_server.auth.principal import READ, WRITE

from conftest import wait_ready
from oauth_support import Owner, RawClient, mcp_client, oauth_client
from procs import ServerProcess, parse_fields, run_cli, server_env

pytestmark = pytest.mark.backends

SECRETS = re.compile(r"\b(?:msa|msr|msc|mcs)_[A-Za-z0-9_-]{20,}")


class Fresh:
    """A server started on an empty data directory: it created the site `default` and printed its secret."""

    def __init__(self, data_dir: Path) -> None:
        self.process = ServerProcess(
            data_dir, env=server_env(MEMORY_LOG_LEVEL="DEBUG", MEMORY_OAUTH_REQUESTS_PER_MINUTE="1000")
        )
        self.process.start()
        self.secret = parse_fields(self.process.log())["secret"]
        self.url, self.base, self.data_dir = self.process.url, self.process.base, data_dir
        self.seen: list[str] = []  # every secret the tests were handed, to look for in the server's log

    def owner(self, **choices: Any) -> Owner:
        return Owner("default", self.secret, **choices)

    def cli(self, *args: str) -> str:
        done = run_cli(*args, data_dir=self.data_dir)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def grants(self) -> dict[str, str]:
        """`token list` lines of OAuth grants, by grant id."""
        lines = self.cli("token", "list", "--site", "default").splitlines()
        return {line.split("\t")[0]: line for line in lines if line.startswith("oa_")}


@pytest.fixture(scope="module")
def fresh(storage_backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fresh]:
    server = Fresh(tmp_path_factory.mktemp("oauth-flow") / "data")
    try:
        wait_ready(server.base)
        yield server
    finally:
        server.process.kill()


async def call(client: Any, tool: str, args: dict[str, Any]) -> Any:
    return await client.call_tool(tool, args, raise_on_error=False)


async def test_a_client_given_only_the_url_signs_in_and_calls_recall(fresh: Fresh) -> None:
    owner = fresh.owner()
    auth, storage = oauth_client(fresh.url, owner, client_name="Claude-like connector")
    async with mcp_client(fresh.url, auth) as client:
        saved = await call(
            client, "remember", {"content": "Deploys are frozen in the last week of December.", "type": "decision"}
        )
        assert not saved.is_error, saved.content[0].text
        hits = await call(client, "recall", {"query": "when are deploys frozen?", "limit": 3})
        assert not hits.is_error, hits.content[0].text
        assert "Deploys are frozen" in hits.content[0].text
    assert len(owner.pages) == 1  # one trip to the consent page
    assert storage.tokens is not None and storage.tokens.access_token.startswith("msa_")
    assert storage.client_info is not None and storage.client_info.client_id
    fresh.seen += [
        storage.tokens.access_token,
        storage.tokens.refresh_token or "",
        storage.client_info.client_secret or "",
    ]
    (line,) = [line for line in fresh.grants().values() if "Claude-like connector" in line]
    assert "\tmemory:read,memory:write\tunbounded\tactive\toauth client: Claude-like connector" in line


async def test_the_metadata_documents_point_at_this_server(fresh: Fresh) -> None:
    async with httpx2.AsyncClient(timeout=30) as http:
        unauthorized = await http.post(fresh.url, json={})
        challenge = unauthorized.headers["www-authenticate"]
        assert unauthorized.status_code == 401
        assert challenge.startswith('Bearer realm="memory-server"') and 'Basic realm="memory-server"' in challenge
        metadata_url = re.search(r'resource_metadata="([^"]+)"', challenge).group(1)  # type: ignore[union-attr]
        assert metadata_url == f"{fresh.base}/.well-known/oauth-protected-resource/mcp"
        resource = (await http.get(metadata_url)).json()
        assert (await http.get(f"{fresh.base}/.well-known/oauth-protected-resource")).json() == resource
        assert resource["resource"] == fresh.url and resource["authorization_servers"] == [fresh.base]
        assert resource["scopes_supported"] == [READ, WRITE]
        server = (await http.get(f"{fresh.base}/.well-known/oauth-authorization-server")).json()
    assert server["issuer"] == fresh.base
    assert {
        server[k] for k in ("authorization_endpoint", "token_endpoint", "registration_endpoint", "revocation_endpoint")
    } == {f"{fresh.base}/{p}" for p in ("authorize", "token", "register", "revoke")}
    assert server["code_challenge_methods_supported"] == ["S256"]
    assert server["grant_types_supported"] == ["authorization_code", "refresh_token"]
    assert server["response_types_supported"] == ["code"]
    assert "none" in server["token_endpoint_auth_methods_supported"]
    assert server["authorization_response_iss_parameter_supported"] is True


async def test_an_access_token_is_a_bearer_token_with_its_grants_scopes_and_bounds(fresh: Fresh) -> None:
    async with httpx2.AsyncClient(timeout=60) as http:
        basic = fresh.process.client("default", fresh.secret)
        async with basic:
            for bucket in ("b-in", "b-out"):
                await call(basic, "remember", {"content": f"Bounded fact about otters in {bucket}.", "bucket": bucket})
        raw = await RawClient.register(http, fresh.base)
        tokens = await raw.tokens(http, fresh.owner(scopes=[READ], buckets="b-in"))
        access = tokens["access_token"]
        fresh.seen += [access, tokens["refresh_token"], raw.client_secret or ""]
        assert tokens["scope"] == READ and tokens["expires_in"] == 3600 and tokens["token_type"] == "Bearer"
        listed = await http.get(f"{fresh.base}/v1/memories", headers={"Authorization": f"Bearer {access}"})
        assert listed.status_code == 200, listed.text
        assert {m["bucket"] for m in listed.json()["memories"]} == {"b-in"}
        denied = await http.post(
            f"{fresh.base}/v1/memories", json={"content": "x"}, headers={"Authorization": f"Bearer {access}"}
        )
        assert denied.status_code == 403 and denied.json()["error"]["code"] == "forbidden"
    async with mcp_client(fresh.url, access) as client:
        hits = await call(client, "recall", {"query": "otters", "limit": 5})
        assert not hits.is_error and "b-in" in hits.content[0].text and "b-out" not in hits.content[0].text
        assert (await call(client, "remember", {"content": "y"})).content[0].text.startswith("forbidden: ")
        log_tool = await call(client, "recall_memory", {"conversation_id": "conv-oauth-0001"})
        assert log_tool.is_error and log_tool.content[0].text.startswith("unprocessable_parameters: ")
    assert any(
        "\tmemory:read\tbuckets=b-in\tactive\toauth client: Raw client" in line for line in fresh.grants().values()
    )


async def test_refresh_rotates_and_revocation_ends_the_grant(fresh: Fresh) -> None:
    async with httpx2.AsyncClient(timeout=60) as http:
        raw = await RawClient.register(http, fresh.base, token_endpoint_auth_method="client_secret_basic")
        first = await raw.tokens(http, fresh.owner())
        refreshed = await raw.refresh(http, first["refresh_token"])
        assert refreshed.status_code == 200, refreshed.text
        second = refreshed.json()
        assert second["refresh_token"] != first["refresh_token"] and second["access_token"] != first["access_token"]
        fresh.seen += [first["access_token"], first["refresh_token"], second["access_token"], second["refresh_token"]]
        for token in (first["access_token"], second["access_token"]):  # the old access token lives out its hour
            assert (await http.get(f"{fresh.base}/v1/memories", headers=bearer(token))).status_code == 200
        revoked = await raw.revoke(http, second["refresh_token"])
        assert revoked.status_code == 200
        for token in (first["access_token"], second["access_token"]):
            refused = await http.get(f"{fresh.base}/v1/memories", headers=bearer(token))
            assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]
        again = await raw.refresh(http, second["refresh_token"])
        assert again.status_code == 400 and again.json()["error"] == "invalid_grant"


async def test_token_revoke_ends_a_grant_and_the_client_signs_in_again(fresh: Fresh) -> None:
    owner = fresh.owner()
    auth, storage = oauth_client(fresh.url, owner, client_name="Revoked connector")
    async with mcp_client(fresh.url, auth) as client:
        assert not (await call(client, "recall", {"query": "deploys"})).is_error
        (grant_id,) = [g for g, line in fresh.grants().items() if "Revoked connector" in line]
        assert storage.tokens is not None
        old = storage.tokens.access_token
        assert f"revoked OAuth grant {grant_id}" in fresh.cli("token", "revoke", grant_id)
        async with httpx2.AsyncClient(timeout=30) as http:  # the next request, on any replica: refused
            assert (await http.get(f"{fresh.base}/v1/memories", headers=bearer(old))).status_code == 401
        # The SDK client gets a 401, cannot refresh a revoked grant, and sends its owner back to consent.
        assert not (await call(client, "recall", {"query": "deploys"})).is_error
    assert len(owner.pages) == 2 and storage.tokens.access_token != old
    listed = [line for line in fresh.grants().values() if "Revoked connector" in line]
    assert sorted(line.split("\t")[3].split(" ")[0] for line in listed) == ["active", "revoked"]
    assert "no active OAuth grant" in run_cli("token", "revoke", grant_id, data_dir=fresh.data_dir).stderr


async def test_deleting_the_site_ends_its_grants(tmp_path: Path) -> None:
    data = tmp_path / "data"
    created = run_cli("site", "create", "doomed", data_dir=data)
    secret = parse_fields(created.stdout)["secret"]
    with ServerProcess(data) as server:
        wait_ready(server.base)
        async with httpx2.AsyncClient(timeout=60) as http:
            raw = await RawClient.register(http, server.base)
            tokens = await raw.tokens(http, Owner("doomed", secret))
            assert (await http.get(f"{server.base}/v1/memories", headers=bearer(tokens["access_token"]))).is_success
            assert run_cli("site", "delete", "doomed", data_dir=data).returncode == 0
            gone = await http.get(f"{server.base}/v1/memories", headers=bearer(tokens["access_token"]))
            assert gone.status_code == 401
            assert (await raw.refresh(http, tokens["refresh_token"])).json()["error"] == "invalid_grant"


def test_no_secret_reaches_the_servers_log(fresh: Fresh) -> None:
    """Run last in this module: the log of every flow above, at DEBUG, holds none of what was handed out."""
    log = fresh.process.log()
    assert "GET /authorize" in log or "/authorize" in log  # the access log did record the requests
    assert fresh.seen and all(secret not in log for secret in fresh.seen if secret)
    assert not SECRETS.findall(log)
    assert (
        "code=" not in log
        and "state=" not in log
        and "?" not in "".join(line.split(" id=")[0] for line in log.splitlines() if "memory_server.access" in line)
    )


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
