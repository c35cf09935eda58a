"""The site a local (stdio) client acts for: no credential, the operating system's user is the credential."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when used: the CLI imports this module to start
    from memory_server.auth.principal import Principal
    from memory_server.services import Services
    from memory_server.storage.protocols import SiteStore

# The secret hash of a site a stdio client created: nobody was shown a secret, and no secret verifies against
# it (it is not an scrypt hash). The first HTTP start issues one and prints it.
UNISSUED_SECRET = "unissued"


def create_stdio_site(sites: SiteStore, name: str) -> None:
    """A stdio client needs no credential, so its site is created without one (UNISSUED_SECRET)."""
    from memory_server.auth.secrets import check_site_name
    from memory_server.errors import AppError

    if sites.site_id(name) is not None:
        return
    try:
        sites.create_site(check_site_name(name), UNISSUED_SECRET)
    except AppError:  # a bad site name is reported by local_principal; a concurrent creator won
        pass


def local_principal(services: Services, site: str) -> Principal:
    """Full access to `site`, created on first use."""
    create_stdio_site(services.storage.sites, site)
    return services.local_principal(site)
