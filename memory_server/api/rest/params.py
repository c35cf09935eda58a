"""The REST shapes of the operations' parameter models: query models and the append body, and `bounds`, which
states a parameter's range and default in a route's description.

They are built on the operation models (memory_server.logs.params, memory_server.memories.params), so each bound and
description stays written once. A query string carries only text, so query models read numbers from it
("5" is 5); JSON bodies keep the one strict rule of memory_server.arguments.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from memory_server.arguments import Params
from memory_server.logs.params import Bucket, Count, IdempotencyKey, Index, Items, Limit, Offset
from memory_server.memories.params import ListMemoriesParams

TEXT_VALUES = ConfigDict(strict=False)


class AppendBody(Params):
    """The append's body (the conversation is in the path)."""

    items: Items
    idempotency_key: IdempotencyKey = None
    index: Index = None
    bucket: Bucket = None


class ItemsQuery(Params):
    """Tail (count) or replay (offset and limit) of a log."""

    model_config = TEXT_VALUES

    count: Count | None = None
    offset: Offset | None = None
    limit: Limit | None = None


class ListMemoriesQuery(ListMemoriesParams):
    model_config = TEXT_VALUES


def bounds(model: type[BaseModel], name: str, default: object = None) -> str:
    """The range and default of `model`'s parameter `name` as the model's schema has them, for a route's
    description: "`limit` (1-50, default 5)". `default` stands in where the route's default is not the model's
    (a REST default for a parameter the operation requires, or a configured value such as "{min_score}")."""
    schema = model.model_json_schema()["properties"][name]
    ranged = next(s for s in [schema, *schema.get("anyOf", [])] if "minimum" in s)
    low, high = _number(ranged["minimum"]), ranged.get("maximum")
    span = f">= {low}" if high is None else f"{low}-{_number(high)}"
    given = schema.get("default") if default is None else default
    return f"`{name}` ({span})" if given is None else f"`{name}` ({span}, default {given})"


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)  # 1.0 -> "1", as the contract writes it
