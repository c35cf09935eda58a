"""Saved memories in the console: the list with its filters, search, one memory's page, adding, editing,
forgetting.

Each page is one operation of MemoryOperations called with the signed-in principal: a bounded token sees
only its bounds, a read-only one gets no edit controls, and a forged change is refused by the operation.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from memory_server.api.console.app import ROOT, Console, Visit, signed_in
from memory_server.api.console.fields import EDIT_FIELDS, FieldErrors, field_errors
from memory_server.api.console.forms import Form, day_start, json_object, validated, words
from memory_server.api.console.versions import linked_texts, versions
from memory_server.errors import AppError, Forbidden, InvalidParameters, NotFound, PayloadTooLarge
from memory_server.logs.params import ReplayParams
from memory_server.memories.params import (
    ListMemoriesParams,
    RecallParams,
    ReferenceParams,
    RememberParams,
    SearchParams,
    UpdateParams,
)
from memory_server.storage.records import BY_CREATED, BY_OCCURRED

LOG_PAGE = 50  # items per page of the log viewer a provenance link opens
FILTERS = ("bucket", "project", "team", "type", "tag", "from", "to")
ORDERS = {BY_OCCURRED: "newest occurred first", BY_CREATED: "newest saved first"}
DEFAULT_ORDER = BY_OCCURRED  # the date a list shows first is the one it is sorted by


def routes(console: Console) -> list[Route]:
    return [
        Route("/memories", signed_in(console, list_page), methods=["GET"]),
        Route("/search", signed_in(console, search_page), methods=["GET"]),
        Route("/memories/new", signed_in(console, add_page), methods=["GET"]),  # before the references: not one
        Route("/memories/new", signed_in(console, add), methods=["POST"]),
        Route("/memories/{reference}", signed_in(console, memory_page), methods=["GET"]),
        Route("/memories/{reference}", signed_in(console, edit), methods=["POST"]),
        Route("/memories/{reference}/forget", signed_in(console, forget_page), methods=["GET"]),
        Route("/memories/{reference}/forget", signed_in(console, forget), methods=["POST"]),
    ]


def list_params(form: Form, order: str) -> ListMemoriesParams:
    data: dict[str, Any] = {name: form.given(name) for name in ("bucket", "project", "team", "type", "cursor")}
    tags = words(form.get("tag"))
    data.update(
        tag=tags or None,
        occurred_after=day_start(form.given("from")),
        occurred_before=day_start(form.given("to"), next_day=True),
        limit=form.given("limit"),
        order=order,
    )
    return validated(ListMemoriesParams, data, text_values=True)


async def list_page(visit: Visit) -> Response:
    form = visit.form
    shown = {name: form.get(name) for name in FILTERS}
    filtered = any(shown.values())
    order = form.given("order") or DEFAULT_ORDER
    context: dict[str, Any] = {
        "filters": shown,
        "filtered": filtered,
        "order": order,
        "orders": ORDERS,
        "forgotten": form.given("forgotten"),
        "memories": [],
        "count": None,
        "next_url": None,
        "first_url": None,
        "linked": {},
    }
    ops = visit.console.services.memory_ops
    try:
        params = list_params(form, order)
        page = await ops.list(visit.principal, params)
        count = await ops.count_listed(visit.principal, params)
    except InvalidParameters as exc:
        return visit.page("memories.html", status=exc.status, error=exc, **context)
    kept = {name: value for name, value in shown.items() if value}
    if order != DEFAULT_ORDER:
        kept["order"] = order
    following = page["next_cursor"]
    context.update(
        memories=page["memories"],
        linked=await linked_texts(ops, visit.principal, page["memories"]),
        count=count,
        next_url=f"{ROOT}/memories?{urlencode({**kept, 'cursor': following})}" if following else None,
        first_url=f"{ROOT}/memories?{urlencode(kept)}" if params.cursor is not None else None,
    )
    return visit.page("memories.html", **context)


async def search_page(visit: Visit) -> Response:
    query, min_score = visit.form.get("q"), visit.form.given("min_score")
    ops = visit.console.services.memory_ops
    default = ops.settings.search_min_score
    context: dict[str, Any] = {
        "q": query,
        "min_score": min_score or "",
        "recall": None,
        "search": None,
        "threshold": default,
        "default_threshold": default,
        "linked": {},
    }
    if not query:
        return visit.page("search.html", **context)
    try:
        recall = validated(RecallParams, {"query": query, "limit": 10})
        search = validated(SearchParams, {"query": query, "limit": 10, "min_score": min_score}, text_values=True)
        context.update(
            recall=await ops.recall(visit.principal, recall),
            search=await ops.search(visit.principal, search),
            threshold=default if search.min_score is None else search.min_score,
        )
        context["linked"] = await linked_texts(ops, visit.principal, [*context["recall"], *context["search"]])
    except InvalidParameters as exc:
        return visit.page("search.html", status=exc.status, error=exc, **context)
    return visit.page("search.html", **context)


def log_link(provenance: dict[str, Any]) -> str | None:
    """The log viewer's page holding the entry a memory came from, when its provenance names one."""
    conversation, seq = provenance.get("conversation_id"), provenance.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        return None
    try:
        validated(ReplayParams, {"conversation_id": conversation, "offset": seq, "limit": LOG_PAGE})
    except AppError:
        return None
    page = f"offset={seq - seq % LOG_PAGE}&limit={LOG_PAGE}"
    return f"{ROOT}/conversations/{quote(str(conversation), safe='')}?{page}#item-{seq}"


