"""How operations' answers and failures become MCP tool results.

Errors: `isError: true` and one text block `code: message`, with no structured content. The MCP spec makes
structured content conform to the tool's output schema, and the TypeScript SDK 1.x (the MCP Inspector,
most desktop clients) validates it even on error results, so an `{"error": ...}` object there reached those
clients as a -32602 schema exception instead of the error.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic
from fastmcp.tools.base import ToolResult

from memory_server.api.schemas import PublicHit
from memory_server.errors import AppError

PUBLIC_HIT_FIELDS = tuple(PublicHit.model_fields)


def error_result(error: AppError) -> ToolResult:
    """`code: message` as the only content; no structured content (see the module docstring)."""
    return ToolResult(content=str(error), is_error=True)


def ok_result(structured: dict[str, Any], text: str | None = None) -> ToolResult:
    if text is None:
        text = json.dumps(structured, ensure_ascii=False, separators=(",", ":"))
    return ToolResult(content=text, structured_content=structured)


def text_result(text: str) -> ToolResult:
    """A text-only answer, for a tool registered without an output schema."""
    return ToolResult(content=text)


def validation_message(exc: BaseException) -> str:
    cause = exc.__cause__ if isinstance(exc.__cause__, pydantic.ValidationError) else exc
    if isinstance(cause, pydantic.ValidationError):
        parts = []
        for err in cause.errors(include_url=False, include_input=False):
            where = ".".join(str(p) for p in err.get("loc", ()) if p != "call") or "arguments"
            parts.append(f"{where}: {err.get('msg', 'invalid')}")
        return "; ".join(parts)
    return str(exc).splitlines()[0] if str(exc) else "invalid arguments"


def render_hits(hits: list[dict[str, Any]]) -> str:
    """The text rendering of recall and search_memory answers (docs/spec.md, "Hits and their text"); a
    superseded hit gets one more line, `Superseded by: <reference> | valid_to=<ts>`, a recall hit with copies
    folded into it `Copies: <reference>, ...`, an indexed log item one
    more, `Conversation: <id> | seq=<n>` (a hit without those fields, as on the public profile, has none)."""
    if not hits:
        return "No matching memories."
    blocks = []
    for n, hit in enumerate(hits, start=1):
        block = (
            f"[{n}] Reference: {hit['reference']} | Type: {hit['type']} | Location: {hit['location'] or '-'}"
            f" | Score: {hit['score']:.4f}\n{hit['content']}\n"
            f"Attribution: project={hit['project'] or '-'} team={hit['team'] or '-'} bucket={hit['bucket']}"
            f" occurred_at={hit['occurred_at']}"
        )
        if hit.get("superseded_by"):
            block += f"\nSuperseded by: {hit['superseded_by']} | valid_to={hit.get('valid_to') or '-'}"
        if hit.get("copies"):
            block += f"\nCopies: {', '.join(hit['copies'])}"
        if hit.get("kind") == "turn":  # an indexed log item: where to replay_memory around it
            block += f"\nConversation: {hit['provenance'].get('conversation_id')} | seq={hit['provenance'].get('seq')}"
        blocks.append(block)
    return "\n\n".join(blocks)


def public_hits(hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Hits with the public profile's fields only (no lifecycle fields)."""
    return [{name: hit[name] for name in PUBLIC_HIT_FIELDS} for hit in hits]
