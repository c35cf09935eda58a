"""Files the server and the CLI write: private modes, and never a live file as a target.

The data directory holds every memory, every log and the credential hashes, so it is created 0700 and every
file written into it or exported from it 0600, whatever the umask. (SQLite gives `-wal` and `-shm` the mode
of the database file, so creating that file 0600 covers them.) `memory-server` also sets its umask to 077,
which covers files third-party code creates (the embedded index).

A backup or an export written over the live database, its `-wal`/`-shm`/`-journal` or the embedded index
would destroy acknowledged writes, so such targets are refused, by resolved path and by inode.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from memory_server.errors import InvalidParameters

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
PRIVATE_UMASK = 0o077
SQLITE_COMPANIONS = {"-wal": "write-ahead log", "-shm": "shared-memory index", "-journal": "rollback journal"}


def private_dir(path: Path) -> Path:
    """Create `path` (and missing parents) if needed; a directory this call creates is 0700."""
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, PRIVATE_DIR)
    return path


def private_file(path: Path) -> Path:
    """Create an empty `path` 0600 if it does not exist yet (an existing file keeps its mode)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE)
    except FileExistsError:
        return path
    try:
        os.fchmod(fd, PRIVATE_FILE)  # the mode given to open() is filtered by the umask
    finally:
        os.close(fd)
    return path


def emptied_database(db_path: Path) -> str | None:
    """Why an empty (0-byte) database file is damage rather than a first start, or None.

    SQLite takes a 0-byte file for a new, empty database, and a start would then create a fresh schema and
    site and empty the index to match: everything lost. A database in WAL mode is never 0 bytes once
    created, so an empty one beside anything else in the data directory (the index, other files) was cut
    short or truncated. A new data directory (no file, or only the empty file) is a first start."""
    try:
        if db_path.stat().st_size != 0:
            return None
        others = sorted(
            entry.name
            for entry in db_path.parent.iterdir()
            if entry.name != db_path.name
            and not (entry.name in companions(db_path) and entry.is_file() and entry.stat().st_size == 0)
        )
    except OSError:  # missing (a first start), or unreadable: opening it says what is wrong
        return None
    if not others:
        return None
    shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
    return f"the file is empty (0 bytes), though the data directory holds {shown}"


def companions(db_path: Path) -> set[str]:
    return {db_path.name + suffix for suffix in SQLITE_COMPANIONS}


def exposed(path: Path) -> bool:
    """Whether group or others may read, write or enter `path`."""
    return bool(path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO))


def live_paths(db_path: Path, index_path: Path) -> dict[Path, str]:
    """The files and directories a running server writes (the database, its companions, the embedded
    index), each with what it is."""
    live = {db_path: "the live database"}
    for suffix, what in SQLITE_COMPANIONS.items():
        live[db_path.with_name(db_path.name + suffix)] = f"the live database's {what}"
    live[index_path] = "the live vector index"
    return live


def refuse_live_target(target: Path, live: Mapping[Path, str]) -> None:
    """invalid_parameters if writing `target` would replace a live file or land inside a live directory."""
    resolved = target.resolve()  # through symlinks, to where the write would land
    for path, what in live.items():
        path_resolved = path.resolve()
        same_file = target.exists() and path.exists() and os.path.samefile(target, path)  # hard links too
        inside = path_resolved in resolved.parents
        if resolved == path_resolved or inside or same_file:
            raise InvalidParameters(
                f"{target} is {'inside ' if inside else ''}{what} ({path}), which the server writes to: writing "
                "there could destroy acknowledged data; choose a path outside the data directory"
            )
