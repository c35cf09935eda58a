"""The credentials each route documents in OpenAPI, and the caller as the auth middleware left it.

AuthMiddleware has already authenticated every /v1 request; these dependencies only declare the schemes
(so the OpenAPI document shows them) and hand the route its Principal. Which credential an operation
accepts is the operation's own check; the log routes run it first (a Bearer token gets
unprocessable_parameters whatever else is wrong).
"""

from __future__ import annotations

import json
import re
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBasic, HTTPBasicCredentials, HTTPBearer

from memory_server.api.principal import require_principal
from memory_server.auth.principal import Principal
from memory_server.errors import InvalidParameters
from memory_server.operations.logs import require_basic

# A JSON string escape of a UTF-16 surrogate; only a lone one (no pair) is invalid text.
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class _DocumentedBasic(HTTPBasic):
    async def __call__(self, request: Request) -> None:  # type: ignore[override]  # declares, never checks
        return None


class _DocumentedBearer(HTTPBearer):
    async def __call__(self, request: Request) -> None:  # type: ignore[override]  # declares, never checks
        return None


basic_scheme = _DocumentedBasic(
    scheme_name="basicAuth",
    auto_error=False,
    description="The site's Basic credential (username = site name): full access, required by the "
    "conversation-log routes.",
)
bearer_scheme = _DocumentedBearer(
    scheme_name="bearerAuth",
    auto_error=False,
    description="A site token (`mst_...`) with memory:read and/or memory:write, optionally bounded to teams, "
    "projects and/or buckets. Saved-memory routes only.",
)


# The schemes document the credentials in the OpenAPI document; the auth middleware has checked them.
async def any_credential(
    request: Request,
    _basic: HTTPBasicCredentials | None = Security(basic_scheme),
    _bearer: HTTPAuthorizationCredentials | None = Security(bearer_scheme),
) -> Principal:
    return require_principal(request.scope)


async def basic_credential(request: Request, _basic: HTTPBasicCredentials | None = Security(basic_scheme)) -> Principal:
    """The operation's own Basic-only check, run before the request is validated: a Bearer caller learns
    that first, whatever else is wrong with the request."""
    principal = require_principal(request.scope)
    require_basic(principal)
    return principal


async def valid_unicode(request: Request) -> None:
    """JSON may escape a lone UTF-16 surrogate (\\ud800); Python decodes it into a str no storage can hold."""
    body = await request.body()
    if body and SURROGATE_ESCAPE.search(body):
        try:
            json.dumps(json.loads(body), ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidParameters(
                "the body holds a lone UTF-16 surrogate escape (\\ud800-\\udfff); text must be valid Unicode"
            ) from None
        except (ValueError, RecursionError):
            pass  # malformed JSON is reported by the body parser


# Module level: with postponed annotations, FastAPI resolves route annotations in the routes' module.
AnyCaller = Annotated[Principal, Depends(any_credential)]
BasicCaller = Annotated[Principal, Depends(basic_credential)]
