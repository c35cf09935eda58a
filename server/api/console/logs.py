"""Conversation logs in the console: the list (newest activity first) and a viewer that replays one log a
page at a time, so a 100k-item log costs one page of reads. Logs need the site's Basic sign-in (SPEC): a
token-signed-in user is told so instead, by the operation's own refusal."""

from __future__ import annotations

from starlette.responses import Response
from starlette.routing import Route

from server.api.console.app import Console, Visit, signed_in
from server.api.console.forms import validated
from server.errors import UnprocessableParameters
from server.logs.params import ListConversationsParams, ReplayParams, TailParams

PAGE = 50
CONVERSATIONS_PAGE = 50


def routes(console: Console) -> list[Route]:
    return [
        Route("/conversations", signed_in(console, conversations_page), methods=["GET"]),
        Route("/conversations/{conversation_id}", signed_in(console, log_page), methods=["GET"]),
    ]


async def conversations_page(visit: Visit) -> Response:
    params = validated(ListConversationsParams, {"limit": CONVERSATIONS_PAGE, "cursor": visit.form.given("cursor")})
    try:
        answer = await visit.console.services.logs.conversations(visit.principal, params)
    except UnprocessableParameters as exc:
        return visit.page("conversations.html", status=exc.status, basic_only=exc, conversations=[],
                          next_cursor=None, first=True)
    return visit.page("conversations.html", basic_only=None, conversations=answer["conversations"],
                      next_cursor=answer["next_cursor"], first=params.cursor is None)


def pages(offset: int, limit: int, total: int) -> dict[str, int | None]:
    """Offsets of the first, previous, next and last pages around this one (None: there is none)."""
    step = max(limit, 1)
    last = max(0, (total - 1) // step * step)
    return {"first": 0 if offset > 0 else None, "previous": max(0, offset - step) if offset > 0 else None,
            "next": offset + step if offset + step < total else None,
            "last": last if offset < last else None}


async def log_page(visit: Visit) -> Response:
    conversation_id = visit.request.path_params["conversation_id"]
    form = visit.form
    params = validated(ReplayParams, {"conversation_id": conversation_id, "offset": form.given("offset") or 0,
                                      "limit": form.given("limit") or PAGE}, text_values=True)
    ops = visit.console.services.logs
    try:
        # seq is gapless from 0, so the last item's seq says how long the log is: one indexed read.
        tail = await ops.tail(visit.principal, validated(TailParams, {"conversation_id": conversation_id, "count": 1}))
        items = await ops.replay(visit.principal, params)
    except UnprocessableParameters as exc:
        return visit.page("conversation.html", status=exc.status, basic_only=exc, conversation_id=conversation_id,
                          items=[], total=0, params=params, pages=pages(0, PAGE, 0))
    total = tail[-1][0] + 1 if tail else 0
    return visit.page("conversation.html", basic_only=None, conversation_id=conversation_id, items=items,
                      total=total, params=params, pages=pages(params.offset, params.limit, total))