async def read_memory(visit: Visit) -> dict[str, Any]:
    reference = validated(ReferenceParams, {"reference": visit.request.path_params["reference"]})
    return await visit.console.services.memory_ops.get(visit.principal, reference)


async def show_memory(
    visit: Visit,
    memory: dict[str, Any],
    *,
    status: int = 200,
    values: dict[str, str] | None = None,
    errors: FieldErrors | None = None,
) -> Response:
    return visit.page(
        "memory.html",
        status=status,
        memory=memory,
        log_link=log_link(memory["provenance"]),
        versions=await versions(visit.console.services.memory_ops, visit.principal, memory),
        linked=await linked_texts(visit.console.services.memory_ops, visit.principal, [memory]),
        values=values,
        errors=errors or FieldErrors(),
        saved=visit.form.given("saved") is not None,
        added=visit.form.given("added"),
    )


async def memory_page(visit: Visit) -> Response:
    return await show_memory(visit, await read_memory(visit))


def changes(form: Form, memory: dict[str, Any]) -> dict[str, Any]:
    """The fields the edit form changed, as a PATCH body: unchanged fields stay out (PATCH semantics), a
    blank optional field resets it to what remember defaults it to."""
    submitted: dict[str, Any] = {
        "content": form.get("content").replace("\r\n", "\n"),  # browsers send a textarea's lines as CRLF
        "type": form.given("type"),
        "location": form.given("location"),
        "project": form.given("project"),
        "team": form.given("team"),
        "bucket": form.given("bucket"),
        "tags": words(form.get("tags")),
        "occurred_at": form.get("occurred_at").strip(),
        "supersedes": form.given("supersedes"),
        "expires_at": form.given("expires_at"),
    }
    defaults = {"type": "note", "bucket": "default", "metadata": {}, "provenance": {}, "tags": []}
    submitted.update(json_fields(form))
    return {
        name: value
        for name, value in submitted.items()
        if (defaults.get(name) if value is None else value) != memory[name]
    }


def json_fields(form: Form) -> dict[str, Any]:
    """metadata and provenance as typed (blank: None), each read on its own so that both can be told wrong."""
    found: dict[str, Any] = {}
    errors = FieldErrors()
    for name in ("metadata", "provenance"):
        try:
            found[name] = json_object(name, form.get(name))
        except InvalidParameters as exc:
            errors.add(name, exc.message)
    if errors:
        raise errors.as_error()
    return found


def remember_fields(form: Form) -> dict[str, Any]:
    """The add form as `remember`'s parameters: a blank field is left out, so remember's default applies."""
    data: dict[str, Any] = {"content": form.get("content").replace("\r\n", "\n"), "tags": words(form.get("tags"))}
    names = ("type", "location", "project", "team", "bucket", "occurred_at", "supersedes", "expires_at")
    data.update({name: form.given(name) for name in names}, **json_fields(form))
    return {name: value for name, value in data.items() if value not in (None, [])}


async def add_page(visit: Visit) -> Response:
    return visit.page("remember.html", values=dict.fromkeys(EDIT_FIELDS, ""), errors=FieldErrors())


async def add(visit: Visit) -> Response:
    """A new memory through the same `remember` as MCP and REST; a refusal shows beside its field, the form kept."""
    try:
        params = validated(RememberParams, remember_fields(visit.form))
        answer = await visit.console.services.memory_ops.remember(visit.principal, params)
    except (InvalidParameters, PayloadTooLarge, NotFound, Forbidden) as exc:
        errors = field_errors(exc)
        if isinstance(exc, NotFound | Forbidden) and not errors.fields:
            raise  # this sign-in may not save memories: not a mistake in a field
        values = {name: visit.form.get(name) for name in EDIT_FIELDS}
        return visit.page("remember.html", status=exc.status, values=values, errors=errors)
    added = "new" if answer["created"] else "existing"
    return RedirectResponse(f"{ROOT}/memories/{quote(answer['reference'], safe='')}?added={added}", status_code=303)


async def edit(visit: Visit) -> Response:
    memory = await read_memory(visit)
    try:
        params = validated(UpdateParams, changes(visit.form, memory))
        # Even with nothing changed: the operation decides who may change (a read-only token is refused).
        await visit.console.services.memory_ops.update(visit.principal, memory["reference"], params)
    except (InvalidParameters, PayloadTooLarge, NotFound, Forbidden) as exc:
        errors = field_errors(exc)
        if isinstance(exc, NotFound | Forbidden) and not errors.fields:
            raise  # the memory is gone, or this sign-in may not change it: not a mistake in a field
        values = {name: visit.form.get(name) for name in EDIT_FIELDS}
        return await show_memory(visit, memory, status=exc.status, values=values, errors=errors)
    return RedirectResponse(f"{ROOT}/memories/{quote(memory['reference'], safe='')}?saved=1", status_code=303)


async def forget_page(visit: Visit) -> Response:
    return visit.page("forget.html", memory=await read_memory(visit))


async def forget(visit: Visit) -> Response:
    reference = validated(ReferenceParams, {"reference": visit.request.path_params["reference"]})
    await visit.console.services.memory_ops.forget(visit.principal, reference)
    return RedirectResponse(f"{ROOT}/memories?forgotten={quote(reference.reference, safe='')}", status_code=303)
