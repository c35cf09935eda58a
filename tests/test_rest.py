"""The REST API under /v1, through a real HTTP client against the real app served on 127.0.0.1.

Every route's happy path and errors, the auth rules (401 + challenge, 403 scopes, 422 for Bearer on log
routes, bounded tokens, site isolation), pagination, PATCH re-embedding and re-indexing, the context pack's
budget, and that REST and MCP see the same data.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import pytest
from fastapi.routing import APIRoute

from memory_server.api.app import create_app
from memory_server.api.rest.app import RestRoute
from memory_server.auth import admin as auth
from memory_server.ranking.fusion import document_text

from tests.conftest import LiveServer, ThreadedServer, admin, free_port, index_backlog, make_settings, query, serve

PAYLOAD_LIMIT = 256 * 1024


pytestmark = pytest.mark.backends


@pytest.fixture(scope="module")
def shared(storage_backend: str, tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[LiveServer]:
    """One server for the many input-validation cases (each checks that its request changed nothing)."""
    with serve(make_settings(tmp_path_factory.mktemp("shared") / "data"), embedder) as server:
        yield server


async def memory_count(http: httpx2.AsyncClient) -> int:
    response = await http.get("/v1/memories", params={"limit": 100})
    return len(response.json()["memories"])


async def log_state(http: httpx2.AsyncClient) -> Any:
    return (await http.get("/v1/conversations", params={"limit": 1000})).json()


def client(live: LiveServer, authorization: str | None = "basic") -> httpx2.AsyncClient:
    headers = {}
    if authorization == "basic":
        headers["Authorization"] = live.basic_header()
    elif authorization is not None:
        headers["Authorization"] = authorization
    return httpx2.AsyncClient(base_url=live.base, headers=headers, timeout=60)


def bearer(live: LiveServer, scopes: Sequence[str] = ("memory:read", "memory:write"), **bounds: Any) -> str:
    _, token = live.create_token(scopes=list(scopes), **bounds)
    return f"Bearer {token}"


def error_of(response: httpx2.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "retryable"}, body
    assert body["error"]["code"] == code, body
    assert body["error"]["retryable"] is (code == "unavailable")
    message = body["error"]["message"]
    for leak in ("Traceback", "pydantic.dev", "errors.pydantic", 'File "'):
        assert leak not in message
    return message


async def remember(http: httpx2.AsyncClient, **fields: Any) -> str:
    response = await http.post("/v1/memories", json=fields)
    assert response.status_code == 201, response.text
    return response.json()["reference"]


FACTS = [
    dict(
        content="We decided to authenticate MCP clients with Basic credentials per site and scoped bearer tokens.",
        type="decision",
        project="memory-os",
        team="platform",
        bucket="eng",
        tags=["auth", "mcp"],
        location="projects/memory-os/decisions",
        provenance={"source": "meeting", "agent": "scribe"},
    ),
    dict(
        content="The staging database is backed up every night at 02:00 UTC to object storage.",
        type="fact",
        project="infra",
        team="ops",
        bucket="eng",
        tags=["backup"],
        provenance={"source": "runbook", "conversation_id": "conv-ops-1", "seq": 3},
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
        tags=["alice", "dinner"],
    ),
]


async def remember_facts(http: httpx2.AsyncClient) -> list[str]:
    return [await remember(http, **fact) for fact in FACTS]


# --- the OpenAPI document -------------------------------------------------------------------------------


async def test_openapi_is_served_without_credentials_and_documents_everything(live: LiveServer) -> None:
    async with client(live, None) as http:
        response = await http.get("/openapi.json")
    assert response.status_code == 200
    doc = response.json()
    assert doc["openapi"].startswith("3.")
    routes = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    assert routes == {
        ("/v1/memories", "post"),
        ("/v1/memories", "get"),
        ("/v1/memories/{reference}", "get"),
        ("/v1/memories/{reference}", "patch"),
        ("/v1/memories/{reference}", "delete"),
        ("/v1/recall", "post"),
        ("/v1/search", "post"),
        ("/v1/context", "post"),
        ("/v1/conversations/{conversation_id}/items", "post"),
        ("/v1/conversations/{conversation_id}/items", "get"),
        ("/v1/conversations", "get"),
        ("/v1/conversations/{conversation_id}", "delete"),
    }
    schemes = doc["components"]["securitySchemes"]
    assert schemes["basicAuth"] == {**schemes["basicAuth"], "type": "http", "scheme": "basic"}
    assert schemes["bearerAuth"] == {**schemes["bearerAuth"], "type": "http", "scheme": "bearer"}
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            expected = [{"basicAuth": []}] if "conversations" in path else [{"basicAuth": []}, {"bearerAuth": []}]
            assert op["security"] == expected, (path, method)
            for status in ("401", "403", "413", "422", "503"):
                ref = op["responses"][status]["content"]["application/json"]["schema"]["$ref"]
                assert ref.endswith("/ErrorBody")
    assert "HTTPValidationError" not in doc["components"]["schemas"]  # FastAPI's default 422 is replaced
    remember_body = doc["components"]["schemas"]["RememberParams"]["properties"]
    assert set(remember_body) == {
        "content",
        "type",
        "location",
        "project",
        "team",
        "bucket",
        "tags",
        "metadata",
        "provenance",
        "occurred_at",
        "supersedes",
        "expires_at",
    }
    memory = doc["components"]["schemas"]["Memory"]["properties"]
    assert {"reference", "created_at", "updated_at", "provenance"} <= set(memory)


def stated_bounds(name: str, schema: dict[str, Any]) -> str | None:
    """How a route's description states a numeric parameter's range and default, from the parameter's own
    schema: "`limit` (1-50, default 5)", or up to the range alone where the schema has no default."""
    ranged = next((s for s in [schema, *schema.get("anyOf", [])] if "minimum" in s), None)
    if ranged is None:
        return None
    low, high = (f"{v:g}" if isinstance(v, float) else str(v) for v in (ranged["minimum"], ranged.get("maximum")))
    span = f"`{name}` ({low}-{high}" if ranged.get("maximum") is not None else f"`{name}` (>= {low}"
    return span if schema.get("default") is None else f"{span}, default {schema['default']})"


async def test_every_route_states_what_it_does_and_its_bounds(shared: LiveServer) -> None:
    """Each /v1 operation has a summary and a description, with its configured limits filled in, and the
    description states each numeric parameter's range and default as the parameter's schema has them."""
    async with client(shared, None) as http:
        doc = (await http.get("/openapi.json")).json()
    schemas = doc["components"]["schemas"]
    operations = [(path, method, op) for path, ops in doc["paths"].items() for method, op in ops.items()]
    assert len(operations) == 12
    for path, method, op in operations:
        where = f"{method.upper()} {path}"
        assert path.startswith("/v1/"), where
        assert op.get("summary", "").strip(), where
        description = op.get("description", "")
        assert description.strip(), where
        assert not re.search(r"\{[a-z_]+\}", description), (where, description)  # every {max_payload} filled in
        parameters = {p["name"]: p["schema"] for p in op.get("parameters", []) if p["in"] == "query"}
        body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
        if "$ref" in body:
            parameters |= schemas[body["$ref"].rsplit("/", 1)[1]]["properties"]
        for name, schema in parameters.items():
            stated = stated_bounds(name, schema)
            assert stated is None or stated in description, (where, stated, description)


def test_no_route_description_comes_from_a_docstring(tmp_path: Path) -> None:
    """Route texts are written on the route decorators (summary=, description=), one way for every route; a
    handler's docstring, if it has one, is for developers and never becomes the OpenAPI description."""
    app = create_app(make_settings(tmp_path / "data"))
    try:
        rest = next(route.app for route in app.routes if isinstance(route, RestRoute))
        routes = [route for route in rest.api.state.route_table if isinstance(route, APIRoute)]
        assert len(routes) == 12
        for route in routes:
            assert route.summary and route.description, route.path
            assert route.description != inspect.cleandoc(route.endpoint.__doc__ or ""), (route.path, route.methods)
    finally:
        app.state.services.close()


