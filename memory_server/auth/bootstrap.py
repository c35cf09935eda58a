"""A pre-set site credential for deployments (docker compose, orchestrators) that cannot read a secret
printed once to the log.

    MEMORY_BOOTSTRAP_SITE          the site to create (default `default`)
    MEMORY_BOOTSTRAP_SECRET        its Basic secret, or
    MEMORY_BOOTSTRAP_SECRET_FILE   a file holding it (a docker secret: /run/secrets/<name>)

Applied by `serve` before the first-start site would be created. Like a database image's initial
password, the secret is used only to *create* the site: when the site already exists with another secret
(e.g. after `memory-server site rotate`), the stored secret is kept and a warning logged, so restarting a
container never brings back a secret that was rotated away. The secret is never logged.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from memory_server.auth.admin import create_site
from memory_server.auth.secrets import verify_secret
from memory_server.errors import InvalidParameters
from memory_server.storage.protocols import SiteStore

log = logging.getLogger("memory_server.bootstrap")

MIN_SECRET_LENGTH = 16
MAX_SECRET_LENGTH = 1024


class BootstrapSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MEMORY_BOOTSTRAP_", extra="ignore", env_ignore_empty=True)

    site: str = Field("default", description="The site a pre-set credential is for.")
    secret: SecretStr | None = Field(None, description="The site's Basic secret (at least 16 characters).")
    secret_file: Path | None = Field(None, description="A file holding the secret (e.g. a docker secret).")


class BootstrapError(Exception):
    """The bootstrap configuration cannot be applied; the message says what to fix (never the secret)."""


@dataclass(frozen=True)
class Outcome:
    site: str
    created: bool  # False: the site existed and kept its stored secret

    def describe(self) -> str:
        if self.created:
            return f"created site '{self.site}' with the pre-set Basic credential (username: {self.site})"
        return f"site '{self.site}' already exists; its stored secret is kept"


def read_secret(config: BootstrapSettings) -> str | None:
    if config.secret is not None and config.secret_file is not None:
        raise BootstrapError("set only one of MEMORY_BOOTSTRAP_SECRET and MEMORY_BOOTSTRAP_SECRET_FILE")
    if config.secret_file is not None:
        try:
            raw = config.secret_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BootstrapError(f"cannot read MEMORY_BOOTSTRAP_SECRET_FILE {config.secret_file}: {exc}") from None
        secret = raw.strip("\r\n")  # files written by editors and `echo` end with a newline
    elif config.secret is not None:
        secret = config.secret.get_secret_value()
    else:
        return None
    if not MIN_SECRET_LENGTH <= len(secret) <= MAX_SECRET_LENGTH:
        raise BootstrapError(
            f"the bootstrap secret must be {MIN_SECRET_LENGTH}-{MAX_SECRET_LENGTH} characters "
            "(generate one with: python -c 'import secrets; print(secrets.token_urlsafe(24))')"
        )
    if ":" in secret or not secret.isprintable():
        raise BootstrapError("the bootstrap secret must be printable and contain no ':'")
    return secret


def ensure_bootstrap_site(sites: SiteStore, site: str, secret: str) -> Outcome:
    """Create `site` with `secret` unless it exists (then its stored secret is kept)."""
    credential = sites.credential(site)
    if credential is not None:
        if not verify_secret(secret, credential.secret_hash):
            log.warning(
                "site '%s' exists with a different secret than the bootstrap one; keeping the stored secret "
                "(rotate it with `memory-server site rotate %s`)",
                site,
                site,
            )
        return Outcome(site, created=False)
    try:
        create_site(sites, site, secret=secret)
    except InvalidParameters:
        if sites.site_id(site) is None:
            raise
        return Outcome(site, created=False)  # another server created it meanwhile
    return Outcome(site, created=True)


def apply_bootstrap(sites: SiteStore, config: BootstrapSettings | None = None) -> Outcome | None:
    """Create the pre-set site if one is configured (read from MEMORY_BOOTSTRAP_* when `config` is None).
    Returns what happened, or None when nothing is configured. Raises BootstrapError on bad settings."""
    config = config if config is not None else BootstrapSettings()
    secret = read_secret(config)
    if secret is None:
        return None
    try:
        outcome = ensure_bootstrap_site(sites, config.site, secret)
    except InvalidParameters as exc:
        raise BootstrapError(f"MEMORY_BOOTSTRAP_SITE: {exc.message}") from None
    log.info("bootstrap: %s", outcome.describe())
    return outcome


def bootstrap_or_exit(sites: SiteStore) -> Outcome | None:
    """`serve`'s entry: apply MEMORY_BOOTSTRAP_*, or print what is wrong and exit 1 (never the secret)."""
    try:
        return apply_bootstrap(sites)
    except BootstrapError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
