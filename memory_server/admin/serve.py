"""`memory-server serve`: the HTTP server (default) or the stdio MCP server."""

from __future__ import annotations

import logging
import os
import socket
import stat
import sys
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from memory_server.admin.common import DataDir, announce, app, fail, load_settings
from memory_server.local.sites import UNISSUED_SECRET as UNISSUED_SECRET  # the name others import
from memory_server.local.sites import create_stdio_site
from memory_server.settings import Settings

if TYPE_CHECKING:  # imported when used: the CLI starts fast
    from memory_server.index.base import VectorIndex
    from memory_server.services import Services
    from memory_server.storage.protocols import SiteStore

DEFAULT_SITE = "default"


@app.command()
def serve(
    transport: Annotated[str | None, typer.Option(help="http or stdio (MEMORY_TRANSPORT; default: http)")] = None,
    host: Annotated[str | None, typer.Option(help="Bind address (MEMORY_HOST; default: 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (MEMORY_PORT; default: 8765)")] = None,
    data_dir: DataDir = None,
) -> None:
    """Serve the MCP tools over streamable HTTP (default) or stdio."""
    settings = load_settings(transport=transport, host=host, port=port, data_dir=data_dir)
    from memory_server.logging_setup import configure_logging

    configure_logging(settings, stream=sys.stderr)
    if settings.transport == "stdio":
        _serve_stdio(settings)
    else:
        if _launched_for_stdio():
            logging.getLogger("memory_server.serve").warning(
                "stdin is a pipe and stdout is not a terminal, as when an MCP client starts this process to speak "
                "stdio, but the transport is HTTP; for stdio set MEMORY_TRANSPORT=stdio in the server's environment "
                "(a --transport stdio argument can be taken by a launcher such as the MCP Inspector)"
            )
        _serve_http(settings)


def _launched_for_stdio() -> bool:
    """Whether stdin is a pipe or socket and stdout no terminal: how MCP clients start a stdio server."""
    try:
        mode = os.fstat(0).st_mode
        return (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)) and not os.isatty(1)
    except OSError:  # no stdin or stdout at all
        return False


def _serve_http(settings: Settings) -> None:
    from memory_server.api import serving
    from memory_server.api.app import create_app
    from memory_server.auth.admin import ensure_site
    from memory_server.auth.bootstrap import bootstrap_or_exit
    from memory_server.local.paths import former_default_notice

    # The port first, then the index, then the database: a port in use, a second server on the same data
    # directory or a damaged database fail before anything is created, each with its own message. An index
    # built with another model is filled again in the background (memory_server/memories/reembedding.py).
    try:
        sock = serving.bind(settings.host, settings.port)
    except serving.PortInUse as exc:
        fail(exc)
    lock_fd = _take_store(settings)
    index = _open_index_for_serving(settings)
    services = _open_services_for_serving(settings, index)
    issued = _issue_unissued_secrets(services.storage.sites)  # sites a stdio server created
    bootstrap_or_exit(services.storage.sites)  # MEMORY_BOOTSTRAP_*: a pre-set credential, before the first-start one
    secret = ensure_site(services.storage.sites, DEFAULT_SITE)[1] if not services.storage.sites.sites() else None
    base = settings.public_url or settings.model_copy(update={"port": sock.getsockname()[1]}).public_base
    announce(
        settings,
        f"memory-server: MCP over streamable HTTP at {base}/mcp",
        console=f"{base}/ui/",
        data_directory=str(settings.data_dir.resolve()),
    )
    if secret is not None:
        announce(
            settings,
            f"first start: created site '{DEFAULT_SITE}' with a Basic credential (shown once); "
            f"connect with the header  Authorization: Basic base64('{DEFAULT_SITE}:<secret>')",
            username=DEFAULT_SITE,
            secret=secret,
        )
    for name, new in issued:
        announce(
            settings,
            f"first HTTP start: site '{name}' was created by a stdio server and had no secret; "
            "its Basic credential (shown once), for the console and HTTP clients:",
            username=name,
            secret=new,
        )
    if lock_fd is not None:
        _serve_local_clients(services, lock_fd, f"HTTP at {base}/mcp")
    notice = former_default_notice(settings.data_dir, explicit="data_dir" in settings.model_fields_set)
    if notice is not None:
        logging.getLogger("memory_server.serve").warning(notice)
    serving.run(create_app(settings, services=services, index=index), settings, sock)


def _take_store(settings: Settings) -> int | None:
    """With the embedded index the data directory is one process's: this server becomes the store's owner,
    taking it over from an owner that serves only stdio clients (they follow it here)."""
    if settings.index_backend != "embedded" or not hasattr(socket, "AF_UNIX"):
        return None
    from memory_server.local.paths import UnsafePath, store_paths
    from memory_server.local.takeover import StoreBusy, take_store
    from memory_server.version import __version__

    try:
        return take_store(store_paths(settings.data_dir), __version__)
    except (StoreBusy, UnsafePath, OSError) as exc:
        fail(exc)