# --- saved memories: remember, get, list --------------------------------------------------------------


async def test_remember_creates_then_returns_the_existing_reference(live: LiveServer) -> None:
    async with client(live) as http:
        fact = FACTS[0] | {
            "metadata": {"ticket": 42, "nested": {"a": [1, 2.5]}},
            "occurred_at": "2024-03-01T08:30:00+01:00",
        }
        first = await http.post("/v1/memories", json=fact)
        assert first.status_code == 201, first.text
        reference = first.json()["reference"]
        assert first.json() == {"reference": reference, "created": True, "similar": []}
        assert first.headers["location"] == f"/v1/memories/{reference}"
        again = await http.post("/v1/memories", json=fact)
        assert again.status_code == 200 and again.json() == {"reference": reference, "created": False, "similar": []}

        got = await http.get(f"/v1/memories/{reference}")
        assert got.status_code == 200
        memory = got.json()
        assert memory == {
            **memory,
            "reference": reference,
            "content": fact["content"],
            "type": "decision",
            "location": "projects/memory-os/decisions",
            "project": "memory-os",
            "team": "platform",
            "bucket": "eng",
            "tags": ["auth", "mcp"],
            "metadata": {"ticket": 42, "nested": {"a": [1, 2.5]}},
            "provenance": {"source": "meeting", "agent": "scribe"},
            "occurred_at": "2024-03-01T07:30:00.000000Z",
        }
        assert memory["created_at"] == memory["updated_at"]

        minimal = await http.post("/v1/memories", json={"content": "Just a note."})
        got = (await http.get(f"/v1/memories/{minimal.json()['reference']}")).json()
        assert (got["type"], got["bucket"], got["location"], got["tags"], got["metadata"]) == (
            "note",
            "default",
            None,
            [],
            {},
        )


@pytest.mark.parametrize(
    "body, status, code, fragment",
    [
        ({"content": ""}, 422, "invalid_parameters", "content"),
        ({"content": "   \n "}, 422, "invalid_parameters", "content"),
        ({}, 422, "invalid_parameters", "content: is required"),
        ({"content": 5}, 422, "invalid_parameters", "content"),
        ({"content": "x", "type": "not a word"}, 422, "invalid_parameters", "type"),
        ({"content": "x", "bucket": "b\n"}, 422, "invalid_parameters", "bucket"),
        ({"content": "x", "tags": "auth"}, 422, "invalid_parameters", "tags"),
        ({"content": "x", "tags": [f"t{i}" for i in range(33)]}, 422, "invalid_parameters", "tags"),
        ({"content": "x", "metadata": [1, 2]}, 422, "invalid_parameters", "metadata"),
        ({"content": "x", "occurred_at": "yesterday"}, 422, "invalid_parameters", "occurred_at"),
        ({"content": "x", "occurred_at": "2024-03-01T08:30:00"}, 422, "invalid_parameters", "timezone"),
        ({"content": "x", "colour": "blue"}, 422, "invalid_parameters", "colour"),
        ({"content": "x" * (32 * 1024 + 1)}, 413, "payload_too_large", "content"),
        ({"content": "x", "metadata": {"blob": "y" * (64 * 1024)}}, 413, "payload_too_large", "metadata"),
        (
            {"content": "x", "metadata": json.loads('{"a":' + "[" * 80 + "]" * 80 + "}")},
            422,
            "invalid_parameters",
            "nested deeper",
        ),
    ],
)
async def test_remember_rejects_bad_input(
    shared: LiveServer, body: dict, status: int, code: str, fragment: str
) -> None:
    async with client(shared) as http:
        before = await memory_count(http)
        message = error_of(await http.post("/v1/memories", json=body), status, code)
        assert fragment in message
        assert await memory_count(http) == before  # nothing was written


@pytest.mark.parametrize(
    "content, content_type, fragment",
    [
        (b'{"content": "x"', "application/json", "malformed JSON"),
        (b"\xff\xfe{}", "application/json", "body"),
        (b'{"content": "lone \\ud800 surrogate"}', "application/json", "surrogate"),
        (b'{"content": "x"}', "text/plain", "Content-Type: application/json"),
        (b"", "application/json", "JSON object is required"),
        (b"[" * 100_000, "application/json", "body"),
        (b'["content"]', "application/json", "body"),
        (b"NaN", "application/json", "body"),
    ],
)
async def test_malformed_bodies_are_invalid_parameters(
    shared: LiveServer, content: bytes, content_type: str, fragment: str
) -> None:
    async with client(shared) as http:
        before = (await memory_count(http), await log_state(http))
        for path in ("/v1/memories", "/v1/recall", "/v1/conversations/conv-0001/items"):
            response = await http.post(path, content=content, headers={"Content-Type": content_type})
            assert fragment in error_of(response, 422, "invalid_parameters")
        assert (await memory_count(http), await log_state(http)) == before


