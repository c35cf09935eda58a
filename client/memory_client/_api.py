"""The REST operations as data: each builder returns a `Call` (method, path, query, body, how to read the
answer); `Client` and `AsyncClient` only send it. So both share one definition of every route and of the
mapping of responses onto models and errors."""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from memory_client.errors import (
    BY_CODE,
    BY_STATUS,
    InvalidParameters,
    MemoryServerError,
    Unavailable,
)
from memory_client.models import (
    AppendAck,
    ContextPack,
    ConversationDeleted,
    ConversationPage,
    Forgotten,
    Hit,
    LogItem,
    Memory,
    MemoryPage,
    Remembered,
)

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

Params = list[tuple[str, str | int | float | bool | None]]
Timestamp = str | datetime
# What fits in one URL path segment of a conversation route; length (8-64) is left to the server to judge.
CONVERSATION_CHARS = re.compile(r"[A-Za-z0-9_-]+")


class Unset(enum.Enum):
    """Marks a PATCH field as absent (None means "reset to the default")."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset.UNSET


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[Any], T]
    params: Params | None = None
    json: Any = None
    content: bytes | None = None

    @property
    def headers(self) -> dict[str, str] | None:
        return {"content-type": "application/json"} if self.content is not None else None


# --- responses ----------------------------------------------------------------------------------------


def model(cls: type[M]) -> Callable[[Any], M]:
    return cls.model_validate


def read(response: httpx.Response, call: Call[T]) -> T:
    """The parsed answer of a 2xx response, or the typed error of any other."""
    if not 200 <= response.status_code < 300:
        raise error_from(response)
    try:
        return call.parse(response.json())
    except (ValueError, ValidationError, KeyError, TypeError) as exc:
        # A 2xx whose body is not what the route returns: a proxy or a broken deployment; it may pass.
        raise Unavailable(
            f"the response to {call.method} {call.path} could not be read: {exc}", status=response.status_code
        ) from None


def error_from(response: httpx.Response) -> MemoryServerError:
    status = response.status_code
    retry_after = _retry_after(response.headers.get("retry-after"))
    code: str | None = None
    message = f"HTTP {status}"
    retryable: bool | None = None
    body: Any = None
    try:
        body = response.json()
        detail = body["error"]
        code = str(detail["code"])
        message = str(detail.get("message", message))
        if isinstance(detail.get("retryable"), bool):
            retryable = detail["retryable"]
    except (ValueError, KeyError, TypeError):
        text = response.text.strip()
        if text:
            message = f"HTTP {status}: {text[:200]}"
    if status >= 500 or status == 429:
        # Whatever the body says, a server-side failure or a rate limit is safe to retry.
        return Unavailable(message, code=code, status=status, retryable=True, retry_after=retry_after, body=body)
    cls = BY_CODE.get(code or "") or BY_STATUS.get(status) or MemoryServerError
    return cls(
        message,
        code=code if cls is MemoryServerError else None,
        status=status,
        retryable=retryable,
        retry_after=retry_after,
        body=body,
    )


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: not worth parsing for a backoff hint


# --- helpers ------------------------------------------------------------------------------------------


def segment(value: str) -> str:
    return quote(value, safe="")


def conversation(conversation_id: str) -> str:
    """The conversation's path segment; an id no route could carry is rejected here, as the server would."""
    if not isinstance(conversation_id, str) or not CONVERSATION_CHARS.fullmatch(conversation_id):
        raise InvalidParameters("conversation_id must be 8-64 characters of [A-Za-z0-9_-]")
    return f"/v1/conversations/{conversation_id}"


def timestamp(value: Timestamp) -> str:
    return value.isoformat() if isinstance(value, datetime) else value


def given(**fields: Any) -> dict[str, Any]:
    """The fields that were passed (not None), timestamps as RFC3339 text."""
    return {k: timestamp(v) if isinstance(v, datetime) else v for k, v in fields.items() if v is not None}


def query(**fields: Any) -> Params:
    params: Params = []
    for key, value in fields.items():
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            params += [(key, item) for item in value]
        elif isinstance(value, datetime):
            params.append((key, value.isoformat()))
        elif isinstance(value, bool):
            params.append((key, "true" if value else "false"))
        else:
            params.append((key, value))
    return params


def _results(data: Any) -> list[Hit]:
    return [Hit.model_validate(hit) for hit in data["results"]]


def _items(data: Any) -> list[LogItem]:
    return [LogItem.model_validate(item) for item in data["items"]]


# --- saved memories -----------------------------------------------------------------------------------


