"""Merging one server entry into a client's configuration file (JSON, or TOML for Codex).

The file's other content and other servers are kept as they are. A timestamped copy is written beside the file
before it changes, and the new file replaces the old one in one rename. A file that does not parse is never
written over, nor is another server of the same name (unless asked to replace it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory_server.admin.client_config.clients import toml_table


class CannotMerge(Exception):
    """The entry cannot be merged into the file; nothing was written. The message says why and what to do."""


@dataclass(frozen=True)
class Merged:
    path: Path
    backup: Path | None  # None when the file did not exist (or nothing changed)
    changed: bool


def merge_json(path: Path, key: str, name: str, value: dict[str, Any], *, replace: bool) -> Merged:
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
    if not _may_set(servers, name, value, path, replace):
        return Merged(path, None, changed=False)
    servers[name] = value
    return _write(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n", existed=text is not None)


def merge_toml(path: Path, table: str, name: str, value: dict[str, Any], *, replace: bool) -> Merged:
    """Codex's `[mcp_servers.NAME]`: the table is appended (or, replacing, its old text removed first), and the
    result is parsed again to check that everything else reads exactly as before."""
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
        return Merged(path, None, changed=False)
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
    return _write(path, new_text, existed=text is not None)


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
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise CannotMerge(f"cannot read {path}: {exc}; nothing was written") from None


def _write(path: Path, text: str, *, existed: bool) -> Merged:
    """A timestamped backup of the old file, then the new one written beside it and renamed into place, with the
    old file's permissions (new files are the owner's only: they may hold a credential)."""
    backup = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = path.stat().st_mode & 0o777 if existed else 0o600
        if existed:
            backup = _backup_name(path)
            shutil.copy2(path, backup)
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


def _backup_name(path: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = path.with_name(f"{path.name}.{stamp}.bak")
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.{stamp}-{n}.bak")
        n += 1
    return candidate
