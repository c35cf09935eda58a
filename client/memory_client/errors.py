"""One exception per error code of the server (docs/spec.md, "Errors"), plus the transport failures a client
sees before any code exists.

    MemoryServerError                 code, message, retryable, status
    ├── InvalidParameters             invalid_parameters        422
    ├── UnprocessableParameters       unprocessable_parameters  422
    ├── Unauthorized                  unauthorized              401
    ├── Forbidden                     forbidden                 403
    ├── NotFound                      not_found                 404
    ├── PayloadTooLarge               payload_too_large         413
    └── Unavailable                   unavailable               503, any 5xx, 429 (retryable)
        └── TransportError            connection refused/reset, timeouts (no status)

`retryable` is what the server said (or True for every 5xx and transport failure): the same request may
succeed later. The permanent ones are a property of the request, not of the moment.
"""

from __future__ import annotations

from typing import Any


class MemoryServerError(Exception):
    """A failed call. `code` is the server's error code; `status` the HTTP status (None when no response came)."""

    code: str = "error"
    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        retryable: bool | None = None,
        retry_after: float | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if retryable is not None:
            self.retryable = retryable
        self.status = status
        self.retry_after = retry_after  # seconds, from a Retry-After header
        self.body = body  # the decoded JSON error body, when there was one

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status!r}, message={self.message!r})"


class InvalidParameters(MemoryServerError):
    code = "invalid_parameters"


class UnprocessableParameters(MemoryServerError):
    code = "unprocessable_parameters"


class Unauthorized(MemoryServerError):
    code = "unauthorized"


class Forbidden(MemoryServerError):
    code = "forbidden"


class NotFound(MemoryServerError):
    code = "not_found"


class PayloadTooLarge(MemoryServerError):
    code = "payload_too_large"


class Unavailable(MemoryServerError):
    code = "unavailable"
    retryable = True


class TransportError(Unavailable):
    """No HTTP response: connection refused or reset, DNS failure, a timeout. Always retryable."""


BY_CODE: dict[str, type[MemoryServerError]] = {
    cls.code: cls
    for cls in (
        InvalidParameters,
        UnprocessableParameters,
        Unauthorized,
        Forbidden,
        NotFound,
        PayloadTooLarge,
        Unavailable,
    )
}

# When a response carries no error body of the server's (a proxy's page, say), its status decides.
BY_STATUS: dict[int, type[MemoryServerError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: NotFound,
    413: PayloadTooLarge,
    422: InvalidParameters,
    429: Unavailable,
}

# Errors of one item (or a batch's size): splitting the batch isolates them. Every other failure is a
# property of the moment (retry) or of the configuration (retry too: fixing it must not lose the buffer).
ITEM_ERRORS: tuple[type[MemoryServerError], ...] = (InvalidParameters, PayloadTooLarge)
