"""GET /healthz (the process is up) and GET /readyz (every tool can be served right now)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse

from memory_server.services import Services

Endpoint = Callable[[Request], Awaitable[JSONResponse]]


def readiness(services: Services) -> list[str]:
    """Why the server cannot serve every tool right now (empty when ready). Blocking: run it in a thread.

    The authority's own probe (see its `probe`); the model and the index are loaded; the index answers a
    count and sees no problem with itself (an embedded index checks its files on disk)."""
    reasons = services.storage.probe()
    memories = services.memories
    if memories is None:
        return [*reasons, f"model/index: {services.memory_error or 'loading'}"]
    try:
        memories.index.count()
    except Exception as exc:
        return [*reasons, f"index: {exc}"]
    return reasons + memories.index.problems()


def work_under_way(services: Services) -> dict[str, object]:
    """Background work that changes how answers are made while it lasts: memories embedded again with a new
    model (recall ranks by words alone meanwhile); log items waiting to be indexed (recall does not find them
    yet)."""
    progress = services.memories.reembedding.progress() if services.memories is not None else None
    work: dict[str, object] = {"reembedding": progress.as_dict()} if progress is not None else {}
    if services.log_indexer is not None:
        waiting = services.log_indexer.waiting()
        if waiting:
            work["log_indexing"] = {"waiting": waiting, "indexed": services.log_indexer.indexed}
    return work


def probes(services: Services) -> tuple[Endpoint, Endpoint]:
    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> JSONResponse:
        reasons = await anyio.to_thread.run_sync(readiness, services)
        if reasons:
            return JSONResponse({"status": "unavailable", "reasons": reasons}, status_code=503)
        return JSONResponse({"status": "ready", **await anyio.to_thread.run_sync(work_under_way, services)})

    return healthz, readyz
