"""Property-based fuzzing of the REST API from its own served OpenAPI document (schemathesis + hypothesis).

For every operation in /openapi.json, schemathesis generates requests that fit the schema (positive) and
requests that break it (negative) and sends them over real HTTP, authenticated with the site's Basic
credential, to the real app on 127.0.0.1. Every response must be documented: never a 500, only documented
status codes and content types, bodies matching the response schemas, schema-violating input rejected and
schema-valid input accepted (except where a rule no JSON Schema can state applies, see `semantic_rule`).
A third pass aims the generated requests at data that exists (a memory, a conversation with items), so
GET/PATCH/DELETE of a memory and log reads do more than answer 404 or an empty list.
The number of examples is bounded so the module runs in about a minute.

(schemathesis' own `from_fixture` pytest integration does not run under pytest 9, so each operation is
driven through `APIOperation.as_strategy()` with hypothesis directly.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
import schemathesis
from hypothesis import HealthCheck, assume, given, settings
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from memory_server.values import json_is_storable

from tests.conftest import LiveServer, make_settings, serve

POSITIVE, NEGATIVE, EXISTING = "positive", "negative", "existing"
EXAMPLES = {POSITIVE: 40, NEGATIVE: 30, EXISTING: 25}  # per operation
OPERATIONS = [
    ("POST", "/v1/memories"),
    ("GET", "/v1/memories"),
    ("GET", "/v1/memories/{reference}"),
    ("PATCH", "/v1/memories/{reference}"),
    ("DELETE", "/v1/memories/{reference}"),
    ("POST", "/v1/recall"),
    ("POST", "/v1/search"),
    ("POST", "/v1/context"),
    ("POST", "/v1/conversations/{conversation_id}/items"),
    ("GET", "/v1/conversations/{conversation_id}/items"),
    ("GET", "/v1/conversations"),
    ("DELETE", "/v1/conversations/{conversation_id}"),
]
ARRAY_QUERY = {"tag"}  # query parameters whose schema is an array (repeated in the query string)
NOTHING_TO_NEGATE = {("GET", "/v1/memories/{reference}"), ("DELETE", "/v1/memories/{reference}")}
SEEDED_CONVERSATION = "conv-fuzz-seeded"
STATS: dict[str, dict[int, int]] = {}


# Stored text holds no NUL and no lone surrogate: such a request is refused (422) where text is stored, and
# may still be answered otherwise (a log item's payload keeps a NUL escaped; an unknown reference is 404 first).
UNSTORABLE_TEXT = "stored text holds no NUL and no lone surrogate"


def semantic_rule(case: Any) -> str | None:
    """A rule of the API that a JSON Schema cannot state, which a schema-valid request may break; such a
    request may be rejected (422) although it fits the schema."""
    query, headers = case.query or {}, case.headers or {}
    body = case.body if isinstance(case.body, dict) else {}
    if "cursor" in query:
        return "cursor: opaque, only the server's own next_cursor values are valid"
    if "count" in query and ("offset" in query or "limit" in query):
        return "count (tail) excludes offset/limit (replay)"
    window = {**body, **query}
    if window.get("occurred_after") is not None and window.get("occurred_before") is not None:
        return "a time window's start must be earlier than its end"
    header = headers.get("Idempotency-Key")
    if header is not None and body.get("idempotency_key") not in (None, header):
        return "the Idempotency-Key header and the body's idempotency_key must agree"
    if not all(json_is_storable(part) for part in (case.body, case.query, case.path_parameters, dict(headers))):
        return UNSTORABLE_TEXT
    return None


def query_scalar(case: Any) -> bool:
    """Whether a query parameter holds a non-string value: a query string can only carry text, so `true`,
    `5` or `null` arrive as the strings "true", "5", "null", which may well be valid (a tag "true")."""

    def scalar(value: Any) -> bool:
        return value is None or isinstance(value, (bool, int, float))

    return any(scalar(v) or (isinstance(v, list) and any(scalar(x) for x in v)) for v in (case.query or {}).values())


def query_single_for_array(case: Any) -> bool:
    """Whether an array query parameter holds one bare string: a query string cannot tell `tag=x` from the
    array ["x"], so that negation may arrive as a valid one-element array."""
    return any(isinstance(value, str) for name, value in (case.query or {}).items() if name in ARRAY_QUERY)


def optional_null(case: Any, document: dict[str, Any], method: str, path: str) -> bool:
    """Whether the body gives null to a parameter that is not required: an explicit null means its default,
    as absence does (the argument rule of docs/spec.md), though the schema states only the plain type."""
    if not isinstance(case.body, dict):
        return False
    content = document["paths"][path][method.lower()].get("requestBody", {}).get("content", {})
    schema = content.get("application/json", {}).get("schema", {})
    if "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    required = set(schema.get("required", []))
    return any(value is None and name not in required for name, value in case.body.items())


def identity_clash(response: Any) -> str | None:
    """PATCH may not make a memory identical (content and filing) to another one; random bodies can."""
    if response.status_code == 422 and "already has this content" in response.text:
        return "a memory's content and filing are unique"
    return None


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[LiveServer]:
    # schemathesis sends invalid credentials on purpose, many times: failed sign-ins are not limited here.
    settings = make_settings(tmp_path_factory.mktemp("fuzz") / "data", sign_in_failures_per_minute=100_000)
    with serve(settings, embedder) as server:
        response = httpx2.post(
            f"{server.base}/v1/conversations/{SEEDED_CONVERSATION}/items",
            json={"items": [{"n": n, "text": f"item {n}"} for n in range(40)]},
            headers={"Authorization": server.basic_header()},
        )
        assert response.status_code == 201
        yield server
    total = sum(sum(codes.values()) for codes in STATS.values())
    print(f"\nschemathesis: {total} requests, {len(STATS)} operation/mode pairs (status: count)")
    for label, codes in sorted(STATS.items()):
        print(f"  {label}: {dict(sorted(codes.items()))}")


@pytest.fixture(scope="module")
def api_schema(fuzz_server: LiveServer) -> Any:
    schema = schemathesis.openapi.from_url(f"{fuzz_server.base}/openapi.json")
    # Authenticate every case as the site (Basic).
    schema.config.update(basic_auth=(fuzz_server.site, fuzz_server.secret))
    return schema


def test_the_schema_lists_exactly_these_operations(api_schema: Any) -> None:
    found = {(op.ok().method.upper(), op.ok().path) for op in api_schema.get_all_operations()}
    assert found == set(OPERATIONS)


def fresh_conversation(server: LiveServer, n: int) -> str:
    conversation = f"conv-fuzz-fresh-{n}"
    response = httpx2.post(
        f"{server.base}/v1/conversations/{conversation}/items",
        json={"items": [{"n": n}]},
        headers={"Authorization": server.basic_header()},
    )
    assert response.status_code == 201, response.text
    return conversation


def fresh_memory(server: LiveServer, n: int) -> str:
    response = httpx2.post(
        f"{server.base}/v1/memories",
        json={"content": f"Seeded memory number {n} for fuzzing.", "tags": ["seed"], "bucket": "fuzz"},
        headers={"Authorization": server.basic_header()},
    )
    assert response.status_code in (200, 201), response.text
    return response.json()["reference"]


@pytest.mark.parametrize("pass_", list(EXAMPLES))
@pytest.mark.parametrize("method, path", OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_every_response_is_documented(
    api_schema: Any, fuzz_server: LiveServer, method: str, path: str, pass_: str
) -> None:
    if pass_ == EXISTING and "{" not in path:
        pytest.skip("no path parameter to aim at existing data")
    if pass_ == NEGATIVE and (method, path) in NOTHING_TO_NEGATE:
        pytest.skip("only the credential could break the schema here (any string is a reference)")
    operation = api_schema[path][method]
    mode = GenerationMode.NEGATIVE if pass_ == NEGATIVE else GenerationMode.POSITIVE
    codes = STATS.setdefault(f"{method} {path} [{pass_}]", {})
    counter = iter(range(10**6))

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES[pass_],
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        # A negated or missing Authorization header only ever meets the 401 that test_rest.py covers:
        # spend the examples on the parameters and bodies instead.
        assume((case.headers or {}).get("Authorization") == fuzz_server.basic_header())
        if pass_ == EXISTING:
            if "reference" in case.path_parameters:
                case.path_parameters["reference"] = fresh_memory(fuzz_server, next(counter))
            elif method == "DELETE":  # the seeded conversation stays for the reads
                case.path_parameters["conversation_id"] = fresh_conversation(fuzz_server, next(counter))
            else:
                case.path_parameters["conversation_id"] = SEEDED_CONVERSATION
        response = case.call()
        semantic = semantic_rule(case) or identity_clash(response)
        excluded = [positive_data_acceptance] if semantic else []
        if mode is GenerationMode.NEGATIVE and (query_scalar(case) or query_single_for_array(case)):
            excluded.append(negative_data_rejection)  # its negation may not survive being written as text
        elif mode is GenerationMode.NEGATIVE and optional_null(case, api_schema.raw_schema, method, path):
            excluded.append(negative_data_rejection)  # null there is the default, not a violation
        case.validate_response(response, excluded_checks=excluded or None)
        codes[response.status_code] = codes.get(response.status_code, 0) + 1
        assert response.status_code != 500
        if semantic == UNSTORABLE_TEXT:
            assert response.status_code in (200, 201, 404, 422), response.text
        elif semantic and mode is GenerationMode.POSITIVE and response.status_code != 200:
            assert response.status_code == 422, response.text

    run()
