"""The REST API under /v1: thin routes over the same services, validation helpers and errors as the MCP tools.

A FastAPI app (so the OpenAPI document is generated from the route signatures and models, never written by
hand), mounted into the one ASGI app behind the same AuthMiddleware: by the time a route runs, the caller
is authenticated and its `Principal` is in the ASGI scope's state.

Every failure is `{"error": {"code", "message", "retryable"}}` with the SPEC status. FastAPI's own failures
are mapped onto the SPEC codes: request validation and malformed JSON -> 422 invalid_parameters, unknown
route -> 404 not_found, a known path with the wrong method -> 405 (with Allow) and code not_found, anything
unexpected -> 503 unavailable (logged with its traceback here, never sent).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Body, Depends, FastAPI, Header, Path, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBasic, HTTPBearer
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match, NoMatchFound
from starlette.types import Receive, Scope, Send

from server.ranking import context
from server.auth.core import Principal
from server.errors import (
    AppError,
    InvalidParameters,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
    Unavailable,
    UnprocessableParameters,
)
from server.api.failures import unexpected
from server.api.middleware import CHALLENGE
from server.api.mcp.log_tools import AppendResult, ConversationsResult, ItemsResult
from server.logs.store import CONVERSATION_ID, check_bound, check_conversation_id, decode_cursor
from server.memories.rows import LOCATION, MAX_TAGS, SHORT_WORD, check_query
from server.memories.service import Filters
from server.api.mcp.memory_tools import ContextPack, Forgotten, MemoryFields, Remembered, Results, _filter_dict, filters
from server.services import Services

log = logging.getLogger("memory_server.rest")

PREFIX = "/v1"
HANDLED = "_memory_server_rest_handled"
MAX_LISTED_ERRORS = 10
# A JSON string escape of a UTF-16 surrogate; only a lone one (no pair) is invalid text.
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")

# --- models ---------------------------------------------------------------------------------------------

# Python's str.isspace() characters: `content` and `query` must hold something else (str.strip() is the check).
NOT_BLANK = r"[^\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"

WORD_RULE = "1-64 characters of [A-Za-z0-9_.:-], starting alphanumeric"
Word = Annotated[str, Field(pattern=SHORT_WORD.pattern, max_length=64, description=WORD_RULE)]
Location = Annotated[
    str, Field(pattern=LOCATION.pattern, min_length=1, max_length=512,
               description="Path-like filing place, e.g. projects/memory-os/decisions (1-512 characters).")
]
Tags = Annotated[list[Word], Field(max_length=MAX_TAGS, description=f"At most {MAX_TAGS} short labels.")]
QueryText = Annotated[str, Field(min_length=1, max_length=4096, pattern=NOT_BLANK, description="Natural-language question or topic "
                                                                           "(not empty or whitespace only).")]
Timestamp = Annotated[str, Field(json_schema_extra={"format": "date-time"},
                                 description="RFC3339 with a timezone, e.g. 2024-05-08T13:56:00Z.")]

def _integral(value: Any) -> Any:
    # JSON Schema's "integer" includes 5.0; true and "5" stay rejected (strict below), as in the MCP tools.
    return int(value) if isinstance(value, float) and value.is_integer() else value


StrictLimit = Annotated[int, BeforeValidator(_integral), Field(strict=True)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorDetail(BaseModel):
    code: Literal["invalid_parameters", "unprocessable_parameters", "unauthorized", "forbidden", "not_found",
                  "payload_too_large", "rate_limited", "unavailable"]
    message: str = Field(description="`code: human explanation` without the code; never a stack trace.")
    retryable: bool = Field(description="True only for `unavailable` and `rate_limited`: safe to retry later.")


class ErrorBody(BaseModel):
    error: ErrorDetail


class Memory(MemoryFields):
    updated_at: str


class MemoryPage(BaseModel):
    memories: list[Memory] = Field(description="Newest first (created_at, then creation order).")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


class RememberBody(Strict):
    content: str = Field(min_length=1, pattern=NOT_BLANK, description="The fact, decision or note to keep (1 "
                         "char - 32 KiB UTF-8 by default; larger is 413); not only whitespace.")
    type: Word | None = Field(None, description="fact, decision, note (default), preference, event, or another "
                                                "short word.")
    location: Location | None = None
    project: Word | None = None
    team: Word | None = None
    bucket: Word | None = Field(None, description="Bucket (default 'default').")
    tags: Tags | None = None
    metadata: dict[str, Any] | None = Field(None, description="Any JSON object (at most 64 KiB serialized).")
    provenance: dict[str, Any] | None = Field(None, description="Where it came from: source, agent, "
                                                                "conversation_id, seq... (at most 64 KiB).")
    occurred_at: Timestamp | None = Field(None, description="When the remembered thing happened (default now).")


class PatchBody(Strict):
    """Only the fields present change. null resets a field to what `remember` defaults it to (location,
    project, team: unset; type: note; bucket: default; tags: []; metadata, provenance: {});
    content and occurred_at cannot be null."""

    content: str = Field(None, min_length=1, pattern=NOT_BLANK,  # type: ignore[assignment]
                         description="New content (re-embeds the memory); not null.")
    type: Word | None = None
    location: Location | None = None
    project: Word | None = None
    team: Word | None = None
    bucket: Word | None = None
    tags: Tags | None = None
    metadata: dict[str, Any] | None = Field(None, description="Replaces the whole object.")
    provenance: dict[str, Any] | None = Field(None, description="Replaces the whole object.")
    occurred_at: Timestamp = Field(None, description="New time (re-embeds: the date is part of the "  # type: ignore
                                   "text); not null.")


class FilterFields(Strict):
    project: Word | None = Field(None, description="Only memories of this project.")
    team: Word | None = Field(None, description="Only memories of this team.")
    bucket: Word | None = Field(None, description="Only memories in this bucket (default: all buckets).")
    type: Word | None = Field(None, description="Only memories of this type.")
    tags: Tags | None = Field(None, description="Only memories carrying every one of these tags.")


class RecallBody(FilterFields):
    query: QueryText
    limit: StrictLimit = Field(5, ge=1, le=50, description="How many (1-50, default 5).")


class SearchBody(FilterFields):
    query: QueryText
    limit: StrictLimit = Field(10, ge=1, le=100, description="How many at most (1-100, default 10).")
    min_score: float | None = Field(None, ge=0.0, le=1.0, description="Cosine similarity threshold (default "
                                                                        "from the server's calibration).")


class ContextBody(FilterFields):
    query: QueryText
    max_items: StrictLimit = Field(8, ge=1, le=50, description="At most this many memories (1-50, default 8).")
    max_tokens: StrictLimit = Field(1500, ge=1, le=12000, description="Token budget of the context body "
                                                                     "(1-12000, default 1500).")


class AppendBody(Strict):
    items: list[dict[str, Any]] = Field(min_length=1, max_length=1000, description="1-1000 JSON objects, "
                                        "appended in order as one all-or-nothing batch.")
    idempotency_key: str | None = Field(None, min_length=1, max_length=128, description="A retry with the "
                                        "same key appends nothing and returns the original acknowledgement "
                                        "with duplicate=true. May be sent as the Idempotency-Key header instead.")


# --- OpenAPI: error responses and security schemes ------------------------------------------------------


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    described = {
        401: "unauthorized: missing or invalid credentials (with a WWW-Authenticate challenge)",
        403: "forbidden: the credential lacks the scope or bound",
        404: "not_found",
        413: "payload_too_large: item, batch, content or request over the configured limits",
        422: "invalid_parameters, or unprocessable_parameters (a Bearer caller on a Basic-only route)",
        429: "rate_limited: too many failed sign-ins from this client address; retry after Retry-After seconds",
        503: "unavailable: storage busy, model loading, index down, shutting down; safe to retry",
    }
    out: dict[int | str, dict[str, Any]] = {
        status: {"model": ErrorBody, "description": described[status]} for status in statuses
    }
    if 401 in out:
        out[401]["headers"] = {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "The challenge."}}
    if 429 in out:
        out[429]["headers"] = {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds to wait."}}
    return out


COMMON = (401, 403, 413, 422, 429, 503)


class _DocumentedBasic(HTTPBasic):
    """Declares the scheme in OpenAPI; AuthMiddleware has already authenticated the request."""

    async def __call__(self, request: Request) -> None:  # type: ignore[override]
        return None


class _DocumentedBearer(HTTPBearer):
    async def __call__(self, request: Request) -> None:  # type: ignore[override]
        return None


basic_scheme = _DocumentedBasic(
    scheme_name="basicAuth", auto_error=False,
    description="The site's Basic credential (username = site name): full access, required by the "
                "conversation-log routes.",
)
bearer_scheme = _DocumentedBearer(
    scheme_name="bearerAuth", auto_error=False,
    description="A site token (`mst_...`) with memory:read and/or memory:write, optionally bounded to teams, "
                "projects and/or buckets. Saved-memory routes only.",
)


def _principal(request: Request) -> Principal:
    principal = request.scope.get("state", {}).get("principal")
    if not isinstance(principal, Principal):  # AuthMiddleware always sets it; never trust its absence
        raise Unauthorized("credentials required (Basic or Bearer)")
    return principal


async def any_credential(
    request: Request, _basic: Any = Security(basic_scheme), _bearer: Any = Security(bearer_scheme)
) -> Principal:
    return _principal(request)


async def basic_credential(request: Request, _basic: Any = Security(basic_scheme)) -> Principal:
    principal = _principal(request)
    if not principal.is_basic:
        raise UnprocessableParameters("this route requires the site's Basic authentication")
    return principal


async def valid_unicode(request: Request) -> None:
    """JSON may escape a lone UTF-16 surrogate (\\ud800); Python decodes it into a str no storage can hold."""
    body = await request.body()
    if body and SURROGATE_ESCAPE.search(body):
        try:
            json.dumps(json.loads(body), ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidParameters("the body holds a lone UTF-16 surrogate escape (\\ud800-\\udfff); "
                                    "text must be valid Unicode") from None
        except (ValueError, RecursionError):
            pass  # malformed JSON is reported by the body parser


# --- errors -------------------------------------------------------------------------------------------


def error_response(error: AppError, *, status: int | None = None, headers: dict[str, str] | None = None
                   ) -> JSONResponse:
    headers = dict(headers or {})
    if isinstance(error, Unauthorized):
        headers["WWW-Authenticate"] = CHALLENGE
    return JSONResponse(error.to_dict(), status_code=status or error.status, headers=headers)


def validation_message(errors: Any) -> str:
    parts = []
    for err in list(errors)[:MAX_LISTED_ERRORS]:
        loc = [str(p) for p in err.get("loc", ())]
        where = ".".join(loc) or "request"
        kind = err.get("type", "")
        if kind == "json_invalid":
            ctx = err.get("ctx") or {}
            parts.append(f"body: malformed JSON ({ctx.get('error', 'decode error')})")
        elif kind == "missing" and loc == ["body"]:
            parts.append("body: a JSON object is required (Content-Type: application/json)")
        elif loc == ["body"] and isinstance(err.get("input"), (bytes, str)):
            parts.append("body: must be a JSON object sent with Content-Type: application/json")
        elif kind == "missing":
            parts.append(f"{where}: is required")
        else:
            parts.append(f"{where}: {err.get('msg', 'invalid')}")
    extra = len(list(errors)) - MAX_LISTED_ERRORS
    if extra > 0:
        parts.append(f"and {extra} more")
    return "; ".join(parts) or "invalid request"


async def _app_error(request: Request, exc: AppError) -> JSONResponse:
    return error_response(exc)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    return error_response(InvalidParameters(validation_message(exc.errors())))


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    where = f"{request.method} {request.url.path}"
    if exc.status_code == 404:
        return error_response(NotFound(f"no route {where}"))
    if exc.status_code == 405:
        allow = ", ".join(_allowed_methods(request)) or (exc.headers or {}).get("Allow", "")
        return error_response(NotFound(f"{request.method} is not supported here; allowed: {allow}"),
                              status=405, headers={"Allow": allow})
    if exc.status_code == 413:
        return error_response(PayloadTooLarge("request body too large"))
    if exc.status_code == 400:  # FastAPI could not read the body (e.g. not UTF-8)
        return error_response(InvalidParameters("body: could not be read as JSON (not UTF-8 text, or nested "
                                                "too deeply)"))
    if exc.status_code == 401:
        return error_response(Unauthorized("credentials required (Basic or Bearer)"))
    if exc.status_code < 500:
        return error_response(InvalidParameters(f"{where}: {exc.detail}"))
    return error_response(Unavailable("the request could not be served; retry later"))


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route offers on this path (Starlette reports only the first matching route's)."""
    methods: set[str] = set()
    for route in getattr(request.app.state, "route_table", ()):
        regex = getattr(route, "path_regex", None)
        if regex is not None and regex.match(request.scope["path"]):
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    # Starlette re-raises the exception once this response is sent; RestApp then knows it was handled.
    exc.__dict__[HANDLED] = True
    if isinstance(exc, RecursionError):
        return error_response(InvalidParameters("the request is nested too deeply"))
    return error_response(unexpected(exc, health=request.app.state.health,
                                     where=f"REST {request.method} {request.url.path}"))


