"""Tools built from operation parameter models: each tool's arguments are its model's fields.

fastmcp builds a tool's input schema and argument validation from a function's signature, so the signature
is made from the model's fields (the same annotations: bounds, defaults, descriptions, validators; the
server validates strictly, as the models do), and the tool body validates the arguments into the model.
The schema is then published with plain types for optional parameters (`plain_parameters`) and the
configured limits filled into the descriptions.

Every byte of the tool list is paid for in each conversation of every client, so the list holds what a model
needs to choose and call a tool and nothing else: the parameters carry the short descriptions of
memory_server.api.mcp.descriptions (the bounds are in the schema), fastmcp's empty `_meta` goes, and no tool has
an output schema (models are not shown one; the answers are in docs/spec.md, each result carries its structured
content and a text block all the same).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any, TypeVar

from fastmcp import FastMCP
from fastmcp.tools.base import ToolResult
from fastmcp.tools.function_tool import FunctionTool
from mcp_types import Tool as WireTool
from mcp_types import ToolAnnotations
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from memory_server.arguments import Params, describe, described_schema
from memory_server.settings import Settings

P = TypeVar("P", bound=Params)


class McpTool(FunctionTool):
    """A tool listed without fastmcp's own `_meta` (an empty tag list, which no client reads)."""

    def to_mcp_tool(self, **overrides: Any) -> WireTool:
        listed = super().to_mcp_tool(**overrides)
        if listed.meta == {"fastmcp": {"tags": []}}:
            listed.meta = None
        return listed


def register(
    mcp: FastMCP,
    settings: Settings,
    *,
    name: str,
    params: type[P],
    run: Callable[[P], Awaitable[ToolResult]],
    description: str,
    annotations: dict[str, Any],
    notes: Mapping[str, str],
    only: Sequence[str] | None = None,
) -> None:
    """Register tool `name` whose arguments are the fields of `params` (or only those named in `only`, the
    others keeping their defaults); `notes` are the parameters' descriptions over MCP, by name."""
    fields = {n: f for n, f in params.model_fields.items() if only is None or n in only}
    parameters = [
        inspect.Parameter(
            n,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if f.is_required() else f.default,
            annotation=Annotated[f.annotation, _without_default(f)],
        )
        for n, f in fields.items()
    ]

    async def tool_function(**arguments: Any) -> ToolResult:
        return await run(params.model_validate(arguments))

    tool_function.__signature__ = inspect.Signature(parameters, return_annotation=ToolResult)  # type: ignore[attr-defined]
    tool_function.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": ToolResult}
    tool_function.__name__ = name
    made = McpTool.from_function(
        tool_function,
        name=name,
        description=describe(description, settings),
        annotations=ToolAnnotations(**annotations),
        output_schema=None,  # see the module's docstring
        task=False,
    )
    made.parameters = plain_parameters(described_schema(_noted(made.parameters, notes), settings))
    mcp.add_tool(made)


def _noted(schema: dict[str, Any], notes: Mapping[str, str]) -> dict[str, Any]:
    """The input schema with each parameter's description replaced by its note, where it has one."""
    noted = copy.deepcopy(schema)
    for name, prop in noted.get("properties", {}).items():
        if name in notes:
            prop["description"] = notes[name]
    return noted


def _without_default(field: FieldInfo) -> FieldInfo:
    """The field's constraints, description and validators; the default goes on the signature instead."""
    return FieldInfo.merge_field_infos(field, default=PydanticUndefined)


def plain_parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """The input schema with each optional parameter as its plain type: `anyOf: [T, null]` becomes T and
    `default: null` goes. Some clients send a list parameter as a string when they see `anyOf`, and several
    LLM providers' function calling rejects or mangles it; absence already says "unset"."""
    plain = copy.deepcopy(schema)
    for prop in plain.get("properties", {}).values():
        branches = prop.get("anyOf")
        if isinstance(branches, list):
            kept = [branch for branch in branches if branch != {"type": "null"}]
            if len(kept) == 1 and len(kept) < len(branches):
                merged = {**kept[0], **{key: value for key, value in prop.items() if key != "anyOf"}}
                prop.clear()
                prop.update(sorted(merged.items()))  # the order pydantic writes the other parameters in
        if "default" in prop and prop["default"] is None:
            del prop["default"]
    leftover = _nullable_paths(plain)
    if leftover:  # a parameter type this rewrite does not flatten: fix the annotation, never ship it
        raise ValueError(f"input schema still has anyOf or null at {leftover}")
    return plain


def _nullable_paths(node: Any, path: str = "") -> list[str]:
    if isinstance(node, dict):
        found = [path or "/"] if "anyOf" in node or node.get("type") == "null" else []
        for key, value in node.items():
            found += _nullable_paths(value, f"{path}/{key}")
        return found
    if isinstance(node, list):
        return [p for i, item in enumerate(node) for p in _nullable_paths(item, f"{path}/{i}")]
    return []
