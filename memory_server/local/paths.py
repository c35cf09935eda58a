"""Where a store's owner listens and locks, and the checks that keep another user of the machine away from them.

Imports only the standard library (and platformdirs, light): the stdio bridge uses it and must start fast.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from memory_server.locations import APP_NAME

SOCKET_NAME = "owner.sock"
LOCK_NAME = "owner.lock"
LOG_NAME = "owner.log"
# sun_path holds 108 bytes on Linux and 104 on macOS, the terminating NUL included.
MAX_SOCKET_PATH = 100


class UnsafePath(Exception):
    """A file the owner or a bridge would use is not this user's own (a symlink, another user's, another kind)."""


@dataclass(frozen=True)
class StorePaths:
    data_dir: Path
    socket: Path
    lock: Path
    log: Path


def store_paths(data_dir: Path) -> StorePaths:
    """The owner's files for the store in `data_dir` (made absolute). The socket lives in the data directory,
    or, where that path is too long for a Unix socket, in a private per-user directory under a name made from
    the data directory's path."""
    data_dir = Path(os.path.abspath(data_dir.expanduser()))
    socket = data_dir / SOCKET_NAME
    if len(os.fsencode(socket)) > MAX_SOCKET_PATH:
        digest = hashlib.sha256(os.fsencode(data_dir)).hexdigest()[:24]
        socket = short_socket_dir() / f"{digest}.sock"
    return StorePaths(data_dir=data_dir, socket=socket, lock=data_dir / LOCK_NAME, log=data_dir / LOG_NAME)


def short_socket_dir() -> Path:
    """A directory only this user can enter, with a short path: $XDG_RUNTIME_DIR/memory-server, else
    <tmp>/memory-server-<uid>."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return Path(runtime) / APP_NAME
    return Path(tempfile.gettempdir()) / f"{APP_NAME}-{os.getuid()}"


def private_dir(path: Path) -> None:
    """Create `path` (mode 0700) if missing; refuse one that is a symlink, not a directory or not this user's."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UnsafePath(f"{path} is not a directory (a symlink or another kind of file): remove it")
    if info.st_uid != os.getuid():
        raise UnsafePath(f"{path} belongs to another user (uid {info.st_uid}): remove it or use another data directory")


def check_socket(path: Path) -> bool:
    """Whether a socket file is at `path` (False: nothing there). Refuses a symlink, another kind of file, or
    another user's socket: connecting to it could hand this user's memory to someone else."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISSOCK(info.st_mode):
        raise UnsafePath(f"{path} is not a socket (a symlink or another kind of file); remove it and start again")
    if info.st_uid != os.getuid():
        raise UnsafePath(f"the socket {path} belongs to another user (uid {info.st_uid}); refusing to connect")
    return True


def open_lock(path: Path) -> int:
    """The owner lock file, opened without following a symlink and checked to be this user's regular file."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePath(f"{path} is a symlink; remove it") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        os.close(fd)
        raise UnsafePath(f"{path} is not this user's own file (uid {info.st_uid}); remove it")
    return fd


def local_data_store(cwd: Path | None = None) -> Path | None:
    """A store in ./data of the current folder (the default before the per-user one), if there is one."""
    candidate = (cwd or Path.cwd()) / "data"
    return candidate if (candidate / "memory.db").is_file() else None


def former_default_notice(data_dir: Path, explicit: bool) -> str | None:
    """What to tell a user whose memory may be in ./data while the per-user store is used: no silent split."""
    if explicit:
        return None
    old = local_data_store()
    if old is None or old.resolve() == Path(os.path.abspath(data_dir)).resolve():
        return None
    return (
        f"a memory store exists in {old} (the default data directory before 4.0), but this server uses the "
        f"per-user store {data_dir}. To keep using the old one, pass --data-dir {old} or set "
        f"MEMORY_DATA_DIR={old}; to make it the per-user store, stop every memory-server and move it: "
        f"mv {old} {data_dir}"
    )