# --- routes ---------------------------------------------------------------------------------------------

# Module level: with postponed annotations, FastAPI resolves route annotations in this module's namespace.
AnyCaller = Annotated[Principal, Depends(any_credential)]
BasicCaller = Annotated[Principal, Depends(basic_credential)]
Reference = Annotated[str, Path(description="The memory's reference (as `remember` returned it).")]
ConversationId = Annotated[str, Path(
    pattern=CONVERSATION_ID.pattern, min_length=8, max_length=64,
    description="8-64 characters of [A-Za-z0-9_-], minted by the client. An unknown one reads as empty.")]


def _check_filters(body: FilterFields) -> Filters:
    return filters(project=body.project, team=body.team, bucket=body.bucket, type=body.type, tags=body.tags)


def memory_routes(services: Services) -> APIRouter:
    router = APIRouter(prefix=PREFIX, tags=["saved memories"], dependencies=[Depends(valid_unicode)])
    settings = services.settings

    @router.post("/memories", status_code=201, response_model=Remembered,
                 responses={200: {"model": Remembered, "description": "Already remembered: the same content "
                                  "with the same type, location, project, team and bucket (created=false)."},
                            **_errors(*COMMON)},
                 summary="Remember a memory (memory:write)")
    async def remember(body: RememberBody, principal: AnyCaller) -> JSONResponse:
        """Persist a fact, decision or note: 201 with `created: true`, or 200 with the existing reference and
        `created: false` when identical content is already filed identically. Same as the `remember` tool."""
        service = services.memory()
        new = service.validate(**body.model_dump())
        result = await service.remember(principal, new)
        headers = {"Location": f"{PREFIX}/memories/{result['reference']}"}
        return JSONResponse(result, status_code=201 if result["created"] else 200, headers=headers)

    @router.get("/memories", response_model=MemoryPage, responses=_errors(*COMMON),
                summary="List memories, newest first (memory:read)")
    async def list_memories(
        principal: AnyCaller,
        project: Annotated[Word | None, Query(description="Only this project.")] = None,
        team: Annotated[Word | None, Query(description="Only this team.")] = None,
        bucket: Annotated[Word | None, Query(description="Only this bucket.")] = None,
        type: Annotated[Word | None, Query(description="Only this type.")] = None,
        tag: Annotated[list[Word] | None, Query(max_length=MAX_TAGS, description="Repeatable: only memories "
                                                 "carrying every one of these tags.")] = None,
        location: Annotated[str | None, Query(max_length=512, description="Only memories filed exactly "
                                                 "here.")] = None,
        provenance_source: Annotated[str | None, Query(max_length=512, description="Only memories whose "
                                                          "provenance.source equals this.")] = None,
        provenance_agent: Annotated[str | None, Query(max_length=512, description="Only memories whose "
                                                         "provenance.agent equals this.")] = None,
        provenance_conversation_id: Annotated[str | None, Query(max_length=512, description="Only memories "
                                                                   "whose provenance.conversation_id equals "
                                                                   "this.")] = None,
        limit: Annotated[int, Query(ge=1, le=100, description="Page size (1-100, default 20).")] = 20,
        cursor: Annotated[str | None, Query(description="Opaque: the previous page's next_cursor.")] = None,
    ) -> JSONResponse:
        """Page through the memories visible to the caller (a bounded token sees only its bounds), newest
        first. Follow `next_cursor` until it is null: every memory present throughout is listed once."""
        service = services.memory()
        found = filters(project=project, team=team, bucket=bucket, type=type, tags=tag)
        limit = check_bound("limit", limit, 1, 100)
        provenance = {key: value for key, value in (("source", provenance_source), ("agent", provenance_agent),
                                                    ("conversation_id", provenance_conversation_id))
                      if value is not None}
        page = await anyio.to_thread.run_sync(
            lambda: service.list_memories(principal, found, location=location, provenance=provenance,
                                          limit=limit, cursor=cursor))
        return JSONResponse(page)

    @router.get("/memories/{reference}", response_model=Memory, responses=_errors(*COMMON, 404),
                summary="Read one memory (memory:read)")
    async def get_memory(reference: Reference, principal: AnyCaller) -> JSONResponse:
        """Every attribute of one memory visible to the caller; 404 if there is none."""
        service = services.memory()
        return JSONResponse(await anyio.to_thread.run_sync(service.fetch, principal, reference))

    @router.patch("/memories/{reference}", response_model=Memory, responses=_errors(*COMMON, 404),
                  summary="Change a memory (memory:write)")
    async def patch_memory(reference: Reference, body: PatchBody, principal: AnyCaller) -> JSONResponse:
        """Change some attributes; only the fields present in the body change (null resets a field to its
        `remember` default; content and occurred_at cannot be null). Validated as `remember` validates; a
        bounded token cannot move a memory out of its bounds (403). Changing content or occurred_at
        re-embeds the memory. Making it identical (content, type, location, project, team, bucket) to
        another memory is rejected with invalid_parameters. Returns the updated memory."""
        service = services.memory()
        changes = body.model_dump(include=body.model_fields_set)
        return JSONResponse(await service.update(principal, reference, changes))

    @router.delete("/memories/{reference}", response_model=Forgotten, responses=_errors(*COMMON, 404),
                   summary="Forget a memory (memory:write)")
    async def forget(reference: Reference, principal: AnyCaller) -> JSONResponse:
        """Delete a memory from SQLite and the vector index; 404 for an unknown (or invisible) reference."""
        return JSONResponse(await services.memory().forget(principal, reference))

    @router.post("/recall", response_model=Results, responses=_errors(*COMMON), summary="Recall (memory:read)")
    async def recall(body: RecallBody, principal: AnyCaller) -> JSONResponse:
        """Best-effort lookup: the most relevant visible memories, best first; weak matches are allowed, and
        the result is empty only if nothing visible exists. Same as the `recall` tool."""
        service = services.memory()
        query = check_query(body.query)
        limit = check_bound("limit", body.limit, 1, 50)
        hits = await service.recall(principal, query, limit, _check_filters(body))
        return JSONResponse({"results": hits})

    @router.post("/search", response_model=Results, responses=_errors(*COMMON),
                 summary="Strict search (memory:read)")
    async def search(body: SearchBody, principal: AnyCaller) -> JSONResponse:
        """Only memories matching every filter exactly and scoring at or above `min_score`; nothing rather
        than a weak match. Same as the `search_memory` tool."""
        service = services.memory()
        query = check_query(body.query)
        limit = check_bound("limit", body.limit, 1, 100)
        threshold = settings.search_min_score if body.min_score is None else float(body.min_score)
        hits = await service.search(principal, query, limit, _check_filters(body), threshold)
        return JSONResponse({"results": hits})

    @router.post("/context", response_model=ContextPack, responses=_errors(*COMMON),
                 summary="A bounded context pack (memory:read)")
    async def recall_context(body: ContextBody, principal: AnyCaller) -> JSONResponse:
        """Ranked as recall, packed in rank order under max_items and max_tokens (used_tokens <= max_tokens
        always holds for context_text). The structured content of the `recall_context` tool."""
        service = services.memory()
        query = check_query(body.query)
        max_items = check_bound("max_items", body.max_items, 1, 50)
        max_tokens = check_bound("max_tokens", body.max_tokens, 1, 12000)
        found = _check_filters(body)
        hits = await service.recall(principal, query, max_items, found)
        counter = services.token_counter()
        plan = {"ranking": "recall", "candidates": len(hits), "filters": _filter_dict(found)}

        def build() -> dict[str, Any]:
            packed = context.pack(hits, max_items=max_items, max_tokens=max_tokens, tokens=counter)
            return context.structured(packed, tokens=counter, plan=plan)

        return JSONResponse(await anyio.to_thread.run_sync(build))

    return router