async def test_a_valid_surrogate_pair_is_accepted(live: LiveServer) -> None:
    async with client(live) as http:
        response = await http.post(
            "/v1/memories", content=b'{"content": "party \\ud83c\\udf89"}', headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 201
        got = await http.get(f"/v1/memories/{response.json()['reference']}")
        assert got.json()["content"] == "party \N{PARTY POPPER}"


async def test_listing_pages_cover_everything_exactly_once_newest_first(live: LiveServer) -> None:
    async with client(live) as http:
        created = [
            await remember(
                http,
                content=f"Numbered memory {i} about topic {i % 3}.",
                project=f"p{i % 2}",
                tags=[f"t{i % 3}", "all"],
            )
            for i in range(23)
        ]
        seen: list[dict[str, Any]] = []
        cursor = None
        pages = 0
        while True:
            params: dict[str, Any] = {"limit": 5}
            if cursor:
                params["cursor"] = cursor
            response = await http.get("/v1/memories", params=params)
            assert response.status_code == 200, response.text
            page = response.json()
            assert len(page["memories"]) <= 5
            seen += page["memories"]
            pages += 1
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert pages == 5
        assert [m["reference"] for m in seen] == list(reversed(created))  # each once, newest first
        stamps = [(m["created_at"]) for m in seen]
        assert stamps == sorted(stamps, reverse=True)

        # An exact multiple of the page size ends with an empty next_cursor, not an empty page.
        first = (await http.get("/v1/memories", params={"limit": 23})).json()
        assert len(first["memories"]) == 23 and first["next_cursor"] is None
        default = (await http.get("/v1/memories")).json()
        assert len(default["memories"]) == 20 and default["next_cursor"]


async def test_listing_filters(live: LiveServer) -> None:
    async with client(live) as http:
        refs = await remember_facts(http)

        async def listed(**params: Any) -> list[str]:
            response = await http.get("/v1/memories", params=params)
            assert response.status_code == 200, response.text
            return [m["reference"] for m in response.json()["memories"]]

        assert await listed(bucket="personal") == [refs[3], refs[2]]
        assert await listed(bucket="eng", team="ops") == [refs[1]]
        assert await listed(project="memory-os", type="decision") == [refs[0]]
        assert await listed(tag="alice") == [refs[3], refs[2]]
        assert await listed(tag=["alice", "dinner"]) == [refs[3]]  # every tag
        assert await listed(tag=["alice", "backup"]) == []
        assert await listed(location="projects/memory-os/decisions") == [refs[0]]
        assert await listed(provenance_source="runbook") == [refs[1]]
        assert await listed(provenance_agent="scribe") == [refs[0]]
        assert await listed(provenance_conversation_id="conv-ops-1") == [refs[1]]
        assert await listed(bucket="nothing-here") == []


@pytest.mark.parametrize(
    "params, fragment",
    [
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"cursor": "W10"}, "cursor"),
        ({"bucket": "no spaces"}, "bucket"),
        ({"tag": ["ok", "-bad"]}, "tag"),
    ],
)
async def test_listing_rejects_bad_parameters(shared: LiveServer, params: dict, fragment: str) -> None:
    async with client(shared) as http:
        assert fragment in error_of(await http.get("/v1/memories", params=params), 422, "invalid_parameters")


async def test_a_conversation_cursor_is_not_a_memory_cursor(live: LiveServer) -> None:
    async with client(live) as http:
        for i in range(3):
            await http.post(f"/v1/conversations/conv-000{i}x/items", json={"items": [{"i": i}]})
        cursor = (await http.get("/v1/conversations", params={"limit": 1})).json()["next_cursor"]
        error_of(await http.get("/v1/memories", params={"cursor": cursor}), 422, "invalid_parameters")


# --- PATCH and DELETE ---------------------------------------------------------------------------------


async def test_patch_content_re_embeds_and_re_indexes(live: LiveServer) -> None:
    async with client(live) as http:
        refs = await remember_facts(http)
        target = refs[2]
        before = (await http.get(f"/v1/memories/{target}")).json()
        await asyncio.sleep(0.002)
        response = await http.patch(
            f"/v1/memories/{target}",
            json={"content": "The production Kubernetes cluster runs in the Frankfurt region.", "bucket": "infra"},
        )
        assert response.status_code == 200, response.text
        after = response.json()
        assert after["content"].startswith("The production Kubernetes") and after["bucket"] == "infra"
        assert after["created_at"] == before["created_at"] and after["updated_at"] > before["updated_at"]
        assert after["tags"] == before["tags"] and after["type"] == "preference"  # untouched fields kept

        query = "where is the production kubernetes cluster hosted?"
        recall = (await http.post("/v1/recall", json={"query": query, "limit": 1})).json()["results"]
        assert recall[0]["reference"] == target and recall[0]["bucket"] == "infra"
        # search goes through the vector index and its payload filter: the point was re-written there.
        strict = (await http.post("/v1/search", json={"query": query, "bucket": "infra"})).json()["results"]
        assert [hit["reference"] for hit in strict] == [target]
        assert (await http.post("/v1/search", json={"query": query, "bucket": "personal"})).json()["results"] == []
        old = (await http.post("/v1/search", json={"query": "which coffee does Alice like?", "min_score": 0.4})).json()[
            "results"
        ]
        assert target not in [hit["reference"] for hit in old]
        assert (await http.get(f"/v1/memories/{target}")).json() == after
        assert backlog(live) == 0


async def test_patch_occurred_at_changes_the_embedded_date(live: LiveServer, embedder: Any) -> None:
    async with client(live) as http:
        ref = await remember(http, content="Quarterly planning offsite.", occurred_at="2023-05-08T10:00:00Z")
        before = stored_vector(live, ref)
        response = await http.patch(f"/v1/memories/{ref}", json={"occurred_at": "2021-01-02T00:00:00+02:00"})
        assert response.json()["occurred_at"] == "2021-01-01T22:00:00.000000Z"
        after = stored_vector(live, ref)
        expected = embedder.embed_documents([document_text("Quarterly planning offsite.", "2021-01-01T22:00:00Z")])[0]
        assert not np.allclose(before, after)
        assert float(after @ expected) > 0.999


async def test_patch_resets_with_null_and_keeps_what_is_absent(live: LiveServer) -> None:
    async with client(live) as http:
        ref = await remember(http, **FACTS[0], metadata={"k": 1})
        response = await http.patch(
            f"/v1/memories/{ref}",
            json={"location": None, "team": None, "tags": None, "metadata": None, "type": None, "bucket": None},
        )
        assert response.status_code == 200, response.text
        got = response.json()
        assert (got["location"], got["team"], got["tags"], got["metadata"], got["type"], got["bucket"]) == (
            None,
            None,
            [],
            {},
            "note",
            "default",
        )
        assert got["project"] == "memory-os" and got["provenance"] == FACTS[0]["provenance"]
        listed = (await http.get("/v1/memories", params={"bucket": "default", "type": "note"})).json()
        assert [m["reference"] for m in listed["memories"]] == [ref]


async def test_patch_without_changes_writes_nothing(live: LiveServer) -> None:
    async with client(live) as http:
        ref = await remember(http, **FACTS[1])
        before = (await http.get(f"/v1/memories/{ref}")).json()
        for body in ({}, {"content": FACTS[1]["content"], "tags": ["backup"]}):
            response = await http.patch(f"/v1/memories/{ref}", json=body)
            assert response.status_code == 200 and response.json() == before


@pytest.mark.parametrize(
    "body, status, code, fragment",
    [
        ({"content": None}, 422, "invalid_parameters", "content cannot be null"),
        ({"occurred_at": None}, 422, "invalid_parameters", "occurred_at cannot be null"),
        ({"content": "  "}, 422, "invalid_parameters", "content"),
        ({"reference": "mem_other"}, 422, "invalid_parameters", "reference"),
        ({"created_at": "2020-01-01T00:00:00Z"}, 422, "invalid_parameters", "created_at"),
        ({"team": "has space"}, 422, "invalid_parameters", "team"),
        ({"occurred_at": "2020-01-01"}, 422, "invalid_parameters", "occurred_at"),
        ({"content": "y" * (32 * 1024 + 1)}, 413, "payload_too_large", "content"),
    ],
)
async def test_patch_rejects_bad_changes(shared: LiveServer, body: dict, status: int, code: str, fragment: str) -> None:
    async with client(shared) as http:
        ref = await remember(http, content=f"Something to change: {json.dumps(body)[:100]}")
        before = (await http.get(f"/v1/memories/{ref}")).json()
        assert fragment in error_of(await http.patch(f"/v1/memories/{ref}", json=body), status, code)
        assert (await http.get(f"/v1/memories/{ref}")).json() == before


