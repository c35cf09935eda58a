"""docs/spec.md read as data for tests/test_spec.py: its Markdown tables, and what the parameter models say about
each parameter in the words of those tables (type, bounds, default)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from memory_server.api.mcp.registry import plain_parameters
from memory_server.arguments import Params
from memory_server.memories.validation import SHORT_WORD

SPEC = Path(__file__).resolve().parent.parent / "docs" / "spec.md"
CELL_SPLIT = re.compile(r"(?<!\\)\|")
NAMES = re.compile(r"`([^`]+)`")
SETTING = re.compile(r"^`?MEMORY_[A-Z_]+`?")


def spec_text() -> str:
    return SPEC.read_text(encoding="utf-8")


def table_after(marker: str, text: str | None = None) -> list[dict[str, str]]:
    """The first table after the line that is `marker` (a heading) or starts with it (a bold paragraph), before
    the next heading: one dict per row, keyed by the header's cells."""
    lines = (text if text is not None else spec_text()).splitlines()
    bold = marker.startswith("**")
    starts = [n for n, line in enumerate(lines) if line == marker or (bold and line.startswith(marker))]
    assert len(starts) == 1, f"{marker!r} is on {len(starts)} lines of docs/spec.md"
    rows: list[list[str]] = []
    for line in lines[starts[0] + 1 :]:
        if line.startswith("#") and not rows:
            break
        if line.startswith("|"):
            rows.append([cell.strip() for cell in CELL_SPLIT.split(line.strip())[1:-1]])
        elif rows:
            break
    assert len(rows) > 2, f"no table after {marker!r} in docs/spec.md"
    header, _, *body = rows
    return [dict(zip(header, row, strict=True)) for row in body]


def names(cell: str) -> list[str]:
    """The backticked names of a table's first cell (`bucket`, `project` → bucket, project)."""
    return NAMES.findall(cell)


def plain(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def schema(model: type[Params]) -> dict[str, Any]:
    """The model's input schema as clients see it (optional parameters as their plain types)."""
    return plain_parameters(model.model_json_schema())


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def spec_type(prop: dict[str, Any]) -> str:
    """A parameter's type in the words of the spec's tables."""
    kind = prop.get("type")
    if kind == "array":
        items = prop["items"]
        if "enum" in items:
            return "array of " + ", ".join(items["enum"])
        return "array of words" if spec_type(items) == "word" else f"array of {spec_type(items)}s"
    if kind == "string":
        if "enum" in prop:
            return "one of " + ", ".join(prop["enum"])
        if prop.get("pattern") == SHORT_WORD.pattern:
            return "word"
        return "timestamp" if prop.get("format") == "date-time" else "string"
    return {"object": "JSON object", "integer": "integer", "number": "number", "boolean": "boolean"}[str(kind)]


def spec_bounds(prop: dict[str, Any]) -> str | None:
    """A parameter's numeric bounds as the spec writes them ("1–50", "≥ 0", "1–128 characters", "at most
    32"), or None when it has none."""
    unit = {"string": " characters"}.get(str(prop.get("type")), "")
    for low_key, high_key in (("minimum", "maximum"), ("minLength", "maxLength"), ("minItems", "maxItems")):
        low, high = prop.get(low_key), prop.get(high_key)
        if low is not None and high is not None:
            return f"{_number(low)}–{_number(high)}{unit}"
        if high is not None:
            return f"at most {_number(high)}{unit}"
        if low is not None and low_key == "minimum":
            return f"≥ {_number(low)}"
    return None


def spec_default(prop: dict[str, Any], required: bool) -> str:
    """A parameter's default as the spec's default column begins: required, none, or the value."""
    if required:
        return "required"
    if "default" not in prop:
        return "none"
    value = prop["default"]
    return str(value).lower() if isinstance(value, bool) else str(value)


def default_matches(cell: str, expected: str) -> bool:
    """A default cell starts with the default; none may be written as the setting that decides it."""
    written = plain(cell)
    if expected == "none" and SETTING.match(cell):
        return True
    return written == expected or written.startswith((f"{expected} ", f"{expected}:", f"{expected} ("))
