"""Settings, read once at the entry point (`memory_server.__main__` / the CLI) and passed down.

Every setting has an environment variable `MEMORY_<NAME>`; a command-line flag wins over it.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from memory_server.locations import default_data_dir


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MEMORY_", extra="ignore")

    data_dir: Path = Field(
        default_factory=default_data_dir,
        description=(
            "Where SQLite and the embedded index live. Unset: the per-user data location (~/.local/share/"
            "memory-server on Linux, ~/Library/Application Support/memory-server on macOS, "
            "%LOCALAPPDATA%\\memory-server on Windows), which every local client shares."
        ),
    )
    database_url: SecretStr | None = Field(
        None,
        description=(
            "postgresql://… : PostgreSQL is the authority (several replicas may share it); unset: SQLite in the "
            "data directory."
        ),
    )
    host: str = Field("127.0.0.1", description="HTTP bind address.")
    port: int = Field(8765, ge=0, le=65535, description="HTTP port.")
    transport: Literal["http", "stdio"] = Field("http", description="MCP transport for `serve`.")
    stdio_site: str = Field("default", description="The site a stdio server acts for (no credential).")
    owner_idle_s: float = Field(
        600.0,
        ge=0,
        description=(
            "Seconds the process that owns a store for stdio clients stays running, model loaded, once its last "
            "client has gone; then it exits and the next client starts it again."
        ),
    )

    tool_profile: Literal["full", "public"] = Field("full", description="Which tool parameters are exposed.")
    context_header: str = Field("### XMemo Context", description="First line of recall_context's text.")

    max_payload_bytes: int = Field(256 * 1024, ge=1, description="Largest log item payload, serialized.")
    max_batch_bytes: int = Field(4 * 1024 * 1024, ge=1, description="Largest append batch, serialized.")
    max_content_bytes: int = Field(32 * 1024, ge=1, description="Largest saved-memory content (UTF-8).")
    log_retention_interval_s: float = Field(
        60.0,
        gt=0,
        description=(
            "Seconds between two rounds of the task that deletes conversations past their site's log retention."
        ),
    )
    heap_trim_interval_s: float = Field(
        30.0,
        ge=0,
        description=(
            "Seconds between two returns of the heap's free memory to the system (glibc's malloc_trim; "
            "0: never). Without them the resident memory keeps what recall freed between writes."
        ),
    )
    max_request_bytes: int = Field(
        8 * 1024 * 1024, ge=1024, description="Largest HTTP request body; larger bodies get 413."
    )
    integrity_check_s: float = Field(
        3.0,
        ge=0,
        description=(
            "Seconds `serve` spends on the SQLite integrity check (PRAGMA quick_check) before opening the port; "
            "what is left is checked in the background and a damaged file shows in /readyz. 0: all of it in the "
            "background."
        ),
    )

    allowed_origins: str = Field(
        "",
        description="Comma-separated web origins (https://app.example.com) whose pages may call /mcp and /v1; "
        "a request with any other Origin header gets 403. Requests without Origin (non-browser clients) are "
        "not affected.",
    )
    max_connections: int = Field(
        1000,
        ge=1,
        description="Open HTTP connections at most (capped below the "
        "descriptor limit); at the cap the longest-idle connection is closed.",
    )
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Seconds a connection may take to send a request "
        "head (from connecting, or from the previous response).",
    )
    body_timeout_s: float = Field(60.0, gt=0, description="Seconds a request may take to send its body.")
    body_min_rate: int = Field(
        1024,
        ge=0,
        description=(
            "Bytes per second a request body must arrive at, on average, once its first 5 s are past (time the "
            "server itself is not reading does not count); a slower body's connection is closed. 0: no minimum."
        ),
    )
    keep_alive_s: int = Field(5, ge=1, description="Seconds an idle keep-alive connection stays open.")
    sign_in_failures_per_minute: int = Field(
        10, ge=1, description="Failed sign-ins per client address per minute before 429 with Retry-After."
    )
    trusted_proxies: str = Field(
        "",
        description=(
            "Comma-separated addresses or networks (127.0.0.1, 10.0.0.0/8) of reverse proxies whose X-Forwarded-For "
            "and X-Forwarded-Proto are believed, or * for every peer. Empty: none; the peer's own address is the "
            "client's (for the sign-in and registration limits, and the logs)."
        ),
    )

    public_url: str | None = Field(
        None,
        description=(
            "The externally visible base URL (https://memory.example.com behind a reverse proxy): the OAuth "
            "issuer, and the base of the /mcp resource and the metadata URLs. Unset: derived from the bind "
            "address (http://127.0.0.1:8765)."
        ),
    )
    oauth_access_token_s: int = Field(3600, ge=1, le=86400, description="Lifetime of an OAuth access token.")
    oauth_refresh_token_s: int = Field(
        30 * 86400,
        ge=60,
        description=(
            "Lifetime of an OAuth refresh token; each refresh issues a new one (an unused grant ends after it)."
        ),
    )
    oauth_code_s: int = Field(60, ge=1, le=60, description="Lifetime of an OAuth authorization code (at most 60 s).")
    oauth_requests_per_minute: int = Field(
        10,
        ge=1,
        description=(
            "Per client address per minute: client registrations (POST /register) accepted, and as many "
            "authorization requests (/authorize), counted apart; more get 429 with Retry-After."
        ),
    )
    oauth_unused_client_s: int = Field(
        86400,
        ge=1,
        description=(
            "Seconds a registered OAuth client that has never completed a sign-in is kept; then it is removed "
            "(it registers again). A client that signed in once is kept."
        ),
    )
    oauth_max_unused_clients: int = Field(
        10_000,
        ge=1,
        description=(
            "Registered OAuth clients that have never completed a sign-in, at most (all addresses); beyond, a "
            "registration removes the oldest such client of the address network holding the most (never one "
            "in the middle of a sign-in; if every one is, 503 with Retry-After)."
        ),
    )
    oauth_max_unused_clients_per_network: int = Field(
        1000,
        ge=1,
        description=(
            "Of oauth_max_unused_clients, at most this many registered from one network (an IPv4 /24, an IPv6 "
            "/48); beyond, a registration from it removes one of that network's, from its address holding the most."
        ),
    )
    oauth_max_unused_clients_per_address: int = Field(
        100,
        ge=1,
        description=(
            "Of oauth_max_unused_clients, at most this many registered from one client address (an IPv6 /64); "
            "beyond, a registration from it removes that address's oldest."
        ),
    )
    oauth_max_pending: int = Field(
        1000,
        ge=1,
        description=(
            "Authorization requests waiting on the consent page, at most (all addresses); beyond, a new one "
            "removes the oldest of the address network holding the most (one whose page was never opened first)."
        ),
    )
    oauth_max_pending_per_network: int = Field(
        100,
        ge=1,
        description=(
            "Of oauth_max_pending, at most this many from one network (an IPv4 /24, an IPv6 /48); beyond, a new "
            "one from it removes one of that network's, from its address holding the most."
        ),
    )
    oauth_max_pending_per_address: int = Field(
        10,
        ge=1,
        description=(
            "Of oauth_max_pending, at most this many from one client address (an IPv6 /64); beyond, a new one "
            "from it removes that address's oldest."
        ),
    )

    index_backend: Literal["embedded", "server"] = Field("embedded", description="Vector index backend.")
    qdrant_url: str | None = Field(None, description="Qdrant server URL for the server backend.")
    qdrant_api_key: str | None = Field(None, description="Qdrant API key for the server backend.")
    qdrant_collection: str = Field("memories", description="Qdrant collection name.")

    embedding_model: str | None = Field(None, description="Local sentence-transformers model directory.")
    embedding_threads: int = Field(
        1, ge=1, le=64, description="Threads the embedding model uses per call (onnxruntime intra-op or torch)."
    )
    embedding_engine: Literal["onnx", "torch"] = Field(
        "onnx", description="onnx (onnxruntime, no torch loaded) or torch (sentence-transformers)."
    )
    recall_ranking: Literal["production", "dense", "lexical"] = Field(
        "production", description="recall ranking: production (hybrid), or dense/lexical alone (baselines)."
    )
    recall_recency: bool = Field(
        True, description="Rank the newest relevant memories first when a query asks for the current state."
    )
    recall_dates: bool = Field(
        True, description="Rank memories dated in a period the query names (on Dec 4, 2023; in March) higher."
    )
    recall_speakers: bool = Field(
        True, description='Rank the memories said by the person a query names ("Nate: ...") higher.'
    )
    recall_answers: bool = Field(
        True, description="Rank memories holding the kind of answer a query asks for (a time, a number, a name) higher."
    )
    search_min_score: float = Field(
        0.5, ge=0.0, le=1.0, description="Default search_memory threshold (see docs/tools.md, Scores, for calibration)."
    )

    log_format: Literal["text", "json"] = Field("text", description="Log line format.")
    log_level: str = Field("INFO", description="Log level.")

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().startswith(("postgresql://", "postgres://")):
            raise ValueError("must be a postgresql:// URL (unset it to use SQLite in the data directory)")
        return value

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        return None if value is None or not value.strip() else check_public_url(value)

    @property
    def public_base(self) -> str:
        """The base URL clients reach this server at (no trailing slash)."""
        if self.public_url is not None:
            return self.public_url
        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "[::1]"}.get(self.host, self.host)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def mcp_resource(self) -> str:
        """The MCP endpoint as an OAuth protected resource (RFC 8707): what access tokens are bound to."""
        return f"{self.public_base}/mcp"

    @field_validator("trusted_proxies")
    @classmethod
    def _trusted_proxies(cls, value: str) -> str:
        for entry in (part.strip() for part in value.split(",")):
            if entry and entry != "*":
                try:
                    ipaddress.ip_network(entry)  # strict: 10.0.0.0/8, not 10.0.0.1/8
                except ValueError:
                    raise ValueError(
                        f"{entry!r} is not an IP address or network (127.0.0.1, 10.0.0.0/8) nor *"
                    ) from None
        return value

    @property
    def proxies(self) -> list[str]:
        """The trusted proxies, as uvicorn's `forwarded_allow_ips` takes them; empty: trust no one."""
        entries = [part.strip() for part in self.trusted_proxies.split(",") if part.strip()]
        return ["*"] if "*" in entries else entries

    @property
    def origins(self) -> frozenset[str]:
        return frozenset(o.strip().lower().rstrip("/") for o in self.allowed_origins.split(",") if o.strip())

    @property
    def db_path(self) -> Path:
        return self.data_dir / "memory.db"

    @property
    def index_path(self) -> Path:
        return self.data_dir / "index"


def check_public_url(value: str) -> str:
    """A base URL fit to be an OAuth issuer (RFC 8414): http(s), a host, no path, query, fragment or user;
    https unless the host is a loopback address (tokens must not cross a network in clear)."""
    try:
        parts = urlsplit(value.strip())
        host = parts.hostname or ""
        _ = parts.port  # raises ValueError for a port out of range
    except ValueError as exc:
        raise ValueError(f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not host:
        raise ValueError("must be an http:// or https:// URL with a host, e.g. https://memory.example.com")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError("must be a bare origin (scheme, host and port): serve the server at the root of its host")
    if parts.scheme != "https" and not _loopback(host):
        raise ValueError("must use https:// (plain http is accepted for loopback addresses only)")
    return f"{parts.scheme}://{parts.netloc.lower()}"


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower() == "localhost"