async def test_patch_cannot_make_two_memories_identical(live: LiveServer) -> None:
    async with client(live) as http:
        first = await remember(http, content="Deploys happen on Tuesdays.", bucket="eng")
        second = await remember(http, content="Deploys happen on Thursdays.", bucket="eng")
        message = error_of(
            await http.patch(f"/v1/memories/{second}", json={"content": "Deploys happen on Tuesdays."}),
            422,
            "invalid_parameters",
        )
        assert first in message
        # Filed elsewhere it is a different memory: allowed.
        moved = await http.patch(
            f"/v1/memories/{second}", json={"content": "Deploys happen on Tuesdays.", "bucket": "ops"}
        )
        assert moved.status_code == 200
        # And remember now finds the patched one as the existing memory.
        again = await http.post("/v1/memories", json={"content": "Deploys happen on Tuesdays.", "bucket": "ops"})
        assert again.status_code == 200 and again.json() == {"reference": second, "created": False, "similar": []}


async def test_concurrent_patches_leave_row_and_index_consistent(live: LiveServer, embedder: Any) -> None:
    async with client(live) as http:
        ref = await remember(http, content="Version zero of a frequently edited memory.", bucket="b0")
        contents = [
            f"Edit number {i}: the {word} is the team's mascot."
            for i, word in enumerate(["otter", "falcon", "badger", "heron", "lynx", "walrus"])
        ]
        responses = await asyncio.gather(
            *(
                http.patch(f"/v1/memories/{ref}", json={"content": c, "bucket": f"b{i}"})
                for i, c in enumerate(contents, start=1)
            )
        )
        assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
        final = (await http.get(f"/v1/memories/{ref}")).json()
        assert final["content"] in contents
        assert backlog(live) == 0
        question = "Which animal is the team's mascot?"
        hits = (
            await http.post("/v1/search", json={"query": question, "bucket": final["bucket"], "min_score": 0.0})
        ).json()["results"]
        assert [h["reference"] for h in hits] == [ref]
        # The index holds the final row's vector (its score is the model's similarity of the query with the
        # stored embedding) ...
        stored = stored_vector(live, ref)
        expected = embedder.similarity.text(float(embedder.embed_query(question) @ stored))
        assert 0.0 < expected < 1.0 and hits[0]["score"] == pytest.approx(expected, abs=1e-3)
        # ... and the final row's payload: no other edit's bucket finds it.
        for i in range(1, len(contents) + 1):
            if f"b{i}" != final["bucket"]:
                assert (
                    await http.post("/v1/search", json={"query": final["content"], "bucket": f"b{i}", "min_score": 0.0})
                ).json()["results"] == []


async def test_delete_then_get_is_404(live: LiveServer) -> None:
    async with client(live) as http:
        ref = await remember(http, content="A memory that will be forgotten.")
        response = await http.delete(f"/v1/memories/{ref}")
        assert response.status_code == 200 and response.json() == {"reference": ref, "forgotten": True}
        error_of(await http.get(f"/v1/memories/{ref}"), 404, "not_found")
        error_of(await http.delete(f"/v1/memories/{ref}"), 404, "not_found")
        error_of(await http.patch(f"/v1/memories/{ref}", json={"content": "back"}), 404, "not_found")
        assert (await http.post("/v1/recall", json={"query": "forgotten memory"})).json() == {"results": []}
        error_of(await http.get("/v1/memories/" + "x" * 300), 404, "not_found")


# --- recall, search, context ------------------------------------------------------------------------------


async def test_recall_and_search(live: LiveServer) -> None:
    async with client(live) as http:
        assert (await http.post("/v1/recall", json={"query": "anything"})).json() == {"results": []}
        refs = await remember_facts(http)
        response = await http.post("/v1/recall", json={"query": "how do clients log in to the MCP server?", "limit": 2})
        assert response.status_code == 200
        hits = response.json()["results"]
        assert [h["reference"] for h in hits][0] == refs[0] and len(hits) == 2
        assert hits[0]["score"] >= hits[1]["score"]
        assert set(hits[0]) == {
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
        scoped = (await http.post("/v1/recall", json={"query": "coffee", "bucket": "eng", "limit": 5})).json()
        assert {h["reference"] for h in scoped["results"]} == {refs[0], refs[1]}
        tagged = (await http.post("/v1/recall", json={"query": "coffee", "tags": ["alice", "dinner"]})).json()
        assert [h["reference"] for h in tagged["results"]] == [refs[3]]

        query = "quantum chromodynamics lattice gauge simulations"
        assert (await http.post("/v1/search", json={"query": query})).json() == {"results": []}
        assert len((await http.post("/v1/recall", json={"query": query, "limit": 3})).json()["results"]) == 3
        strict = (
            await http.post("/v1/search", json={"query": "nightly database backups", "type": "fact", "min_score": 0.3})
        ).json()["results"]
        assert [h["reference"] for h in strict] == [refs[1]]
        all_hits = (
            await http.post("/v1/search", json={"query": "nightly database backups", "min_score": 0.0, "limit": 100})
        ).json()["results"]
        assert all_hits[0]["reference"] == refs[1] and {h["reference"] for h in all_hits} <= set(refs)
        assert all(h["score"] >= 0.0 for h in all_hits)


@pytest.mark.parametrize("path", ["/v1/recall", "/v1/search", "/v1/context"])
@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"query": ""}, "query"),
        ({"query": "  \t"}, "query"),
        ({}, "query"),
        ({"query": 3}, "query"),
        ({"query": "q" * 4097}, "query"),
        ({"query": "ok", "limit": "5"}, "limit"),
        ({"query": "ok", "limit": True}, "limit"),
        ({"query": "ok", "limit": 0}, "limit"),
        ({"query": "ok", "limit": 101}, "limit"),
        ({"query": "ok", "bucket": ""}, "bucket"),
        ({"query": "ok", "min_score": 1.5}, "min_score"),
        ({"query": "ok", "max_tokens": 12001}, "max_tokens"),
        ({"query": "ok", "max_items": 0}, "max_items"),
        ({"query": "ok", "tags": ["a b"]}, "tags"),
    ],
)
async def test_query_routes_reject_bad_input(shared: LiveServer, path: str, body: dict, fragment: str) -> None:
    accepted = {
        "/v1/recall": {"query", "limit", "bucket", "tags"},
        "/v1/search": {"query", "limit", "bucket", "tags", "min_score"},
        "/v1/context": {"query", "max_items", "max_tokens", "bucket", "tags"},
    }[path]
    if path == "/v1/recall" and body.get("limit") == 101:
        fragment = "limit"  # over recall's 50 as well
    async with client(shared) as http:
        response = await http.post(path, json=body)
        message = error_of(response, 422, "invalid_parameters")
        unknown = set(body) - accepted
        assert (fragment in message) or unknown, message