def _serve_local_clients(services: Services, lock_fd: int, serving: str) -> None:
    """Local stdio clients' bridges join this server over the owner socket, in a thread of their own."""
    import threading

    import anyio

    from memory_server.api.owner.sessions import OwnerSocket, bind_socket
    from memory_server.local.paths import store_paths

    paths = store_paths(services.settings.data_dir)
    try:
        sock = bind_socket(paths)
    except OSError as exc:
        fail(RuntimeError(f"cannot listen for local clients at {paths.socket}: {exc.strerror or exc}"))
    owner = OwnerSocket(services, paths, serving=serving, lock_fd=lock_fd)
    services.closers.append(owner.unlink)  # at shutdown, SIGTERM's included (uvicorn exits by the signal after)
    threading.Thread(target=anyio.run, args=(owner.serve, sock), name="local-clients", daemon=True).start()


def _issue_unissued_secrets(sites: SiteStore) -> list[tuple[str, str]]:
    """Give every site a stdio server created (no secret was ever shown) a secret: the bootstrap one when it is
    configured for that site, else a new one, returned to be printed once."""
    from memory_server.auth.admin import rotate_site
    from memory_server.auth.bootstrap import BootstrapError, BootstrapSettings, read_secret
    from memory_server.auth.secrets import hash_secret

    try:
        config = BootstrapSettings()
        preset = read_secret(config)
    except (BootstrapError, ValueError):  # reported by bootstrap_or_exit, which runs next
        config, preset = None, None
    issued = []
    for site in sites.sites():
        credential = sites.credential(site.name)
        if credential is None or credential.secret_hash != UNISSUED_SECRET:
            continue
        if preset is not None and config is not None and config.site == site.name:
            sites.set_secret(site.name, hash_secret(preset))
        else:
            issued.append((site.name, rotate_site(sites, site.name)))
    return issued


def _open_index_for_serving(settings: Settings) -> VectorIndex:
    from memory_server.services import open_configured_index

    try:
        index = open_configured_index(settings)
    except Exception as exc:  # locked by another server, unreadable, unreachable: each says what to do
        fail(exc)
    try:
        index.info()  # a Qdrant server is first reached here: unreachable, the start fails saying so
    except Exception as exc:
        index.close()
        fail(exc)
    return index


def own_store(settings: Settings) -> NoReturn:
    """Own the store for local clients until idle or stopped (`memory-server owner run`, which a stdio
    client's bridge starts), then exit."""
    from memory_server.api.owner.daemon import run_owner
    from memory_server.logging_setup import configure_logging

    configure_logging(settings, stream=sys.stderr)
    code = run_owner(settings, open_services_or_raise)
    # The store is closed and the socket gone: a thread still finishing (the model's load, a maintenance
    # round) must not keep the process, and with it the next owner's way, open.
    logging.shutdown()
    os._exit(code)


def open_services_or_raise(settings: Settings) -> Services:
    """The services of a store's owner (memory_server/api/owner/daemon.py): a failure is its to report."""
    from memory_server.services import open_services

    services = open_services(settings, integrity_budget_s=settings.integrity_check_s)
    _warn_if_exposed(settings)
    return services


def _warn_if_exposed(settings: Settings) -> None:
    from memory_server.storage.files import exposed

    if settings.data_dir.is_dir() and exposed(settings.data_dir):
        logging.getLogger("memory_server").warning(
            "the data directory %s can be read by other users of this machine; run: chmod 700 %s",
            settings.data_dir,
            settings.data_dir,
        )


def _open_services_for_serving(settings: Settings, index: VectorIndex | None) -> Services:
    """The services over a checked database; warns about an exposed data directory."""
    from memory_server.services import open_services
    from memory_server.storage.health import DatabaseDamaged

    try:
        services = open_services(settings, integrity_budget_s=settings.integrity_check_s, nowait_sign_in=True)
    except (DatabaseDamaged, OSError) as exc:
        if index is not None:
            index.close()
        fail(exc)
    if index is not None:
        services.closers.append(index.close)
    _warn_if_exposed(settings)
    return services


def _serve_stdio(settings: Settings) -> None:
    """A bridge to the store's owner (memory_server/local/bridge.py), which it starts when there is none; where
    the platform has no Unix sockets, a server of its own."""
    if not hasattr(socket, "AF_UNIX"):
        _serve_stdio_alone(settings)
        return
    from memory_server.local.bridge import run_bridge

    run_bridge(settings.data_dir, explicit="data_dir" in settings.model_fields_set, site=settings.stdio_site)


def _serve_stdio_alone(settings: Settings) -> None:
    from memory_server.api.mcp.server import build_mcp

    services = _open_services_for_serving(settings, None)
    services.start_log_retention()
    try:
        services.load_memories()
    except Exception as exc:
        services.close()
        fail(exc)
    services.start_maintenance()
    create_stdio_site(services.storage.sites, settings.stdio_site)
    principal = services.local_principal(settings.stdio_site)
    mcp = build_mcp(services, local=lambda: principal)
    try:
        mcp.run(transport="stdio", show_banner=False)
    finally:
        services.close()
