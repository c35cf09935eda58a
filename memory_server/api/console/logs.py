"""Conversation logs in the console: the list (newest activity first), a viewer that replays one log a page
at a time (so a 100k-item log costs one page of reads) and shows chat messages as a conversation, and
deleting a log after a confirmation page. Logs need the site's Basic sign-in (docs/spec.md): a token-signed-in user
is told so instead, by the operation's own refusal."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from memory_server.api.console.app import ROOT, Console, Visit, signed_in
from memory_server.api.console.forms import validated
from memory_server.api.console.messages import entry
from memory_server.errors import AppError, UnprocessableParameters
from memory_server.logs.params import DeleteConversationParams, ListConversationsParams, ReplayParams, TailParams

PAGE = 50
CONVERSATIONS_PAGE = 50


def routes(console: Console) -> list[Route]:
    return [
        Route("/conversations", signed_in(console, conversations_page), methods=["GET"]),
        Route("/conversations/{conversation_id}", signed_in(console, log_page), methods=["GET"]),
        Route("/conversations/{conversation_id}/delete", signed_in(console, delete_page), methods=["GET"]),
        Route("/conversations/{conversation_id}/delete", signed_in(console, delete), methods=["POST"]),
    ]


async def deleted_notice(visit: Visit) -> dict[str, Any] | None:
    """What the page after a deletion says, from its query string: only about a conversation that is gone."""
    form = visit.form
    counts = {name: form.given(name) or "0" for name in ("items", "unlinked")}
    try:
        params = validated(DeleteConversationParams, {"conversation_id": form.given("deleted")})
    except AppError:
        return None
    if not all(value.isdigit() and len(value) < 19 for value in counts.values()):
        return None
    if await log_length(visit, params.conversation_id):
        return None
    return {
        "conversation_id": params.conversation_id,
        "items": int(counts["items"]),
        "unlinked": int(counts["unlinked"]),
    }


async def conversations_page(visit: Visit) -> Response:
    params = validated(ListConversationsParams, {"limit": CONVERSATIONS_PAGE, "cursor": visit.form.given("cursor")})
    try:
        answer = await visit.console.services.logs.conversations(visit.principal, params)
    except UnprocessableParameters as exc:
        return visit.page(
            "conversations.html",
            status=exc.status,
            basic_only=exc,
            conversations=[],
            next_cursor=None,
            first=True,
            deleted=None,
        )
    return visit.page(
        "conversations.html",
        basic_only=None,
        conversations=answer["conversations"],
        next_cursor=answer["next_cursor"],
        first=params.cursor is None,
        deleted=await deleted_notice(visit) if visit.form.given("deleted") else None,
    )


def pages(offset: int, limit: int, total: int) -> dict[str, int | None]:
    """Offsets of the first, previous, next and last pages around this one (None: there is none)."""
    step = max(limit, 1)
    last = max(0, (total - 1) // step * step)
    return {
        "first": 0 if offset > 0 else None,
        "previous": max(0, offset - step) if offset > 0 else None,
        "next": offset + step if offset + step < total else None,
        "last": last if offset < last else None,
    }


async def log_length(visit: Visit, conversation_id: str) -> int:
    """How many items the log has: seq is gapless from 0, so its last item's seq says (one indexed read)."""
    tail = await visit.console.services.logs.tail(
        visit.principal, validated(TailParams, {"conversation_id": conversation_id, "count": 1})
    )
    return tail[-1][0] + 1 if tail else 0


async def log_page(visit: Visit) -> Response:
    conversation_id = visit.request.path_params["conversation_id"]
    form = visit.form
    params = validated(
        ReplayParams,
        {"conversation_id": conversation_id, "offset": form.given("offset") or 0, "limit": form.given("limit") or PAGE},
        text_values=True,
    )
    try:
        total = await log_length(visit, conversation_id)
        items = await visit.console.services.logs.replay(visit.principal, params)
    except UnprocessableParameters as exc:
        return visit.page(
            "conversation.html",
            status=exc.status,
            basic_only=exc,
            conversation_id=conversation_id,
            entries=[],
            total=0,
            params=params,
            pages=pages(0, PAGE, 0),
        )
    return visit.page(
        "conversation.html",
        basic_only=None,
        conversation_id=conversation_id,
        entries=[entry(item) for item in items],
        total=total,
        params=params,
        pages=pages(params.offset, params.limit, total),
    )


async def delete_page(visit: Visit) -> Response:
    conversation_id = validated(
        DeleteConversationParams, {"conversation_id": visit.request.path_params["conversation_id"]}
    ).conversation_id
    try:
        total = await log_length(visit, conversation_id)
    except UnprocessableParameters as exc:
        return visit.page(
            "delete_conversation.html", status=exc.status, basic_only=exc, conversation_id=conversation_id, total=0
        )
    return visit.page("delete_conversation.html", basic_only=None, conversation_id=conversation_id, total=total)


async def delete(visit: Visit) -> Response:
    params = validated(DeleteConversationParams, {"conversation_id": visit.request.path_params["conversation_id"]})
    deleted = await visit.console.services.logs.delete_conversation(visit.principal, params)
    query = urlencode(
        {
            "deleted": deleted["conversation_id"],
            "items": deleted["item_count"],
            "unlinked": deleted["memories_unlinked"],
        }
    )
    return RedirectResponse(f"{ROOT}/conversations?{query}", status_code=303)
