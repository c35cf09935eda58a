"""Who is calling, as the auth middleware left it in the ASGI scope (one place reads it for every route)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memory_server.auth.principal import Principal
from memory_server.errors import Unauthorized


def principal_of(scope: Mapping[str, Any]) -> Principal | None:
    principal = (scope.get("state") or {}).get("principal")
    return principal if isinstance(principal, Principal) else None


def require_principal(scope: Mapping[str, Any]) -> Principal:
    """The caller; the auth middleware always sets it on /mcp and /v1, so its absence is never trusted."""
    principal = principal_of(scope)
    if principal is None:
        raise Unauthorized("credentials required (Basic or Bearer)")
    return principal