async def test_context_pack_respects_its_budget(live: LiveServer, token_counter: Any) -> None:
    async with client(live) as http:
        await remember_facts(http)
        long_text = "The migration plan: " + " ".join(
            f"step {i} moves shard {i} to the new cluster." for i in range(80)
        )
        await remember(http, content=long_text)
        for max_items, max_tokens in [(1, 1), (3, 1), (2, 40), (5, 60), (8, 1500), (50, 12000)]:
            response = await http.post(
                "/v1/context",
                json={"query": "migration plan and decisions", "max_items": max_items, "max_tokens": max_tokens},
            )
            assert response.status_code == 200, response.text
            pack = response.json()
            assert set(pack) == {"version", "retrieval_plan", "budget", "items", "context_text"}
            budget = pack["budget"]
            assert budget["max_items"] == max_items and budget["max_tokens"] == max_tokens
            assert budget["used_tokens"] == token_counter.count(pack["context_text"]) <= max_tokens
            assert budget["used_items"] == len(pack["items"]) <= max_items
            assert budget["shortened"] == sum(item["shortened"] for item in pack["items"]) <= 1
            assert budget["used_items"] + budget["dropped"] == min(max_items, 5)
        shortened = (
            await http.post("/v1/context", json={"query": "migration plan shards", "max_items": 1, "max_tokens": 40})
        ).json()
        assert shortened["budget"] == {**shortened["budget"], "used_items": 1, "shortened": 1, "dropped": 0}
        assert long_text.startswith(shortened["items"][0]["content"])
        filtered = (await http.post("/v1/context", json={"query": "coffee", "bucket": "personal"})).json()
        assert filtered["retrieval_plan"]["filters"] == {"bucket": "personal"}
        assert {item["reference"] for item in filtered["items"]} <= {
            m["reference"] for m in (await http.get("/v1/memories", params={"bucket": "personal"})).json()["memories"]
        }


async def test_rest_context_equals_the_mcp_tools_structured_content(live: LiveServer) -> None:
    async with client(live) as http:
        await remember_facts(http)
        body = {"query": "what did we decide about authentication?", "max_items": 3, "max_tokens": 50}
        rest = (await http.post("/v1/context", json=body)).json()
        rest_recall = (await http.post("/v1/recall", json={"query": body["query"], "limit": 3})).json()
    async with live.client() as mcp:
        tool = await mcp.call_tool("recall_context", body, raise_on_error=False)
        recall = await mcp.call_tool("recall", {"query": body["query"], "limit": 3}, raise_on_error=False)
    assert rest == tool.structured_content
    assert rest_recall == recall.structured_content


# --- conversation logs ----------------------------------------------------------------------------------


async def test_append_then_read_tail_and_replay(live: LiveServer) -> None:
    items = [
        {"z": 1, "a": [1, 2.5, None, True], "nested": {"k": "v", "é": "ü"}},
        {"big": 2**62, "f": 1.0},
        *({"n": n} for n in range(2, 10)),
    ]
    async with client(live) as http:
        response = await http.post("/v1/conversations/conv-rest-1/items", json={"items": items[:2]})
        assert response.status_code == 201, response.text
        ack = response.json()
        assert ack == {
            **ack,
            "conversation_id": "conv-rest-1",
            "first_seq": 0,
            "last_seq": 1,
            "count": 2,
            "duplicate": False,
        }
        response = await http.post("/v1/conversations/conv-rest-1/items", json={"items": items[2:]})
        assert response.json()["first_seq"] == 2 and response.json()["last_seq"] == 9

        tail = await http.get("/v1/conversations/conv-rest-1/items")  # default: the last 50
        assert tail.status_code == 200
        got = tail.json()["items"]
        assert [i["seq"] for i in got] == list(range(10))
        assert [i["payload"] for i in got] == items
        raw = tail.text
        assert '{"z":1,"a":[1,2.5,null,true],"nested":{"k":"v","é":"ü"}}' in raw  # key order, floats, unicode
        assert '"f":1.0' in raw and f'"big":{2**62}' in raw
        assert got[0]["recorded_at"] == got[1]["recorded_at"] != got[2]["recorded_at"]

        last3 = (await http.get("/v1/conversations/conv-rest-1/items", params={"count": 3})).json()["items"]
        assert [i["seq"] for i in last3] == [7, 8, 9]
        assert (await http.get("/v1/conversations/conv-rest-1/items", params={"count": 0})).json() == {"items": []}
        page = (await http.get("/v1/conversations/conv-rest-1/items", params={"offset": 4, "limit": 3})).json()
        assert [i["seq"] for i in page["items"]] == [4, 5, 6]
        start = (await http.get("/v1/conversations/conv-rest-1/items", params={"limit": 2})).json()
        assert [i["seq"] for i in start["items"]] == [0, 1]
        rest = (await http.get("/v1/conversations/conv-rest-1/items", params={"offset": 3})).json()  # limit 100
        assert [i["seq"] for i in rest["items"]] == list(range(3, 10))
        end = (await http.get("/v1/conversations/conv-rest-1/items", params={"offset": 8, "limit": 5})).json()
        assert [i["seq"] for i in end["items"]] == [8, 9]
        huge = (await http.get("/v1/conversations/conv-rest-1/items", params={"offset": 2**70, "limit": 5})).json()
        assert huge == {"items": []}
        unknown = await http.get("/v1/conversations/never-used-1/items")
        assert unknown.status_code == 200 and unknown.json() == {"items": []}


async def test_idempotency_key_in_body_or_header(live: LiveServer) -> None:
    async with client(live) as http:
        url = "/v1/conversations/conv-idem-1/items"
        first = await http.post(url, json={"items": [{"a": 1}], "idempotency_key": "k-1"})
        assert first.status_code == 201
        retry = await http.post(url, json={"items": [{"a": 1}]}, headers={"Idempotency-Key": "k-1"})
        assert retry.status_code == 200 and retry.json() == {**first.json(), "duplicate": True}
        both = await http.post(
            url, json={"items": [{"a": 1}], "idempotency_key": "k-1"}, headers={"Idempotency-Key": "k-1"}
        )
        assert both.status_code == 200
        message = error_of(
            await http.post(
                url, json={"items": [{"b": 2}], "idempotency_key": "k-2"}, headers={"Idempotency-Key": "k-3"}
            ),
            422,
            "invalid_parameters",
        )
        assert "Idempotency-Key" in message
        error_of(
            await http.post(url, json={"items": [{"b": 2}]}, headers={"Idempotency-Key": "k" * 129}),
            422,
            "invalid_parameters",
        )
        no_key = [await http.post(url, json={"items": [{"c": 3}]}) for _ in range(2)]
        assert [r.status_code for r in no_key] == [201, 201]  # without a key a retry appends again
        items = (await http.get(url, params={"limit": 100})).json()["items"]
        assert [i["payload"] for i in items] == [{"a": 1}, {"c": 3}, {"c": 3}]


