"""Merging one server entry into a client's configuration file (JSON, or TOML for Codex).

The file's other content and other servers are kept as they are. A timestamped copy is written beside the file
before it changes (the owner's only), and the new file replaces the old one in one rename. A file that does not
parse is never written over, nor is another server of the same name (unless asked to replace it). A symbolic
link is written through (the file it points to changes, the link stays); anything but a regular file (a FIFO,
a device, a directory) is refused before it is opened.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory_server.client_entries import toml_table


class CannotMerge(Exception):
    """The entry cannot be merged into the file; nothing was written. The message says why and what to do."""


@dataclass(frozen=True)
class Merged:
    path: Path  # the file written: the target of a symbolic link given
    backup: Path | None  # None when the file did not exist (or nothing changed)
    changed: bool
    previous: dict[str, Any] | None = None  # the entry there before (replaced, or left as it was)


def target(path: Path) -> Path:
    """The file to read and write for `path`: itself, or the file a symbolic link leads to (an existing one)."""
    if not path.is_symlink():
        return path
    resolved = path.resolve()
    if not resolved.exists():
        raise CannotMerge(f"{path} is a symbolic link to {resolved}, which does not exist; nothing was written")
    return resolved


def merge_json(
    path: Path,
    key: str,
    name: str,
    value: dict[str, Any],
    *,
    replace: bool,
    private: bool = False,
    inputs: list[dict[str, Any]] | None = None,
) -> Merged:
    """Merge `value` as `key.name` (and VS Code's `inputs`, by id) into the JSON file. `private`: the entry
    holds a credential, so the file becomes the owner's only whatever its mode was."""
    path = target(path)
    text = _read(path)
    try:
        data = json.loads(text) if text is not None and text.strip() else {}
    except json.JSONDecodeError as exc:
        raise CannotMerge(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            "nothing was written: fix the file, or paste the entry above by hand"
        ) from None
    if not isinstance(data, dict):
        raise CannotMerge(f"{path} does not hold a JSON object; nothing was written")
    servers = data.setdefault(key, {})
    if not isinstance(servers, dict):
        raise CannotMerge(f"{path}: {key!r} is not a JSON object; nothing was written")
    listed = _merged_inputs(data.get("inputs"), inputs or [], path)
    previous = servers.get(name)
    if not _may_set(servers, name, value, path, replace) and listed == data.get("inputs", []):
        return Merged(path, None, changed=False, previous=previous)
    servers[name] = value
    if listed:
        data["inputs"] = listed
    text_out = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    merged = _write(path, text_out, existed=text is not None, private=private)
    return Merged(merged.path, merged.backup, True, previous)


def _merged_inputs(present: object, wanted: list[dict[str, Any]], path: Path) -> list[Any]:
    """VS Code's `inputs` with ours among them: one of the same id is replaced, the others kept."""
    if present is None:
        present = []
    if not isinstance(present, list):
        raise CannotMerge(f"{path}: 'inputs' is not a JSON array; nothing was written")
    ids = {item["id"] for item in wanted}
    kept = [item for item in present if not (isinstance(item, dict) and item.get("id") in ids)]
    return kept + wanted if wanted else list(present)


def merge_toml(
    path: Path, table: str, name: str, value: dict[str, Any], *, replace: bool, private: bool = False
) -> Merged:
    """Codex's `[mcp_servers.NAME]`: the table is appended (or, replacing, its old text removed first), and the
    result is parsed again to check that everything else reads exactly as before."""
    path = target(path)
    text = _read(path)
    try:
        before = tomllib.loads(text or "")
    except tomllib.TOMLDecodeError as exc:
        raise CannotMerge(
            f"{path} is not valid TOML ({exc}); nothing was written: fix the file, or paste the table above by hand"
        ) from None
    servers = before.get(table, {})
    if not isinstance(servers, dict):
        raise CannotMerge(f"{path}: {table!r} is not a table; nothing was written")
    if not _may_set(servers, name, value, path, replace):
        return Merged(path, None, changed=False, previous=servers[name])
    kept = _without_table(text or "", f"{table}.{name}") if name in servers else (text or "")
    new_text = kept.rstrip("\n") + ("\n\n" if kept.strip() else "") + toml_table(f"{table}.{name}", value)
    expected = {**before, table: {**servers, name: value}}
    try:
        after = tomllib.loads(new_text)
    except tomllib.TOMLDecodeError:
        after = None
    if after != expected:  # e.g. the servers are an inline table, which cannot be extended below it
        raise CannotMerge(
            f"{path}: the table [{table}.{name}] cannot be added without changing how the file "
            "reads; nothing was written: paste the table above by hand"
        )
    merged = _write(path, new_text, existed=text is not None, private=private)
    return Merged(merged.path, merged.backup, True, servers.get(name))


def _may_set(servers: dict[str, Any], name: str, value: dict[str, Any], path: Path, replace: bool) -> bool:
    """False when the entry is there already as it is; CannotMerge for another server of that name."""
    if name not in servers:
        return True
    if servers[name] == value:
        return False
    if not replace:
        raise CannotMerge(
            f"{path} already has a server named {name!r}, configured differently; nothing was "
            "written: pass --name OTHER to add this one beside it, or --replace to replace it"
        )
    return True


def _without_table(text: str, dotted: str) -> str:
    """The text without the table `dotted` and its sub-tables: from each such header to the next header."""
    parts = [re.escape(part) for part in dotted.split(".")]
    quoted = [rf'(?:{p}|"{p}"|\'{p}\')' for p in parts]
    header = re.compile(r"^\s*\[\s*" + r"\s*\.\s*".join(quoted) + r"(?:\s*\.[^\]]*)?\s*\]\s*(?:#.*)?$")
    kept, skipping = [], False
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("["):
            skipping = bool(header.match(line.rstrip("\r\n")))
        if not skipping:
            kept.append(line)
    return "".join(kept)


def _read(path: Path) -> str | None:
    """The file's text; None if there is none. Anything but a regular file is refused before it is opened
    (reading a FIFO would wait for a writer, a device would never end)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CannotMerge(f"cannot read {path}: {exc}; nothing was written") from None
    if not stat.S_ISREG(mode):
        raise CannotMerge(f"{path} is not a regular file ({_kind(mode)}); nothing was written")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CannotMerge(f"cannot read {path}: {exc}; nothing was written") from None


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def _write(path: Path, text: str, *, existed: bool, private: bool) -> Merged:
    """A timestamped backup of the old file (the owner's only: the file may hold a credential), then the new one
    written beside it and renamed into place, with the old file's permissions; new files, and any file whose
    new entry holds a credential (`private`), are the owner's only."""
    backup = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = path.stat().st_mode & 0o777 if existed and not private else 0o600
        if existed:
            backup = _backup_name(path)
            _copy_private(path, backup)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise CannotMerge(f"cannot write {path}: {exc}") from None
    return Merged(path, backup, changed=True)


def _copy_private(source: Path, backup: Path) -> None:
    """Copy `source` to a new file `backup` created as the owner's only (never, even briefly, wider)."""
    fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(source.read_bytes())
        out.flush()
        os.fsync(out.fileno())
    os.chmod(backup, 0o600)  # whatever the umask
    st = source.stat()
    os.utime(backup, ns=(st.st_atime_ns, st.st_mtime_ns))


def _backup_name(path: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = path.with_name(f"{path.name}.{stamp}.bak")
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.{stamp}-{n}.bak")
        n += 1
    return candidate
