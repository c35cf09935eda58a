"""One error hierarchy; each class is a stable code of the contract (docs/spec.md, "Errors").

    AppError
    ├── InvalidParameters        invalid_parameters        422
    ├── UnprocessableParameters  unprocessable_parameters  422
    ├── Unauthorized             unauthorized              401
    ├── Forbidden                forbidden                 403
    ├── NotFound                 not_found                 404
    ├── PayloadTooLarge          payload_too_large         413
    ├── RateLimited              rate_limited              429 (retryable after Retry-After seconds)
    └── Unavailable              unavailable               503 (retryable after Retry-After seconds)

Only the edges (MCP tools, REST routes, the HTTP auth middleware) turn these into responses.
"""

from __future__ import annotations


class AppError(Exception):
    code = "internal"
    status = 500
    retryable = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_dict(self) -> dict[str, object]:
        return {"error": {"code": self.code, "message": self.message, "retryable": self.retryable}}


class InvalidParameters(AppError):
    code = "invalid_parameters"
    status = 422


class UnprocessableParameters(AppError):
    code = "unprocessable_parameters"
    status = 422


class Unauthorized(AppError):
    code = "unauthorized"
    status = 401


class Forbidden(AppError):
    code = "forbidden"
    status = 403


class NotFound(AppError):
    code = "not_found"
    status = 404


class PayloadTooLarge(AppError):
    code = "payload_too_large"
    status = 413


class RateLimited(AppError):
    """Too many failed sign-ins from one client address; answered without checking the credential."""

    code = "rate_limited"
    status = 429
    retryable = True

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Unavailable(AppError):
    code = "unavailable"
    status = 503
    retryable = True
    # Seconds a client is told to wait (Retry-After): storage failures were already retried for seconds
    # inside the server, and a PostgreSQL failover or restart is over within a few.
    retry_after = 1