@pytest.mark.parametrize(
    "method, path, kwargs, status, code, fragment",
    [
        ("get", "/v1/conversations/short/items", {}, 422, "invalid_parameters", "conversation_id"),
        ("get", "/v1/conversations/bad.chars.here/items", {}, 422, "invalid_parameters", "conversation_id"),
        ("get", "/v1/conversations/" + "c" * 65 + "/items", {}, 422, "invalid_parameters", "conversation_id"),
        ("get", "/v1/conversations/conv-0001/items", {"params": {"count": 1001}}, 422, "invalid_parameters", "count"),
        ("get", "/v1/conversations/conv-0001/items", {"params": {"count": -1}}, 422, "invalid_parameters", "count"),
        (
            "get",
            "/v1/conversations/conv-0001/items",
            {"params": {"count": 5, "limit": 5}},
            422,
            "invalid_parameters",
            "not both",
        ),
        (
            "get",
            "/v1/conversations/conv-0001/items",
            {"params": {"count": 5, "offset": 1}},
            422,
            "invalid_parameters",
            "not both",
        ),
        ("get", "/v1/conversations/conv-0001/items", {"params": {"limit": 1001}}, 422, "invalid_parameters", "limit"),
        (
            "get",
            "/v1/conversations/conv-0001/items",
            {"params": {"limit": 5, "offset": -1}},
            422,
            "invalid_parameters",
            "offset",
        ),
        ("post", "/v1/conversations/conv-0001/items", {"json": {"items": []}}, 422, "invalid_parameters", "items"),
        ("post", "/v1/conversations/conv-0001/items", {"json": {"items": [1]}}, 422, "invalid_parameters", "items"),
        (
            "post",
            "/v1/conversations/conv-0001/items",
            {"json": {"items": {"a": 1}}},
            422,
            "invalid_parameters",
            "items",
        ),
        (
            "post",
            "/v1/conversations/conv-0001/items",
            {"json": {"items": [{}] * 1001}},
            422,
            "invalid_parameters",
            "items",
        ),
        ("post", "/v1/conversations/conv-0001/items", {"json": [{"a": 1}]}, 422, "invalid_parameters", "body"),
        (
            "post",
            "/v1/conversations/conv-0001/items",
            {"json": {"items": [{"a": json.loads("[" * 70 + "]" * 70)}]}},
            422,
            "invalid_parameters",
            "nested",
        ),
        (
            "post",
            "/v1/conversations/conv-0001/items",
            {"json": {"items": [{"blob": "x" * PAYLOAD_LIMIT}]}},
            413,
            "payload_too_large",
            "items[0]",
        ),
        ("get", "/v1/conversations", {"params": {"limit": 0}}, 422, "invalid_parameters", "limit"),
        ("get", "/v1/conversations", {"params": {"limit": 1001}}, 422, "invalid_parameters", "limit"),
        ("get", "/v1/conversations", {"params": {"cursor": "%%%"}}, 422, "invalid_parameters", "cursor"),
    ],
)
async def test_log_routes_reject_bad_input(
    shared: LiveServer, method: str, path: str, kwargs: dict, status: int, code: str, fragment: str
) -> None:
    async with client(shared) as http:
        before = await log_state(http)
        response = await http.request(method.upper(), path, **kwargs)
        assert fragment in error_of(response, status, code)
        assert await log_state(http) == before  # nothing written


async def test_list_conversations_pages_newest_activity_first(live: LiveServer) -> None:
    async with client(live) as http:
        ids = [f"conv-list-{i:02d}" for i in range(7)]
        for cid in ids:
            await http.post(f"/v1/conversations/{cid}/items", json={"items": [{"cid": cid}]})
        await http.post(f"/v1/conversations/{ids[0]}/items", json={"items": [{"again": True}]})
        seen, cursor = [], None
        while True:
            params: dict[str, Any] = {"limit": 3, **({"cursor": cursor} if cursor else {})}
            page = (await http.get("/v1/conversations", params=params)).json()
            seen += page["conversations"]
            cursor = page["next_cursor"]
            if not cursor:
                break
        assert [c["conversation_id"] for c in seen] == [ids[0], *reversed(ids[1:])]
        assert seen[0]["item_count"] == 2 and all(c["item_count"] == 1 for c in seen[1:])


async def test_rest_and_mcp_see_the_same_data(live: LiveServer) -> None:
    async with client(live) as http, live.client() as mcp:
        await http.post(
            "/v1/conversations/conv-shared-1/items",
            json={"items": [{"role": "user", "text": "hi"}, {"role": "assistant", "text": "hello"}]},
        )
        replay = await mcp.call_tool("replay_memory", {"conversation_id": "conv-shared-1", "limit": 10})
        rest_items = (await http.get("/v1/conversations/conv-shared-1/items", params={"limit": 10})).json()
        assert replay.structured_content == rest_items
        assert [i["payload"]["text"] for i in rest_items["items"]] == ["hi", "hello"]

        await mcp.call_tool(
            "append_memory",
            {"conversation_id": "conv-shared-1", "items": [{"from": "mcp"}], "idempotency_key": "mcp-key"},
        )
        tail = (await http.get("/v1/conversations/conv-shared-1/items", params={"count": 1})).json()
        assert tail["items"][0] == {**tail["items"][0], "seq": 2, "payload": {"from": "mcp"}}
        dup = await http.post(
            "/v1/conversations/conv-shared-1/items",
            json={"items": [{"from": "mcp"}]},
            headers={"Idempotency-Key": "mcp-key"},
        )
        assert dup.status_code == 200 and dup.json()["duplicate"] is True  # keys are shared across surfaces
        listed = await mcp.call_tool("list_conversations", {})
        assert listed.structured_content == (await http.get("/v1/conversations")).json()

        made = await mcp.call_tool("remember", {"content": "Remembered over MCP, read over REST.", "bucket": "x"})
        reference = made.structured_content["reference"]
        got = (await http.get(f"/v1/memories/{reference}")).json()
        assert got["content"] == "Remembered over MCP, read over REST." and got["bucket"] == "x"
        again = await http.post("/v1/memories", json={"content": "Remembered over MCP, read over REST.", "bucket": "x"})
        assert again.json() == {"reference": reference, "created": False, "similar": []}
        await http.patch(f"/v1/memories/{reference}", json={"content": "Patched over REST, recalled over MCP."})
        recall = await mcp.call_tool("recall", {"query": "patched over REST", "limit": 1})
        assert recall.structured_content["results"][0]["content"] == "Patched over REST, recalled over MCP."
        await mcp.call_tool("forget", {"reference": reference})
        error_of(await http.get(f"/v1/memories/{reference}"), 404, "not_found")


# --- authentication, scopes, bounds, tenancy ---------------------------------------------------------------

