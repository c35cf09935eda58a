"""The MCP server: the nine tools on the operations, with their error handling and metrics; each session lists
the tools its credential may call (memory_server.api.mcp.listing).

`INSTRUCTIONS` are those of a session that lists every tool (the site's Basic credential, stdio)."""

from __future__ import annotations

from collections.abc import Callable

from fastmcp import FastMCP
from fastmcp.server.dependencies import get_http_request

from memory_server.api.mcp.descriptions import INSTRUCTIONS
from memory_server.api.mcp.errors import ErrorMiddleware, quiet_expected_errors
from memory_server.api.mcp.listing import ToolListing
from memory_server.api.mcp.log_tools import register_log_tools
from memory_server.api.mcp.memory_tools import register_memory_tools
from memory_server.api.metrics import Metrics, ToolMetricsMiddleware
from memory_server.api.principal import require_principal
from memory_server.auth.principal import Principal
from memory_server.errors import Unauthorized
from memory_server.services import Services
from memory_server.version import __version__

__all__ = ["INSTRUCTIONS", "build_mcp", "principal_resolver"]


def principal_resolver(local: Callable[[], Principal] | None) -> Callable[[], Principal]:
    """Over HTTP the auth middleware put the Principal in the request's scope; over stdio it is `local`."""

    def current() -> Principal:
        try:
            request = get_http_request()
        except RuntimeError:
            request = None
        if request is not None:
            return require_principal(request.scope)
        if local is None:
            raise Unauthorized("credentials required")
        return local()

    return current


def build_mcp(
    services: Services, *, local: Callable[[], Principal] | None = None, metrics: Metrics | None = None
) -> FastMCP:
    # strict_input_validation: the one argument rule of memory_server.arguments (the models are strict too).
    mcp = FastMCP(
        "memory-server",
        instructions=INSTRUCTIONS,
        version=__version__,
        mask_error_details=True,
        strict_input_validation=True,
    )
    if metrics is not None:  # outside ErrorMiddleware, so it sees each call's final outcome
        mcp.add_middleware(ToolMetricsMiddleware(metrics, mcp))
    mcp.add_middleware(ErrorMiddleware(services.storage.health))
    quiet_expected_errors()
    current = principal_resolver(local)
    mcp.add_middleware(ToolListing(current))
    register_log_tools(mcp, services.logs, current, settings=services.settings)
    register_memory_tools(mcp, services.memory_ops, current, services.settings)
    return mcp
