"""recall_context: pack ranked memories into a bounded context, and render it as text (docs/spec.md,
"recall_context").

Candidates come ranked as for `recall`; they are packed in rank order while `max_items` and `max_tokens`
hold. The first item that would cross the token budget is shortened to fit if at least
MIN_USEFUL_TOKENS of it fit, otherwise dropped; every ranked candidate after it counts as dropped too.
`used_tokens` is the token count of the rendered body, so `used_tokens <= max_tokens` always holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

VERSION = "1"
SEPARATOR = "\n\n"
MIN_USEFUL_TOKENS = 8  # a shorter fragment of a memory is more likely to mislead than to help


class Tokens(Protocol):
    def count(self, text: str) -> int: ...

    def truncate(self, text: str, max_tokens: int) -> str: ...


@dataclass
class Pack:
    max_items: int
    max_tokens: int
    items: list[dict[str, Any]] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)
    dropped: int = 0
    shortened: int = 0

    @property
    def body(self) -> str:
        return SEPARATOR.join(self.blocks)


def pack(hits: Sequence[dict[str, Any]], *, max_items: int, max_tokens: int, tokens: Tokens) -> Pack:
    result = Pack(max_items=max_items, max_tokens=max_tokens)
    crossed = False
    for hit in hits[:max_items]:
        if crossed:
            result.dropped += 1
            continue
        prefix = f"[{len(result.blocks) + 1}] "
        block = prefix + hit["content"]
        if tokens.count(SEPARATOR.join([*result.blocks, block])) <= max_tokens:
            _include(result, hit, block, shortened=False)
            continue
        crossed = True
        part = _shortened(result.blocks, prefix, hit["content"], max_tokens, tokens)
        if part is None:
            result.dropped += 1
        else:
            result.shortened += 1
            _include(result, hit, prefix + part, shortened=True)
    return result


def _shortened(blocks: list[str], prefix: str, content: str, max_tokens: int, tokens: Tokens) -> str | None:
    room = max_tokens - tokens.count(SEPARATOR.join([*blocks, prefix]))
    if room < MIN_USEFUL_TOKENS:
        return None
    part = tokens.truncate(content, room)
    # Joining can merge tokens across the seam; trim until the whole body fits.
    while part and tokens.count(SEPARATOR.join([*blocks, prefix + part])) > max_tokens:
        part = tokens.truncate(part, max(0, tokens.count(part) - 1))
    part = part.rstrip()
    if tokens.count(part) < MIN_USEFUL_TOKENS:
        return None
    return part


def _include(result: Pack, hit: dict[str, Any], block: str, *, shortened: bool) -> None:
    result.blocks.append(block)
    result.items.append(
        {
            "reference": hit["reference"],
            "type": hit["type"],
            "location": hit["location"],
            "score": hit["score"],
            "occurred_at": hit["occurred_at"],
            "content": block.split("] ", 1)[1],
            "shortened": shortened,
        }
    )


def structured(result: Pack, *, tokens: Tokens, plan: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": VERSION,
        "retrieval_plan": plan,
        "budget": {
            "max_items": result.max_items,
            "max_tokens": result.max_tokens,
            "used_items": len(result.items),
            "used_tokens": tokens.count(result.body),
            "dropped": result.dropped,
            "shortened": result.shortened,
        },
        "items": result.items,
        "context_text": result.body,
    }


def render(pack_json: dict[str, Any], *, header: str) -> str:
    budget = pack_json["budget"]
    lines = [header, f"Items: {budget['used_items']}"]
    if budget["dropped"] + budget["shortened"] > 0:
        lines.append(
            f"Budget: used_items={budget['used_items']}/{budget['max_items']} "
            f"used_tokens={budget['used_tokens']}/{budget['max_tokens']} "
            f"dropped={budget['dropped']} shortened={budget['shortened']}"
        )
    for item in pack_json["items"]:
        lines.append(f"Reference: {item['reference']} | Type: {item['type']} | Location: {item['location'] or '-'}")
    lines.append("Context:")
    lines.append(pack_json["context_text"])
    return "\n".join(lines)
