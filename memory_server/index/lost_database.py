"""A missing database beside an embedded index that holds points: damage, not a first start. Checked before the
database is opened (`open_services`, the admin commands), since opening it creates a new one."""

from __future__ import annotations

from memory_server.index.base import IndexLocked
from memory_server.index.edge import EdgeIndex
from memory_server.index.edge_files import INFO_FILE
from memory_server.settings import Settings
from memory_server.storage.backends import backend_of
from memory_server.storage.health import DatabaseDamaged


def refuse_lost_database(settings: Settings) -> None:
    """A missing database beside an embedded index that holds points is damage, not a first start: opening it
    would create a new site and secret, and start-up would then empty the index to match (the emptied-file
    case is storage/files.py's emptied_database). A new data directory, or an index never filled, starts."""
    db, index = settings.db_path, settings.index_path
    if not backend_of(settings).in_data_dir or db.exists() or settings.index_backend != "embedded":
        return
    if not (index / INFO_FILE).is_file():
        return  # the index was never set up: a first start
    try:
        edge = EdgeIndex(index)
        try:
            points = edge.count() if edge.info() is not None else 0
        finally:
            edge.close()
    except IndexLocked:
        points = None  # this process or another holds it: take it as used
    except Exception:  # unreadable: it may well hold memories
        points = None
    if points == 0:
        return
    held = f"holds {points} points" if points is not None else "may hold its memories (it is open or unreadable here)"
    raise DatabaseDamaged(
        f"the database {db} is missing, though the vector index {index} {held}: it was deleted or moved, and "
        f"starting would begin a new, empty database and empty the index. Restore the latest `memory-server "
        f"backup` as {db} (then run `memory-server reindex`); to start afresh on purpose, move {index} away too"
    )
