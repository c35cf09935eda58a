"""The storage seam: what the rest of the server asks of its authority, whatever the backend.

Seven narrow protocols, each implemented once per backend (`memory_server.storage.sqlite`,
`memory_server.storage.postgres`): conversation logs, sites and tokens, OAuth clients and grants, saved memories,
the outbox to the vector index, the reads recall ranks from, and the words query expansion uses. No SQL,
connection or backend type appears in a signature.

Writes that callers await (`LogStore.append`) are coroutines; everything else blocks and is called from a
worker thread (the SQLite writer thread serialises writes; reads use per-thread connections).
Failures are AppErrors (`unavailable` for a busy, full or damaged store) or the records' own exceptions.

One module per store; `Storage`, the authority holding them all, is in storage.py. This package names them all.
"""

from memory_server.storage.protocols.candidates import CandidateStore
from memory_server.storage.protocols.logs import LogStore
from memory_server.storage.protocols.memories import MemoryStore
from memory_server.storage.protocols.oauth import OAuthStore
from memory_server.storage.protocols.outbox import OutboxStore
from memory_server.storage.protocols.sites import SiteStore
from memory_server.storage.protocols.storage import Snapshot, Storage
from memory_server.storage.protocols.words import WordStore

__all__ = [
    "CandidateStore",
    "LogStore",
    "MemoryStore",
    "OAuthStore",
    "OutboxStore",
    "SiteStore",
    "Snapshot",
    "Storage",
    "WordStore",
]