def remember(
    content: str,
    *,
    type: str | None,
    location: str | None,
    project: str | None,
    team: str | None,
    bucket: str | None,
    tags: Sequence[str] | None,
    metadata: Mapping[str, Any] | None,
    provenance: Mapping[str, Any] | None,
    occurred_at: Timestamp | None,
    supersedes: str | None,
    expires_at: Timestamp | None,
) -> Call[Remembered]:
    body = given(
        content=content,
        type=type,
        location=location,
        project=project,
        team=team,
        bucket=bucket,
        tags=list(tags) if tags is not None else None,
        metadata=dict(metadata) if metadata is not None else None,
        provenance=dict(provenance) if provenance is not None else None,
        occurred_at=occurred_at,
        supersedes=supersedes,
        expires_at=expires_at,
    )
    return Call("POST", "/v1/memories", model(Remembered), json=body)


def filters(
    *,
    project: str | None,
    team: str | None,
    bucket: str | None,
    type: str | None,
    tags: Sequence[str] | None,
    occurred_after: Timestamp | None,
    occurred_before: Timestamp | None,
    include_superseded: bool | None,
) -> dict[str, Any]:
    return given(
        project=project,
        team=team,
        bucket=bucket,
        type=type,
        tags=list(tags) if tags is not None else None,
        occurred_after=occurred_after,
        occurred_before=occurred_before,
        include_superseded=include_superseded,
    )


def recall(query_text: str, *, limit: int, found: dict[str, Any]) -> Call[list[Hit]]:
    return Call("POST", "/v1/recall", _results, json={"query": query_text, "limit": limit, **found})


def search(query_text: str, *, limit: int, min_score: float | None, found: dict[str, Any]) -> Call[list[Hit]]:
    body = {"query": query_text, "limit": limit, **found, **given(min_score=min_score)}
    return Call("POST", "/v1/search", _results, json=body)


def context(query_text: str, *, max_items: int, max_tokens: int, found: dict[str, Any]) -> Call[ContextPack]:
    body = {"query": query_text, "max_items": max_items, "max_tokens": max_tokens, **found}
    return Call("POST", "/v1/context", model(ContextPack), json=body)


def forget(reference: str) -> Call[Forgotten]:
    return Call("DELETE", f"/v1/memories/{segment(reference)}", model(Forgotten))


def get(reference: str) -> Call[Memory]:
    return Call("GET", f"/v1/memories/{segment(reference)}", model(Memory))


def update(reference: str, changes: dict[str, Any]) -> Call[Memory]:
    body = {k: timestamp(v) if isinstance(v, datetime) else v for k, v in changes.items() if v is not UNSET}
    if isinstance(body.get("tags"), (list, tuple)):
        body["tags"] = list(body["tags"])
    return Call("PATCH", f"/v1/memories/{segment(reference)}", model(Memory), json=body)


def list_memories(**fields: Any) -> Call[MemoryPage]:
    tags = fields.pop("tags", None)
    return Call("GET", "/v1/memories", model(MemoryPage), params=query(tag=tags, **fields))


# --- conversation logs --------------------------------------------------------------------------------


def append(conversation_id: str, items: Sequence[Mapping[str, Any]], idempotency_key: str | None) -> Call[AppendAck]:
    body: dict[str, Any] = {"items": [dict(item) for item in items]}
    if idempotency_key is not None:
        body["idempotency_key"] = idempotency_key
    return Call("POST", f"{conversation(conversation_id)}/items", model(AppendAck), json=body)


def append_encoded(conversation_id: str, body: bytes) -> Call[AppendAck]:
    """An append whose JSON body is already encoded (the recorder keeps items as serialized text)."""
    return Call("POST", f"{conversation(conversation_id)}/items", model(AppendAck), content=body)


def encode_batch(payloads: Sequence[str], idempotency_key: str) -> bytes:
    """`{"items": [...], "idempotency_key": ...}` from items that are JSON text already."""
    return ('{"items":[' + ",".join(payloads) + '],"idempotency_key":' + json.dumps(idempotency_key) + "}").encode(
        "utf-8"
    )


def tail(conversation_id: str, count: int) -> Call[list[LogItem]]:
    return Call("GET", f"{conversation(conversation_id)}/items", _items, params=[("count", count)])


def replay(conversation_id: str, offset: int, limit: int) -> Call[list[LogItem]]:
    return Call("GET", f"{conversation(conversation_id)}/items", _items, params=[("offset", offset), ("limit", limit)])


def list_conversations(limit: int, cursor: str | None) -> Call[ConversationPage]:
    return Call("GET", "/v1/conversations", model(ConversationPage), params=query(limit=limit, cursor=cursor))


def delete_conversation(conversation_id: str) -> Call[ConversationDeleted]:
    return Call("DELETE", conversation(conversation_id), model(ConversationDeleted))


def serialize(item: Any) -> str:
    """A log item as the server stores it: compact JSON, keys in order, non-ASCII kept, no NaN."""
    if not isinstance(item, Mapping):
        raise TypeError(f"a log item must be a JSON object (a dict), not {type(item).__name__}")
    return json.dumps(
        item if isinstance(item, dict) else dict(item), ensure_ascii=False, separators=(",", ":"), allow_nan=False
    )
