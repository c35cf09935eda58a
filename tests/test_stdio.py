"""The stdio transport: a local, single-user process; the site comes from configuration, no credential."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fastmcp import Client
from fastmcp.client.transports import StdioTransport

from memory_server.auth import admin as auth
from memory_server.storage.factory import open_storage

from conftest import make_settings
from procs import REPO_ROOT, server_env


def stdio_client(data_dir: Path, **env: str) -> Client:
    transport = StdioTransport(
        command=sys.executable,
        args=["-m", "memory_server", "serve", "--transport", "stdio", "--data-dir", str(data_dir)],
        env=server_env(**env),
        cwd=str(REPO_ROOT),
        keep_alive=False,
    )
    return Client(transport, timeout=60)


async def call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args, raise_on_error=False)
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def test_stdio_appends_and_recalls_without_credentials(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with stdio_client(data_dir) as client:
        tools = {tool.name for tool in await client.list_tools()}
        assert {"append_memory", "recall_memory", "replay_memory", "list_conversations"} <= tools
        ack = await call(
            client,
            "append_memory",
            {
                "conversation_id": "conv-stdio-0001",
                "items": [{"role": "user", "text": "héllo"}, {"role": "assistant", "n": 1.0}],
            },
        )
        assert (ack["first_seq"], ack["last_seq"], ack["duplicate"]) == (0, 1, False)
        recalled = await call(client, "recall_memory", {"conversation_id": "conv-stdio-0001"})
        assert [item["payload"] for item in recalled["items"]] == [
            {"role": "user", "text": "héllo"},
            {"role": "assistant", "n": 1.0},
        ]
        listed = await call(client, "list_conversations", {})
        assert [c["conversation_id"] for c in listed["conversations"]] == ["conv-stdio-0001"]
        # Errors keep their codes over stdio too.
        bad = await client.call_tool("recall_memory", {"conversation_id": "short"}, raise_on_error=False)
        assert bad.is_error and bad.content[0].text.startswith("invalid_parameters: ")

    # Written to the data directory's SQLite, for the default site.
    assert rows(data_dir, "default", "conv-stdio-0001") == [
        (0, '{"role":"user","text":"héllo"}'),
        (1, '{"role":"assistant","n":1.0}'),
    ]


async def test_stdio_acts_for_the_configured_site(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    settings = make_settings(data_dir)
    storage = open_storage(settings)
    try:
        site_id, _ = auth.ensure_site(storage.sites, "default")
        await storage.logs.append(site_id, "conv-stdio-0002", ['{"site":"default"}'], None)
    finally:
        storage.close()
    async with stdio_client(data_dir, MEMORY_STDIO_SITE="team-local") as client:
        # The default site's log is another tenant's: invisible here.
        assert (await call(client, "recall_memory", {"conversation_id": "conv-stdio-0002"}))["items"] == []
        assert (await call(client, "list_conversations", {}))["conversations"] == []
        ack = await call(client, "append_memory", {"conversation_id": "conv-stdio-0002", "items": [{"x": 1}]})
        assert ack["first_seq"] == 0
    assert rows(data_dir, "team-local", "conv-stdio-0002") == [(0, '{"x":1}')]
    assert rows(data_dir, "default", "conv-stdio-0002") == [(0, '{"site":"default"}')]


def rows(data_dir: Path, site: str, conversation_id: str) -> list[tuple[int, str]]:
    storage = open_storage(make_settings(data_dir))
    try:
        site_id = storage.sites.site_id(site)
        found = storage.logs.replay(site_id, conversation_id, 0, 1000) if site_id is not None else []
    finally:
        storage.close()
    return [(seq, payload) for seq, _, payload in found]
