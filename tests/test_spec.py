"""docs/spec.md is kept equal to the code it promises: every parameter table to its parameter model (names,
types, bounds, defaults, the tool profile a parameter is on) and the export format to what `export` writes and
`import` reads. A parameter added to a model, or a record kind to the exporter, without the spec fails here."""

from __future__ import annotations

import inspect
import io
import json
import re
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field
from spec_tables import (
    default_matches,
    names,
    plain,
    schema,
    spec_bounds,
    spec_default,
    spec_text,
    spec_type,
    table_after,
)
from storage_support import remember

from memory_server.admin import export
from memory_server.admin.export_lines import CONVERSATION_FIELDS, LOG_FIELDS, MEMORY_FIELDS, SITE_FIELDS
from memory_server.api.mcp.memory_tools import PUBLIC_CONTEXT, PUBLIC_RECALL, PUBLIC_REMEMBER, PUBLIC_SEARCH
from memory_server.arguments import Params
from memory_server.logs import params as log_params
from memory_server.memories import params as memory_params
from memory_server.storage.factory import open_storage

from conftest import make_settings

# Each model with a table: where the table is in docs/spec.md, and the parameters of the public tool profile
# (None: the table has no profile column).
TABLES: dict[type[Params], tuple[str, tuple[str, ...] | None]] = {
    log_params.AppendParams: ("### append_memory", None),
    log_params.TailParams: ("### recall_memory", None),
    log_params.ReplayParams: ("### replay_memory", None),
    log_params.ListConversationsParams: ("### list_conversations", None),
    memory_params.RecallParams: ("### recall", PUBLIC_RECALL),
    memory_params.SearchParams: ("### search_memory", PUBLIC_SEARCH),
    memory_params.ContextParams: ("### recall_context", PUBLIC_CONTEXT),
    memory_params.ReferenceParams: ("### forget", None),
    memory_params.ListMemoriesParams: ("**Listing**", None),
}
# remember and PATCH take the caller's fields of the table of a memory.
MEMORY_TABLE = "### The memory"
FIELD_MODELS: tuple[type[Params], ...] = (memory_params.RememberParams, memory_params.UpdateParams)
# Models with no table of their own; each with the reason.
EXCUSED = {
    memory_params.FilterParams: "the filters recall, search_memory and recall_context share: checked in theirs",
    log_params.DeleteConversationParams: "its one parameter is the path segment of DELETE /v1/conversations/{id}",
    memory_params.ActivityParams: "the console's activity page (docs/console.md), not a tool or route",
}
RANGE = re.compile(r"\d+–\d+|at most \d+|≥ \d+")


def parameter_models() -> set[type[Params]]:
    found = set()
    for module in (log_params, memory_params):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Params) and value.__module__ == module.__name__:
                found.add(value)
    return found


def arguments_rule(name: str) -> str:
    """The rule the Arguments section's table of recurring values gives `name` ("" if none)."""
    for row in table_after("## Arguments"):
        if name in names(row["value"]):
            return plain(row["rule"])
    return ""


def deferred(cell: str, name: str, bounds: str) -> bool:
    """A bounds cell that points to the Arguments section, whose table of recurring values gives the bounds."""
    return "Arguments" in cell and bounds in arguments_rule(name)


def differences(model: type[Params], marker: str, public: tuple[str, ...] | None, text: str | None = None) -> list[str]:
    """How the spec's table after `marker` and the model disagree, one line each (none: they agree)."""
    shown = schema(model)
    props, required = shown["properties"], set(shown.get("required", ()))
    rows = {name: row for row in table_after(marker, text) for name in names(next(iter(row.values())))}
    found = [f"{name}: in the model, not in the spec" for name in props if name not in rows]
    found += [f"{name}: in the spec, not in the model" for name in rows if name not in props]
    for name in props.keys() & rows.keys():
        row, prop = rows[name], props[name]
        if "type" in row and plain(row["type"]) != spec_type(prop):
            found.append(f"{name}: type {plain(row['type'])!r} in the spec, {spec_type(prop)!r} in the model")
        bounds = spec_bounds(prop)
        if "bounds" in row:
            cell = plain(row["bounds"])
            if bounds is None and RANGE.search(cell):
                found.append(f"{name}: the spec bounds it ({cell!r}), the model does not")
            elif bounds is not None and bounds not in cell and not deferred(cell, name, bounds):
                found.append(f"{name}: bounds {bounds!r} in the model, {cell!r} in the spec")
        default = spec_default(prop, name in required)
        if not default_matches(row["default"], default):
            found.append(f"{name}: default {default!r} in the model, {plain(row['default'])!r} in the spec")
        if public is not None and row["profile"] != ("both" if name in public else "full"):
            found.append(f"{name}: profile {row['profile']!r} in the spec, public is {public}")
    return found


