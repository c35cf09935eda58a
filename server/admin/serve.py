"""`memory-server serve`: the HTTP server (default) or the stdio MCP server."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from server.admin.common import DataDir, announce, app, fail, load_settings
from server.settings import Settings

if TYPE_CHECKING:  # imported when used: the CLI starts fast
    from server.index.base import VectorIndex
    from server.services import Services

DEFAULT_SITE = "default"


@app.command()
def serve(
    transport: Annotated[str | None, typer.Option(help="http or stdio (MEMORY_TRANSPORT).")] = None,
    host: Annotated[str | None, typer.Option(help="Bind address (MEMORY_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (MEMORY_PORT).")] = None,
    data_dir: DataDir = None,
) -> None:
    """Serve the MCP tools over streamable HTTP (default) or stdio."""
    settings = load_settings(transport=transport, host=host, port=port, data_dir=data_dir)
    from server.logging_setup import configure_logging

    configure_logging(settings, stream=sys.stderr)
    if settings.transport == "stdio":
        _serve_stdio(settings)
    else:
        _serve_http(settings)


def _serve_http(settings: Settings) -> None:
    from server.api import serving
    from server.api.app import create_app
    from server.auth.admin import ensure_site
    from server.auth.bootstrap import bootstrap_or_exit

    # The port first, then the index, then the database: a port in use, a second server on the same data
    # directory or a damaged database fail before anything is created, each with its own message. An index
    # built with another model is filled again in the background (server/memories/reembedding.py).
    try:
        sock = serving.bind(settings.host, settings.port)
    except serving.PortInUse as exc:
        fail(exc)
    index = _open_index_for_serving(settings)
    services = _open_services_for_serving(settings, index)
    bootstrap_or_exit(services.storage.sites)  # MEMORY_BOOTSTRAP_*: a pre-set credential, before the first-start one
    secret = ensure_site(services.storage.sites, DEFAULT_SITE)[1] if not services.storage.sites.sites() else None
    announce(settings, f"memory-server: MCP over streamable HTTP at http://{settings.host}:{settings.port}/mcp",
             data_directory=str(settings.data_dir.resolve()))
    if secret is not None:
        announce(settings, f"first start: created site '{DEFAULT_SITE}' with a Basic credential (shown once); "
                           f"connect with the header  Authorization: Basic base64('{DEFAULT_SITE}:<secret>')",
                 username=DEFAULT_SITE, secret=secret)
    serving.run(create_app(settings, services=services, index=index), settings, sock)


def _open_index_for_serving(settings: Settings) -> VectorIndex:
    from server.services import open_configured_index

    try:
        return open_configured_index(settings)
    except Exception as exc:  # locked by another server, unreadable, unreachable: each says what to do
        fail(exc)


def _open_services_for_serving(settings: Settings, index: VectorIndex | None) -> Services:
    """The services over a checked database; warns about an exposed data directory."""
    from server.services import open_services
    from server.storage.files import exposed
    from server.storage.health import DatabaseDamaged

    try:
        services = open_services(settings, integrity_budget_s=settings.integrity_check_s, nowait_sign_in=True)
    except (DatabaseDamaged, OSError) as exc:
        if index is not None:
            index.close()
        fail(exc)
    if index is not None:
        services.closers.append(index.close)
    if settings.data_dir.is_dir() and exposed(settings.data_dir):
        logging.getLogger("memory_server").warning(
            "the data directory %s can be read by other users of this machine; run: chmod 700 %s",
            settings.data_dir, settings.data_dir)
    return services


def _serve_stdio(settings: Settings) -> None:
    from server.api.mcp.server import build_mcp

    services = _open_services_for_serving(settings, None)
    services.start_log_retention()
    try:
        services.load_memories()
    except Exception as exc:
        services.close()
        fail(exc)
    services.start_maintenance()
    principal = services.local_principal(settings.stdio_site)
    mcp = build_mcp(services, local=lambda: principal)
    try:
        mcp.run(transport="stdio", show_banner=False)
    finally:
        services.close()