def log_routes(services: Services) -> APIRouter:
    router = APIRouter(prefix=PREFIX, tags=["conversation logs"], dependencies=[Depends(valid_unicode)])
    logs = services.logs

    @router.post("/conversations/{conversation_id}/items", status_code=201, response_model=AppendResult,
                 responses={200: {"model": AppendResult, "description": "A retry with a known idempotency key: "
                                  "the original acknowledgement, duplicate=true, nothing appended."},
                            **_errors(*COMMON, 404)},
                 summary="Append to a conversation log (Basic only)")
    async def append(
        conversation_id: ConversationId,
        principal: BasicCaller,
        body: Annotated[AppendBody, Body()],
        idempotency_header: Annotated[str | None, Header(
            alias="Idempotency-Key", min_length=1, max_length=128, description="Same as the body's idempotency_key (if both are given they "
                                                 "must be equal).")] = None,
    ) -> JSONResponse:
        """Append 1-1000 JSON objects as one all-or-nothing batch; the acknowledgement means durable. 201 when
        appended; 200 with duplicate=true for a retry with an idempotency key already used on this
        conversation. Same as the `append_memory` tool."""
        key = body.idempotency_key
        if idempotency_header is not None:
            if key is not None and key != idempotency_header:
                raise InvalidParameters("the Idempotency-Key header and the body's idempotency_key differ")
            key = idempotency_header
        cid, payloads, key = await anyio.to_thread.run_sync(logs.prepare_append, conversation_id, body.items, key)
        ack = await logs.append(principal.site_id, cid, payloads, key)
        return JSONResponse(ack, status_code=200 if ack["duplicate"] else 201)

    @router.get("/conversations/{conversation_id}/items", response_model=ItemsResult,
                responses=_errors(*COMMON, 404), summary="Read a conversation log (Basic only)")
    async def read_items(
        conversation_id: ConversationId,
        principal: BasicCaller,
        count: Annotated[int | None, Query(ge=0, le=1000, description="Tail: the last `count` items, "
                                            "ascending (0-1000). The default mode, with count 50.")] = None,
        offset: Annotated[int | None, Query(ge=0, description="Replay: the sequence number to start from "
                                             "(default 0).")] = None,
        limit: Annotated[int | None, Query(ge=0, le=1000, description="Replay: at most this many items from "
                                            "`offset` (0-1000, default 100); a shorter page means the end of "
                                            "the log.")] = None,
    ) -> JSONResponse:
        """Two modes. Replay (like `replay_memory`) when `offset` or `limit` is given: up to `limit` items
        (default 100) from `offset` (default 0); page on with offset = last seq + 1 until a short page.
        Tail (like `recall_memory`) otherwise: the last `count` items (default 50). `count` together with
        `offset` or `limit` is invalid_parameters. Items are ascending by seq; an unknown conversation reads
        as empty."""
        cid = check_conversation_id(conversation_id)
        if count is not None and (offset is not None or limit is not None):
            raise InvalidParameters("give either count (tail) or offset/limit (replay), not both")
        if offset is None and limit is None:
            count = check_bound("count", 50 if count is None else count, 0, 1000)
            items = await anyio.to_thread.run_sync(logs.recall, principal.site_id, cid, count)
        else:
            limit = check_bound("limit", 100 if limit is None else limit, 0, 1000)
            offset = check_bound("offset", 0 if offset is None else offset, 0, None)
            items = await anyio.to_thread.run_sync(logs.replay, principal.site_id, cid, offset, limit)
        return JSONResponse({"items": items})

    @router.get("/conversations", response_model=ConversationsResult, responses=_errors(*COMMON),
                summary="List conversations (Basic only)")
    async def list_conversations(
        principal: BasicCaller,
        limit: Annotated[int, Query(ge=1, le=1000, description="Page size (1-1000, default 100).")] = 100,
        cursor: Annotated[str | None, Query(description="Opaque: the previous page's next_cursor.")] = None,
    ) -> JSONResponse:
        """The site's conversations, newest activity first. Same as the `list_conversations` tool."""
        limit = check_bound("limit", limit, 1, 1000)
        if cursor is not None:
            decode_cursor(cursor)
        return JSONResponse(await anyio.to_thread.run_sync(logs.list, principal.site_id, limit, cursor))

    return router


