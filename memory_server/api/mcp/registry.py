"""Tools built from operation parameter models: each tool's arguments are its model's fields.

fastmcp builds a tool's input schema and argument validation from a function's signature, so the signature
is made from the model's fields (the same annotations: bounds, defaults, descriptions, validators; the
server validates strictly, as the models do), and the tool body validates the arguments into the model.
The schema is then published with plain types for optional parameters (`plain_parameters`) and the
configured limits filled into the descriptions.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, TypeVar

from fastmcp import FastMCP
from fastmcp.tools.base import Tool, ToolResult
from fastmcp.utilities.types import NotSet, NotSetT
from mcp_types import ToolAnnotations
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from memory_server.arguments import Params, describe, described_schema
from memory_server.settings import Settings

P = TypeVar("P", bound=Params)


def register(
    mcp: FastMCP,
    settings: Settings,
    *,
    name: str,
    params: type[P],
    run: Callable[[P], Awaitable[ToolResult]],
    description: str,
    annotations: dict[str, Any],
    result: type[BaseModel] | None = None,
    only: Sequence[str] | None = None,
    output_schema: dict[str, Any] | NotSetT | None = NotSet,
) -> None:
    """Register tool `name` whose arguments are the fields of `params` (or only those named in `only`, the
    others keeping their defaults); `result` is the answer's model (the output schema)."""
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

    tool_function.__signature__ = inspect.Signature(parameters, return_annotation=result)  # type: ignore[attr-defined]
    tool_function.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": result}
    tool_function.__name__ = name
    made = Tool.from_function(
        tool_function,
        name=name,
        description=describe(description, settings),
        annotations=ToolAnnotations(**annotations),
        output_schema=output_schema,
        task=False,
    )
    made.parameters = plain_parameters(described_schema(made.parameters, settings))
    mcp.add_tool(made)


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
