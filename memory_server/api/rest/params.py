"""The REST shapes of the operations' parameter models: query models and the append body.

They are built on the operation models (memory_server.logs.params, memory_server.memories.params), so each bound and
description stays written once. A query string carries only text, so query models read numbers from it
("5" is 5); JSON bodies keep the one strict rule of memory_server.arguments.
"""

from __future__ import annotations

from pydantic import ConfigDict

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