# --- the app --------------------------------------------------------------------------------------------


class RestApp:
    """The FastAPI app serving /v1, placed in the server's routes by `.route`. Its routes carry the full
    /v1/... paths (so the OpenAPI document shows them); if it is mounted with `Mount("/v1", ...)` instead,
    the mount's root_path is undone before FastAPI routes the request. An exception that escapes FastAPI
    (Starlette re-raises it after our 503 was sent) stops here instead of reaching the server's 500."""

    def __init__(self, services: Services) -> None:
        api = FastAPI(
            title="memory-server",
            version="1",
            summary="Durable conversation logs and searchable saved memories for AI agents.",
            description="The REST face of the MCP tools: same operations, same validation, same errors "
                        '(`{"error": {"code", "message", "retryable"}}` with the documented HTTP status).',
            openapi_url=None, docs_url=None, redoc_url=None,
            generate_unique_id_function=lambda route: route.name,  # operationId = the handler's name
        )
        routers = [memory_routes(services), log_routes(services)]
        for router in routers:
            api.include_router(router)
        api.state.route_table = [route for router in routers for route in router.routes]  # for 405's Allow
        api.state.health = services.writer.health
        api.add_exception_handler(AppError, _app_error)
        api.add_exception_handler(RequestValidationError, _validation_error)
        api.add_exception_handler(StarletteHTTPException, _http_error)
        api.add_exception_handler(Exception, _unexpected)
        self.api = api
        self.route = RestRoute(self)  # in the server's routes, before the MCP app's catch-all mount

    def openapi(self) -> dict[str, Any]:
        return self.api.openapi()

    async def openapi_endpoint(self, request: Request) -> JSONResponse:
        return JSONResponse(self.openapi())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        root = scope.get("root_path", "")
        if root.endswith(PREFIX):
            scope = {**scope, "root_path": root[: -len(PREFIX)]}
        started = False

        async def tracking(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.api(scope, receive, tracking)
        except Exception as exc:
            if not exc.__dict__.get(HANDLED):
                log.error("REST request failed unexpectedly", exc_info=exc)
            if not started and scope["type"] == "http":
                await error_response(Unavailable("internal error; it has been logged, retry later"))(
                    scope, receive, send)


class RestRoute(BaseRoute):
    """Routes every request under /v1 (and /v1 itself) to the REST app, whatever its path holds: a Mount
    would not match a path with a newline in it (its pattern is `.*`), letting it fall through to the MCP
    app's plain-text 404."""

    def __init__(self, app: RestApp) -> None:
        self.app = app

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] == "http":
            path, root = scope["path"], scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root):]
            if path == PREFIX or path.startswith(PREFIX + "/"):
                return Match.FULL, {}
        return Match.NONE, {}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)

    def url_path_for(self, name: str, /, **path_params: Any) -> Any:
        raise NoMatchFound(name, path_params)


def build_rest_app(services: Services) -> RestApp:
    return RestApp(services)
