"""A memory's versions: the chain of memories that superseded one another, oldest first, each valid from its
occurred_at until its successor's (its valid_to), read through the same `get` as every memory page; and the text
of the memories a page's badges point to ("superseded by", "replaces")."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from memory_server.auth.principal import Principal
from memory_server.errors import NotFound
from memory_server.memories.params import ReferenceParams
from memory_server.operations.memories import MemoryOperations

MAX_SHOWN = 20  # versions shown on either side of the memory (a longer chain ends in "and more")


async def versions(ops: MemoryOperations, principal: Principal, memory: dict[str, Any]) -> list[dict[str, Any]]:
    """The chain `memory` is in, oldest first: per version its `reference`, its fields as `memory` (None when
    this sign-in cannot see it: the walk stops there), `this` for the memory itself, and `more` on the last
    of a side cut at MAX_SHOWN. Empty for a memory that neither supersedes nor was superseded."""
    if memory["supersedes"] is None and memory["superseded_by"] is None:
        return []
    older = await walk(ops, principal, memory["supersedes"], "supersedes")
    newer = await walk(ops, principal, memory["superseded_by"], "superseded_by")
    return [*reversed(older), {"reference": memory["reference"], "memory": memory, "this": True, "more": False}, *newer]


async def walk(ops: MemoryOperations, principal: Principal, reference: str | None, link: str) -> list[dict[str, Any]]:
    """The versions from `reference` on, following `link`, nearest first."""
    found: list[dict[str, Any]] = []
    while reference is not None and len(found) < MAX_SHOWN:
        try:
            version: dict[str, Any] | None = await ops.get(principal, ReferenceParams(reference=reference))
        except NotFound:  # outside this sign-in's bounds (or just forgotten)
            version = None
        found.append({"reference": reference, "memory": version, "this": False, "more": False})
        reference = version[link] if version is not None else None
    if found and reference is not None:
        found[-1]["more"] = True
    return found


async def linked_texts(
    ops: MemoryOperations, principal: Principal, memories: Iterable[dict[str, Any]]
) -> dict[str, str | None]:
    """The content of each memory that one of `memories` supersedes or was superseded by, by reference (None:
    not visible to this sign-in), so a badge names it by its text rather than by its reference."""
    wanted = sorted({ref for m in memories for ref in (m.get("supersedes"), m.get("superseded_by")) if ref})
    found: dict[str, str | None] = {}
    for reference in wanted:
        try:
            found[reference] = str((await ops.get(principal, ReferenceParams(reference=reference)))["content"])
        except NotFound:  # outside this sign-in's bounds, or just forgotten
            found[reference] = None
    return found