def test_every_parameter_model_has_its_table_or_a_reason() -> None:
    assert parameter_models() == set(TABLES) | set(FIELD_MODELS) | set(EXCUSED)
    assert all(EXCUSED.values())


@pytest.mark.parametrize("model", list(TABLES), ids=lambda model: model.__name__)
def test_a_parameter_table_says_what_its_model_says(model: type[Params]) -> None:
    marker, public = TABLES[model]
    assert differences(model, marker, public) == []


def test_remember_and_patch_take_the_callers_fields_of_a_memory() -> None:
    rows = table_after(MEMORY_TABLE)
    callers = [name for row in rows if row["set by"].startswith("caller") for name in names(row["field"])]
    for model in FIELD_MODELS:
        assert sorted(model.model_fields) == sorted(callers), model.__name__
    # Those marked (v2) are on the full profile only.
    later = {name for row in rows if "(v2)" in row["set by"] for name in names(row["field"])}
    assert sorted(PUBLIC_REMEMBER) == sorted(set(callers) - later)
    assert schema(memory_params.RememberParams)["required"] == ["content"]


def test_the_check_finds_a_parameter_or_a_bound_the_spec_lacks() -> None:
    """What a model changed without the spec looks like to the test above."""

    class Wider(memory_params.RecallParams):
        colour: Annotated[str | None, Field(description="A new filter.")] = None
        limit: Annotated[int, Field(ge=1, le=40)] = 5

    assert differences(Wider, "### recall", PUBLIC_RECALL + ("colour",)) == [
        "colour: in the model, not in the spec",
        "limit: bounds '1–40' in the model, '1–50' in the spec",
    ]
    without_kinds = "\n".join(line for line in spec_text().splitlines() if not line.startswith("| `kinds`"))
    assert differences(memory_params.SearchParams, "### search_memory", PUBLIC_SEARCH, without_kinds) == [
        "kinds: in the model, not in the spec"
    ]


def spec_records() -> dict[str, tuple[list[str], list[str], list[str]]]:
    """Each export record kind of the spec: its fields, the fields it has only when set, the keys of a nested
    object (the header's counts)."""
    records = {}
    for row in table_after("### Export and import (JSON Lines)"):
        spans = names(row["fields"])
        record = spans[0]
        kind = re.search(r'"kind": "(\w+)"', record)
        assert kind, record
        nested = [key for inner in re.findall(r":\s*\{([^{}]*)\}", record) for key in re.findall(r'"(\w+)"', inner)]
        flat = re.sub(r":\s*\{[^{}]*\}", ": {}", record)
        fields = re.findall(r'(?<!: )"(\w+)"', flat)
        records[kind.group(1)] = (fields, spans[1:] if "plus" in row["fields"] else [], nested)
    return records


async def test_export_records_are_the_exporters(tmp_path: Path) -> None:
    """A real export holding every kind of record: each kind and its fields as the spec lists them, the kinds
    the exporter's code writes, and the fields `import` reads."""
    storage = open_storage(make_settings(tmp_path / "data"))
    try:
        sid = storage.sites.create_site("acme", "hash-of-acme")
        assert storage.sites.set_log_indexing("acme", True)
        await storage.logs.append(sid, "conv-0001", ['{"n":0}'], None, index=False, bucket="room")
        remember(storage, sid, "a saved memory")
        snapshot = storage.snapshot(None)
        try:
            out = io.StringIO()
            export.write_export(snapshot, out, site=None, model="model-a")
        finally:
            snapshot.close()
    finally:
        storage.close()
    written: dict[str, dict[str, Any]] = {}
    for line in out.getvalue().splitlines():
        record = json.loads(line)
        written.setdefault(record["kind"], record)
    spec = spec_records()
    in_code = set(re.findall(r'"kind": "(\w+)"', inspect.getsource(export)))
    assert set(spec) == set(written) == in_code
    for kind, record in written.items():
        fields, optional, nested = spec[kind]
        assert list(record) == fields, kind
        if nested:
            assert list(record["counts"]) == nested
        if optional:
            assert set(fields) | set(optional) == MEMORY_FIELDS | {"kind", "site"}
    importer = {"log_item": LOG_FIELDS, "site": SITE_FIELDS, "conversation": CONVERSATION_FIELDS}
    for kind, accepted in importer.items():
        assert set(spec[kind][0]) == accepted | {"kind", "site"}, kind