ALL_ROUTES = [
    ("POST", "/v1/memories", {"json": {"content": "x"}}),
    ("GET", "/v1/memories", {}),
    ("GET", "/v1/memories/mem_x", {}),
    ("PATCH", "/v1/memories/mem_x", {"json": {"content": "x"}}),
    ("DELETE", "/v1/memories/mem_x", {}),
    ("POST", "/v1/recall", {"json": {"query": "x"}}),
    ("POST", "/v1/search", {"json": {"query": "x"}}),
    ("POST", "/v1/context", {"json": {"query": "x"}}),
    ("POST", "/v1/conversations/conv-0001/items", {"json": {"items": [{"a": 1}]}}),
    ("GET", "/v1/conversations/conv-0001/items", {}),
    ("GET", "/v1/conversations", {}),
    ("DELETE", "/v1/conversations/conv-0001", {}),
    ("GET", "/v1/no-such-route", {}),
]
LOG_ROUTES = [route for route in ALL_ROUTES if "/conversations" in route[1]]


@pytest.fixture
def many_failures(tmp_path: Path, embedder: Any) -> Iterator[LiveServer]:
    """A server that does not limit failed sign-ins: the test below fails dozens on purpose (the limit has
    its own tests in tests/test_sign_in.py)."""
    with serve(make_settings(tmp_path / "data", sign_in_failures_per_minute=100_000), embedder) as server:
        yield server


async def test_bad_credentials_get_401_with_a_challenge_on_every_route(many_failures: LiveServer) -> None:
    live = many_failures
    for authorization in (
        None,
        live.basic_header(secret="wrong"),
        live.basic_header(site="nobody"),
        "Bearer mst_not-a-real-token",
        "Bearer",
        "Digest abc",
        "Basic !!!",
    ):
        async with client(live, authorization) as http:
            for method, path, kwargs in ALL_ROUTES:
                response = await http.request(method, path, **kwargs)
                error_of(response, 401, "unauthorized")
                challenge = response.headers["www-authenticate"]
                assert "Basic" in challenge and "Bearer" in challenge
    async with client(live) as http:
        assert (await http.get("/v1/conversations")).json()["conversations"] == []  # nothing ran


async def test_revoked_token_gets_401(live: LiveServer) -> None:
    token_id, token = live.create_token(scopes=["memory:read"])
    async with client(live, f"Bearer {token}") as http:
        assert (await http.get("/v1/memories")).status_code == 200
        admin(live.settings, lambda sites: auth.revoke_token(sites, token_id))
        error_of(await http.get("/v1/memories"), 401, "unauthorized")


async def test_bearer_on_log_routes_is_unprocessable_parameters(live: LiveServer) -> None:
    async with client(live, bearer(live)) as http:
        for method, path, kwargs in LOG_ROUTES:
            message = error_of(await http.request(method, path, **kwargs), 422, "unprocessable_parameters")
            assert "Basic" in message
        # Even with bad parameters the answer is that Basic is required.
        error_of(await http.get("/v1/conversations/bad/items", params={"count": -5}), 422, "unprocessable_parameters")
        error_of(await http.get("/v1/conversations", params={"limit": 0}), 422, "unprocessable_parameters")
    async with client(live) as http:
        assert (await http.get("/v1/conversations")).json()["conversations"] == []


async def test_scopes_are_enforced_with_403(live: LiveServer) -> None:
    async with client(live) as http:
        ref = await remember(http, content="A memory owned by the site.")
    async with client(live, bearer(live, ["memory:read"])) as reader:
        assert (await reader.get(f"/v1/memories/{ref}")).status_code == 200
        assert (await reader.get("/v1/memories")).status_code == 200
        assert (await reader.post("/v1/recall", json={"query": "memory"})).status_code == 200
        assert "memory:write" in error_of(await reader.post("/v1/memories", json={"content": "new"}), 403, "forbidden")
        error_of(await reader.patch(f"/v1/memories/{ref}", json={"content": "changed"}), 403, "forbidden")
        error_of(await reader.delete(f"/v1/memories/{ref}"), 403, "forbidden")
    async with client(live, bearer(live, ["memory:write"])) as writer:
        assert (await writer.post("/v1/memories", json={"content": "written blind"})).status_code == 201
        # Saying a memory of the site again: saved, but a credential that cannot read learns nothing of it.
        async with client(live) as http:
            await remember(http, content="Tom Berg's manager is Maria Lopez.")
            told = await http.post("/v1/memories", json={"content": "Org chart: Tom Berg reports to Maria Lopez."})
            assert len(told.json()["similar"]) == 1
        again = await writer.post(
            "/v1/memories", json={"content": "Tom Berg reports to Maria Lopez, per the org chart."}
        )
        assert again.status_code == 201 and again.json()["similar"] == []
        for method, path, kwargs in [
            ("GET", "/v1/memories", {}),
            ("GET", f"/v1/memories/{ref}", {}),
            ("POST", "/v1/recall", {"json": {"query": "x"}}),
            ("POST", "/v1/search", {"json": {"query": "x"}}),
            ("POST", "/v1/context", {"json": {"query": "x"}}),
        ]:
            assert "memory:read" in error_of(await writer.request(method, path, **kwargs), 403, "forbidden")
    async with client(live) as http:
        assert (await http.get(f"/v1/memories/{ref}")).json()["content"] == "A memory owned by the site."


async def test_bounded_token_sees_and_writes_only_inside_its_bounds(live: LiveServer) -> None:
    async with client(live) as http:
        refs = await remember_facts(http)  # eng: 0, 1; personal: 2, 3
    inside, outside = {refs[2], refs[3]}, {refs[0], refs[1]}
    async with client(live, bearer(live, buckets=["personal"])) as token:
        listed = (await token.get("/v1/memories", params={"limit": 100})).json()["memories"]
        assert {m["reference"] for m in listed} == inside
        assert (await token.get("/v1/memories", params={"bucket": "eng"})).json()["memories"] == []
        for ref in outside:
            error_of(await token.get(f"/v1/memories/{ref}"), 404, "not_found")
            error_of(await token.patch(f"/v1/memories/{ref}", json={"content": "mine now"}), 404, "not_found")
            error_of(await token.delete(f"/v1/memories/{ref}"), 404, "not_found")
        for path, body in [
            ("/v1/recall", {"query": "authentication decision", "limit": 10}),
            ("/v1/search", {"query": "authentication decision", "min_score": 0.0, "limit": 100}),
            ("/v1/context", {"query": "authentication decision"}),
        ]:
            found = (await token.post(path, json=body)).json()
            hits = found.get("results", found.get("items"))
            assert hits and {h["reference"] for h in hits} <= inside
        assert (await token.post("/v1/recall", json={"query": "x", "bucket": "eng"})).json() == {"results": []}
        error_of(await token.post("/v1/memories", json={"content": "outside", "bucket": "eng"}), 403, "forbidden")
        error_of(await token.post("/v1/memories", json={"content": "no bucket means default"}), 403, "forbidden")
        assert (await token.post("/v1/memories", json={"content": "inside", "bucket": "personal"})).status_code == 201
        error_of(await token.patch(f"/v1/memories/{refs[2]}", json={"bucket": "eng"}), 403, "forbidden")
        error_of(await token.patch(f"/v1/memories/{refs[2]}", json={"bucket": None}), 403, "forbidden")
        assert (await token.patch(f"/v1/memories/{refs[2]}", json={"tags": ["x"]})).status_code == 200
    async with client(live, bearer(live, teams=["platform"], projects=["memory-os"])) as token:
        listed = (await token.get("/v1/memories")).json()["memories"]
        assert [m["reference"] for m in listed] == [refs[0]]
    async with client(live) as http:
        for ref in outside:
            assert (await http.get(f"/v1/memories/{ref}")).status_code == 200  # untouched


