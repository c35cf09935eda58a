"""Who is calling: a site, how they authenticated, what they may do and where."""

from __future__ import annotations

from dataclasses import dataclass

from memory_server.errors import Forbidden

READ = "memory:read"
WRITE = "memory:write"
SCOPES = (READ, WRITE)


@dataclass(frozen=True, slots=True)
class Principal:
    site_id: int
    site: str
    kind: str  # "basic", "bearer", "oauth" (an OAuth access token: as "bearer") or "local" (stdio)
    scopes: frozenset[str]
    teams: frozenset[str] | None = None  # None: unbounded
    projects: frozenset[str] | None = None
    buckets: frozenset[str] | None = None

    @property
    def is_basic(self) -> bool:
        return self.kind in ("basic", "local")

    def require(self, scope: str) -> None:
        if scope not in self.scopes:
            raise Forbidden(f"this credential lacks the {scope} scope")

    @property
    def bounded(self) -> bool:
        return any(b is not None for b in (self.teams, self.projects, self.buckets))


def site_principal(site_id: int, site: str, kind: str = "basic") -> Principal:
    """The site's own credential: full access."""
    return Principal(site_id=site_id, site=site, kind=kind, scopes=frozenset(SCOPES))
