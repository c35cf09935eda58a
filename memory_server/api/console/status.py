"""The status page: what the signed-in credential sees (memories, conversations, memories per day they
occurred) and how the server is set up (model, storage and index backends, index backlog)."""

from __future__ import annotations

import json
from typing import Any

import anyio
from starlette.responses import Response
from starlette.routing import Route

from memory_server.api.console.app import Console, Visit, signed_in
from memory_server.errors import AppError
from memory_server.memories.params import ActivityParams
from memory_server.services import Services


def routes(console: Console) -> list[Route]:
    return [Route("/status", signed_in(console, status_page), methods=["GET"])]


def setup(services: Services) -> dict[str, Any]:
    """The server's configuration and index backlog (blocking: reads the authority)."""
    settings = services.settings
    memories = services.memories
    backlog: int | None = None
    if memories is not None:
        follower = memories.follower
        backlog = follower.lag() if follower is not None else memories.outbox.backlog()
    return {
        "storage": services.storage.backend.label,
        "index": "embedded (Qdrant Edge)" if settings.index_backend == "embedded" else "server (Qdrant)",
        "model": memories.embedder.name if memories is not None else None,
        "engine": settings.embedding_engine,
        "backlog": backlog,
        "loading": services.memory_error or "loading",
    }


async def status_page(visit: Visit) -> Response:
    services = visit.console.services
    problems: list[AppError] = []
    activity: dict[str, Any] | None = None
    conversations: int | None = None
    try:
        activity = await services.memory_ops.activity(visit.principal, ActivityParams())
    except AppError as exc:  # the model is still loading: the rest of the page still says something
        problems.append(exc)
    if visit.principal.is_basic:
        conversations = await services.logs.count(visit.principal)
    per_day = activity["per_day"] if activity else []
    return visit.page(
        "status.html",
        activity=activity,
        conversations=conversations,
        problems=problems,
        setup=await anyio.to_thread.run_sync(setup, services),
        per_day=per_day,
        days_json=json.dumps([d["day"] for d in per_day]),
        counts_json=json.dumps([d["count"] for d in per_day]),
        occurred_total=sum(d["count"] for d in per_day),
    )