async def test_sites_never_see_each_other(live: LiveServer) -> None:
    async with client(live) as http:
        refs = await remember_facts(http)
        await http.post("/v1/conversations/conv-secret-1/items", json={"items": [{"secret": True}]})
    other_secret = live.create_site("other")
    async with client(live, live.basic_header(site="other", secret=other_secret)) as other:
        assert (await other.get("/v1/memories")).json() == {"memories": [], "next_cursor": None}
        for ref in refs:
            error_of(await other.get(f"/v1/memories/{ref}"), 404, "not_found")
            error_of(await other.patch(f"/v1/memories/{ref}", json={"content": "x"}), 404, "not_found")
            error_of(await other.delete(f"/v1/memories/{ref}"), 404, "not_found")
        assert (await other.post("/v1/recall", json={"query": "coffee"})).json() == {"results": []}
        assert (await other.post("/v1/search", json={"query": "coffee", "min_score": 0})).json() == {"results": []}
        assert (await other.post("/v1/context", json={"query": "coffee"})).json()["items"] == []
        assert (await other.get("/v1/conversations")).json() == {"conversations": [], "next_cursor": None}
        assert (await other.get("/v1/conversations/conv-secret-1/items")).json() == {"items": []}
        # The same content filed the same way is a different memory in another site.
        same = await other.post("/v1/memories", json=FACTS[0])
        assert same.status_code == 201 and same.json()["reference"] not in refs
        appended = await other.post("/v1/conversations/conv-secret-1/items", json={"items": [{"other": 1}]})
        assert appended.json()["first_seq"] == 0
    async with client(live) as http:
        assert [i["payload"] for i in (await http.get("/v1/conversations/conv-secret-1/items")).json()["items"]] == [
            {"secret": True}
        ]


# --- the HTTP edge ---------------------------------------------------------------------------------------


async def test_unknown_routes_and_methods(live: LiveServer) -> None:
    async with client(live) as http:
        for path in ("/v1/nothing", "/v1/", "/v1", "/v1/memories/a/b", "/v1/conversations/conv-0001/x"):
            assert path in error_of(await http.get(path), 404, "not_found")
        # A newline in the path still reaches the REST app (a Starlette Mount's pattern would not match it).
        error_of(await http.get("/v1/memories/%0Amem"), 404, "not_found")
        error_of(await http.get("/v1/%0A"), 404, "not_found")
        response = await http.put("/v1/memories/mem_x", json={})
        assert response.status_code == 405 and response.json()["error"]["code"] == "not_found"
        assert set(response.headers["allow"].replace(" ", "").split(",")) == {"GET", "PATCH", "DELETE"}
        assert (await http.delete("/v1/conversations")).status_code == 405
        response = await http.get("/v1/conversations/conv-0001")  # a conversation is deleted, never read, here
        assert response.status_code == 405 and response.headers["allow"] == "DELETE"


async def test_request_over_the_size_limit_is_413(tmp_path: Path, embedder: Any) -> None:
    settings = make_settings(tmp_path / "data", max_request_bytes=64 * 1024)
    with serve(settings, embedder) as small:
        async with client(small) as http:
            big = {"items": [{"blob": "x" * 70_000}]}
            error_of(await http.post("/v1/conversations/conv-0001/items", json=big), 413, "payload_too_large")
            error_of(await http.post("/v1/memories", json={"content": "y" * 70_000}), 413, "payload_too_large")
            assert (await http.get("/v1/conversations")).json()["conversations"] == []


class FailingQueries:
    """A complete Embedder that works for documents and fails for queries containing "explode"
    (a fault injected below the REST layer, to see that it never becomes a 500 or leaks a trace)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.dimension = inner.dimension
        self.similarity = inner.similarity

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        if "explode" in text:
            raise RuntimeError("secret internal detail /etc/passwd")
        return self.inner.embed_query(text)


async def test_unexpected_failures_are_503_without_details(
    tmp_path: Path, embedder: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with serve(make_settings(tmp_path / "data"), FailingQueries(embedder)) as live:
        async with client(live) as http:
            await remember(http, content="Something to find.")
            for path in ("/v1/recall", "/v1/search", "/v1/context"):
                response = await http.post(path, json={"query": "please explode"})
                message = error_of(response, 503, "unavailable")
                assert "secret" not in response.text and "passwd" not in message
            assert (await http.post("/v1/recall", json={"query": "something"})).status_code == 200
    assert any(
        "secret internal detail" in (r.exc_text or "") or r.exc_info
        for r in caplog.records
        if r.name.startswith("memory_server")
    )


class BrokenIndex:
    """An index that cannot be opened: the saved-memory half of the server stays unavailable."""

    shared = False

    def info(self) -> Any:
        raise OSError("index directory unreadable")

    def close(self) -> None:
        pass


@pytest.fixture
def without_memory(tmp_path: Path, embedder: Any) -> Iterator[LiveServer]:
    settings = make_settings(tmp_path / "data")
    secret = admin(settings, lambda sites: auth.create_site(sites, "acme"))
    app = create_app(settings, embedder=embedder, index=BrokenIndex())
    port = free_port()
    with ThreadedServer(app, port):
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            if "index directory unreadable" in httpx2.get(f"{base}/readyz").text:
                break
            time.sleep(0.05)
        yield LiveServer(settings, f"{base}/mcp", base, "acme", secret)


async def test_memory_routes_are_503_while_the_index_is_down_and_logs_still_work(without_memory: LiveServer) -> None:
    async with client(without_memory) as http:
        for method, path, kwargs in [route for route in ALL_ROUTES if route not in LOG_ROUTES][:-1]:
            message = error_of(await http.request(method, path, **kwargs), 503, "unavailable")
            assert "unavailable" in message or "index" in message
        assert (await http.post("/v1/conversations/conv-0001/items", json={"items": [{"a": 1}]})).status_code == 201
        assert len((await http.get("/v1/conversations/conv-0001/items")).json()["items"]) == 1


def backlog(live: LiveServer) -> int:
    return index_backlog(live.settings)


def stored_vector(live: LiveServer, reference: str) -> np.ndarray:
    [(blob,)] = query(live.settings, "SELECT vector FROM memories WHERE reference = ?", reference)
    return np.frombuffer(bytes(blob), dtype=np.float32).copy()
