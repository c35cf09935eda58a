"""Saved memories through a real MCP client over HTTP, with the real model, on both index backends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from qdrant_client import QdrantClient

from memory_server.index.qdrant import QdrantServerIndex

from tests.conftest import LiveServer, query, serve

pytestmark = pytest.mark.backends


@pytest.fixture(params=["embedded", "server"])
def mem(request: Any, settings: Any, embedder: Any) -> Iterator[LiveServer]:
    index = QdrantServerIndex(QdrantClient(":memory:"), "memories") if request.param == "server" else None
    with serve(settings, embedder, index=index) as server:
        yield server


async def call(client: Any, tool: str, **args: Any) -> Any:
    return await client.call_tool(tool, args, raise_on_error=False)


def error_code(result: Any) -> str:
    assert result.is_error, result
    assert result.structured_content is None  # an error result is its `code: message` text alone
    code, message = result.content[0].text.split(": ", 1)
    assert message
    return code


FACTS = [
    dict(
        content="We decided to authenticate MCP clients with Basic credentials per site and scoped bearer tokens.",
        type="decision",
        project="memory-os",
        team="platform",
        bucket="eng",
        tags=["auth", "mcp"],
    ),
    dict(
        content="The staging database is backed up every night at 02:00 UTC to object storage.",
        type="fact",
        project="infra",
        team="ops",
        bucket="eng",
        tags=["backup"],
    ),
    dict(
        content="Alice prefers dark roast coffee and dislikes early meetings.",
        type="preference",
        bucket="personal",
        tags=["alice"],
    ),
    dict(
        content="Our team dinner is booked at the Italian restaurant on Friday evening.",
        type="event",
        bucket="personal",
    ),
]


async def remember_all(client: Any) -> list[str]:
    refs = []
    for fact in FACTS:
        result = await call(client, "remember", **fact)
        assert not result.is_error, result
        refs.append(result.structured_content["reference"])
    return refs


async def test_recall_finds_a_paraphrase(mem: LiveServer) -> None:
    async with mem.client() as client:
        refs = await remember_all(client)
        result = await call(client, "recall", query="how do clients log in to the MCP server?", limit=2)
        hits = result.structured_content["results"]
        assert hits[0]["reference"] == refs[0]
        assert hits[0]["score"] >= hits[1]["score"]
        text = result.content[0].text
        assert text.startswith(f"[1] Reference: {refs[0]} | Type: decision | Location: - | Score: ")
        assert "Attribution: project=memory-os team=platform bucket=eng occurred_at=" in text


async def test_never_saved_topic_strict_empty_but_recall_best_effort(mem: LiveServer) -> None:
    async with mem.client() as client:
        await remember_all(client)
        query = "quantum chromodynamics lattice gauge simulations"
        strict = await call(client, "search_memory", query=query)
        assert strict.structured_content == {"results": []}
        assert strict.content[0].text == "No matching memories."
        loose = await call(client, "recall", query=query, limit=3)
        assert len(loose.structured_content["results"]) == 3


async def test_empty_store_recall_is_empty_not_error(mem: LiveServer) -> None:
    async with mem.client() as client:
        result = await call(client, "recall", query="anything at all", limit=3)
        assert not result.is_error
        assert result.structured_content == {"results": []}
        assert result.content[0].text == "No matching memories."


async def test_search_memory_filters_exclude(mem: LiveServer) -> None:
    async with mem.client() as client:
        refs = await remember_all(client)
        query = "database backups schedule"
        hit = await call(client, "search_memory", query=query, min_score=0.3)
        assert [h["reference"] for h in hit.structured_content["results"]][:1] == [refs[1]]
        for filters in (
            {"project": "memory-os"},
            {"team": "platform"},
            {"bucket": "personal"},
            {"type": "decision"},
            {"tags": ["backup", "auth"]},
        ):
            result = await call(client, "search_memory", query=query, min_score=0.0, **filters)
            assert refs[1] not in [h["reference"] for h in result.structured_content["results"]], filters
        both = await call(
            client,
            "search_memory",
            query=query,
            min_score=0.0,
            project="infra",
            team="ops",
            bucket="eng",
            type="fact",
            tags=["backup"],
        )
        assert [h["reference"] for h in both.structured_content["results"]] == [refs[1]]


async def test_recall_bucket_narrows(mem: LiveServer) -> None:
    async with mem.client() as client:
        refs = await remember_all(client)
        result = await call(client, "recall", query="authentication decision", limit=5, bucket="personal")
        got = {h["reference"] for h in result.structured_content["results"]}
        assert got == {refs[2], refs[3]}


async def test_remember_is_idempotent_and_forget_removes(mem: LiveServer) -> None:
    async with mem.client() as client:
        first = await call(client, "remember", content="The sky is blue.", bucket="b1")
        again = await call(client, "remember", content="The sky is blue.", bucket="b1")
        other = await call(client, "remember", content="The sky is blue.", bucket="b2")
        ref = first.structured_content["reference"]
        assert first.structured_content["created"] is True
        assert again.structured_content == {"reference": ref, "created": False, "similar": []}
        assert other.structured_content["created"] is True and other.structured_content["reference"] != ref
        gone = await call(client, "forget", reference=ref)
        assert gone.structured_content == {"reference": ref, "forgotten": True}
        for tool, args in (("recall", {"limit": 5}), ("search_memory", {"min_score": 0.0})):
            result = await call(client, tool, query="sky colour", **args)
            assert ref not in [h["reference"] for h in result.structured_content["results"]]
        assert error_code(await call(client, "forget", reference=ref)) == "not_found"
    assert query(mem.settings, "SELECT 1 FROM memories WHERE reference = ?", ref) == []  # gone, not just hidden


async def test_hit_carries_every_attribute(mem: LiveServer) -> None:
    async with mem.client() as client:
        await call(
            client,
            "remember",
            content="Release 2.0 ships on March 3.",
            type="event",
            location="projects/memory-os/releases",
            project="memory-os",
            team="platform",
            bucket="eng",
            tags=["release"],
            metadata={"ticket": 42, "nested": {"a": [1, 2]}},
            provenance={"source": "chat", "conversation_id": "conv-12345678", "seq": 7},
            occurred_at="2024-03-01T09:30:00+02:00",
        )
        result = await call(client, "recall", query="when is the release?", limit=1)
        hit = result.structured_content["results"][0]
        assert set(hit) == {
            "reference",
            "score",
            "type",
            "location",
            "content",
            "project",
            "team",
            "bucket",
            "tags",
            "metadata",
            "provenance",
            "occurred_at",
            "created_at",
            "supersedes",
            "superseded_by",
            "valid_to",
            "expires_at",
            "kind",
        }
        assert hit["occurred_at"] == "2024-03-01T07:30:00.000000Z"
        assert hit["metadata"] == {"ticket": 42, "nested": {"a": [1, 2]}}
        assert hit["provenance"]["seq"] == 7
        assert hit["location"] == "projects/memory-os/releases"


async def test_recall_context_budgets(mem: LiveServer, token_counter: Any) -> None:
    async with mem.client() as client:
        await remember_all(client)
        tiny = await call(client, "recall_context", query="what did we decide?", max_items=3, max_tokens=1)
        pack = tiny.structured_content
        assert pack["budget"]["used_tokens"] <= 1
        assert pack["budget"]["used_items"] == 0 and pack["budget"]["dropped"] == 3
        text = tiny.content[0].text.split("\n")
        assert text[:3] == [
            "### XMemo Context",
            "Items: 0",
            "Budget: used_items=0/3 used_tokens=0/1 dropped=3 shortened=0",
        ]
        assert text[3] == "Context:"

        big = await call(client, "recall_context", query="what did we decide?", max_items=4, max_tokens=12000)
        pack = big.structured_content
        assert pack["budget"]["used_items"] == 4 and pack["budget"]["dropped"] == 0
        assert pack["budget"]["used_tokens"] == token_counter.count(pack["context_text"]) <= 12000
        lines = big.content[0].text.split("\n")
        assert lines[0] == "### XMemo Context" and lines[1] == "Items: 4"
        assert not any(line.startswith("Budget:") for line in lines)  # nothing dropped or shortened
        assert lines[2].startswith("Reference: ") and " | Type: " in lines[2] and lines[2].endswith("Location: -")
        assert lines[6] == "Context:"
        assert "\n".join(lines[7:]) == pack["context_text"]
        assert set(pack) == {"version", "retrieval_plan", "budget", "items", "context_text"}


async def test_recall_context_shortens_the_item_that_crosses(mem: LiveServer, token_counter: Any) -> None:
    async with mem.client() as client:
        long_text = "The migration plan: " + " ".join(
            f"step {i} moves shard {i} to the new cluster." for i in range(80)
        )
        await call(client, "remember", content=long_text)
        result = await call(client, "recall_context", query="migration plan shards", max_items=1, max_tokens=40)
        budget = result.structured_content["budget"]
        assert budget == {**budget, "used_items": 1, "shortened": 1, "dropped": 0}
        assert 8 <= budget["used_tokens"] <= 40
        item = result.structured_content["items"][0]
        assert item["shortened"] is True and long_text.startswith(item["content"])
        assert "Budget: used_items=1/1 used_tokens=" in result.content[0].text


async def test_bounded_token_sees_and_writes_only_inside(mem: LiveServer) -> None:
    async with mem.client() as client:
        refs = await remember_all(client)
    _, token = mem.create_token(scopes=["memory:read", "memory:write"], buckets=["personal"])
    async with mem.client(auth=token) as client:
        result = await call(client, "recall", query="authentication decision", limit=10)
        assert {h["reference"] for h in result.structured_content["results"]} == {refs[2], refs[3]}
        result = await call(client, "search_memory", query="backups", bucket="eng", min_score=0.0)
        assert result.structured_content == {"results": []}
        assert error_code(await call(client, "remember", content="x", bucket="eng")) == "forbidden"
        assert error_code(await call(client, "remember", content="x")) == "forbidden"  # default bucket
        ok = await call(client, "remember", content="Bob likes tea.", bucket="personal")
        assert ok.structured_content["created"] is True
        assert error_code(await call(client, "forget", reference=refs[0])) == "not_found"
        pack = await call(client, "recall_context", query="anything", max_items=10)
        assert {i["reference"] for i in pack.structured_content["items"]} <= {
            refs[2],
            refs[3],
            ok.structured_content["reference"],
        }


async def test_scopes_are_enforced(mem: LiveServer) -> None:
    _, reader = mem.create_token(scopes=["memory:read"])
    _, writer = mem.create_token(scopes=["memory:write"])
    async with mem.client(auth=reader) as client:
        assert error_code(await call(client, "remember", content="nope")) == "forbidden"
        assert error_code(await call(client, "forget", reference="mem_x")) == "forbidden"
        assert not (await call(client, "recall", query="q")).is_error
    async with mem.client(auth=writer) as client:
        assert not (await call(client, "remember", content="yes")).is_error
        for tool in ("recall", "search_memory", "recall_context"):
            assert error_code(await call(client, tool, query="q")) == "forbidden"


async def test_other_sites_are_invisible(mem: LiveServer) -> None:
    async with mem.client() as client:
        await remember_all(client)
    secret = mem.create_site("other")
    import httpx2

    async with mem.client(auth=httpx2.BasicAuth("other", secret)) as client:
        for tool in ("recall", "search_memory"):
            result = (
                await call(client, tool, query="authentication", min_score=0.0)
                if tool == "search_memory"
                else await call(client, tool, query="authentication")
            )
            assert result.structured_content == {"results": []}


BAD_INPUT = [
    ("remember", {"content": ""}, "invalid_parameters"),
    ("remember", {"content": "   "}, "invalid_parameters"),
    ("remember", {"content": "x" * (32 * 1024 + 1)}, "payload_too_large"),
    ("remember", {"content": 5}, "invalid_parameters"),
    ("remember", {"content": "x", "type": "has space"}, "invalid_parameters"),
    ("remember", {"content": "x", "type": ""}, "invalid_parameters"),
    ("remember", {"content": "x", "bucket": "../etc"}, "invalid_parameters"),
    ("remember", {"content": "x", "project": "p" * 65}, "invalid_parameters"),
    ("remember", {"content": "x", "team": 3}, "invalid_parameters"),
    ("remember", {"content": "x", "team": "team\n"}, "invalid_parameters"),
    ("remember", {"content": "x", "location": "a/b\n"}, "invalid_parameters"),
    ("remember", {"content": "x", "tags": "notalist"}, "invalid_parameters"),
    ("remember", {"content": "x", "tags": ["ok", ""]}, "invalid_parameters"),
    ("remember", {"content": "x", "tags": ["t"] * 33}, "invalid_parameters"),
    ("remember", {"content": "x", "metadata": [1, 2]}, "invalid_parameters"),
    ("remember", {"content": "x", "provenance": "src"}, "invalid_parameters"),
    ("remember", {"content": "x", "occurred_at": "yesterday"}, "invalid_parameters"),
    ("remember", {"content": "x", "occurred_at": "2024-01-01T00:00:00"}, "invalid_parameters"),
    ("remember", {"content": "x", "location": "a\nb"}, "invalid_parameters"),
    ("remember", {"content": "x", "unknown": 1}, "invalid_parameters"),
    ("recall", {"query": ""}, "invalid_parameters"),
    ("recall", {"query": " \t\n"}, "invalid_parameters"),
    ("recall", {"query": "q", "limit": 0}, "invalid_parameters"),
    ("recall", {"query": "q", "limit": 51}, "invalid_parameters"),
    ("recall", {"query": "q", "limit": "5"}, "invalid_parameters"),
    ("recall", {"query": "q", "limit": 2.5}, "invalid_parameters"),
    ("recall", {"query": "q", "bucket": "no spaces"}, "invalid_parameters"),
    ("recall", {"limit": 3}, "invalid_parameters"),
    ("search_memory", {"query": ""}, "invalid_parameters"),
    ("search_memory", {"query": "q", "limit": 101}, "invalid_parameters"),
    ("search_memory", {"query": "q", "limit": -1}, "invalid_parameters"),
    ("search_memory", {"query": "q", "min_score": 1.5}, "invalid_parameters"),
    ("search_memory", {"query": "q", "min_score": "high"}, "invalid_parameters"),
    ("search_memory", {"query": "q", "tags": [1]}, "invalid_parameters"),
    ("search_memory", {"query": "q", "type": "a b"}, "invalid_parameters"),
    ("recall_context", {"query": ""}, "invalid_parameters"),
    ("recall_context", {"query": "q", "max_items": 0}, "invalid_parameters"),
    ("recall_context", {"query": "q", "max_items": 51}, "invalid_parameters"),
    ("recall_context", {"query": "q", "max_tokens": 0}, "invalid_parameters"),
    ("recall_context", {"query": "q", "max_tokens": 12001}, "invalid_parameters"),
    ("recall_context", {"query": "q", "max_tokens": True}, "invalid_parameters"),
    ("forget", {"reference": "mem_does_not_exist"}, "not_found"),
    ("forget", {"reference": ""}, "not_found"),
    ("forget", {}, "invalid_parameters"),
]


async def test_bad_input_gets_its_code_and_changes_nothing(settings: Any, embedder: Any) -> None:
    with serve(settings, embedder) as server:
        async with server.client() as client:
            await call(client, "remember", content="A single memory.")
            for tool, args, code in BAD_INPUT:
                result = await call(client, tool, **args)
                assert error_code(result) == code, (tool, args, result)
            everything = await call(client, "recall", query="memory", limit=50)
            assert [h["content"] for h in everything.structured_content["results"]] == ["A single memory."]


async def test_public_profile_hides_filters(tmp_path: Any, embedder: Any) -> None:
    from tests.conftest import make_settings

    with serve(make_settings(tmp_path / "d", tool_profile="public"), embedder) as server:
        async with server.client() as client:
            tools = {t.name: t for t in await client.list_tools()}
            assert set(tools["recall"].input_schema["properties"]) == {"query", "limit"}
            assert set(tools["recall_context"].input_schema["properties"]) == {"query", "max_items", "max_tokens"}
            result = await call(client, "recall", query="q", limit=2, bucket="x")
            assert error_code(result) == "invalid_parameters"
    with serve(make_settings(tmp_path / "e"), embedder) as server:
        async with server.client() as client:
            tools = {t.name: t for t in await client.list_tools()}
            assert {"bucket", "project", "team", "type", "tags"} <= set(tools["recall"].input_schema["properties"])
            assert tools["recall"].output_schema is None  # no tool has one: docs/spec.md, "MCP"
