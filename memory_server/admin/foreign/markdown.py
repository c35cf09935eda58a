"""A folder of Markdown notes, as basic-memory keeps them (and Obsidian-like vaults): YAML front matter
(`title`, else the first `# ` heading, else the file's name; `type`; `tags`, a list or a comma-separated
string; `permalink`, `created`, `modified`, any other field), then Markdown with, anywhere in it, observations
`- [category] text #tag (context)` and relations `- relation_type [[Target]] (context)`.

A note becomes: one memory of its text (its prose, without the observation and relation lines), or, when that
is longer than a memory may be, one per section (`#` headings; a long section is cut at paragraphs); one memory
per observation ("TITLE: text (context)", type = its category, its `#tags` added to the note's tags); one per
relation ("TITLE relation type TARGET", type `relation`). `occurred_at` is `created` (else `date`, else
`modified`, else the file's modification time); a date or time without a timezone is taken as UTC. `location`
is the note's path in the folder; the front matter's other fields go into `metadata`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memory_server.admin.foreign.records import (
    MAX_NOTE_BYTES,
    Candidate,
    Item,
    Problem,
    Tags,
    files_under,
    outside,
    read_bounded,
    tag_list,
    timestamp,
    too_large,
    word,
)
from memory_server.admin.importer import ImportAborted
from memory_server.errors import AppError

SUFFIXES = (".md", ".markdown")
SOURCE = "markdown"
STANDARD = ("title", "type", "tags", "permalink", "created", "modified", "date")
FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*(?:\r?\n|\Z)", re.S | re.M)
HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
TITLE_HEADING = re.compile(r"^#[ \t]+(.*?)[ \t]*#*[ \t]*$", re.M)  # a note's title when its front matter has none
FENCE = re.compile(r"^\s*(```|~~~)")
OBSERVATION = re.compile(r"^\s*[-*+][ \t]+\[([^\[\]()]+)\][ \t]+(.*\S)\s*$")
RELATION = re.compile(
    r"""^\s*[-*+][ \t]+([A-Za-z_][\w-]*|"[^"]+"|'[^']+')[ \t]+\[\[([^\]]+)\]\]"""
    r"""(?:[ \t]*\(([^()]*)\))?\s*$"""
)
LIST_ITEM = re.compile(r"^\s*[-*+][ \t]+(.*\S)\s*$")
INLINE_TAG = re.compile(r"(?<!\S)#(\w[\w/-]*)")
CHECKBOX = {"", "x", "X", "-"}
MAX_FRONT_MATTER = 64 * 1024  # characters of YAML
MAX_NOTE_LINES = 100_000  # with MAX_NOTE_BYTES, what bounds the memory a note takes (a few hundred bytes a line)
MAX_EXPANDED = 4 * MAX_FRONT_MATTER  # the front matter's weight with its aliases expanded (_check_expansion)


def read(path: Path, *, max_content_bytes: int, progress: Callable[[int], None]) -> Iterator[Item]:
    try:
        import yaml  # type: ignore[import-untyped]  # noqa: F401  # front matter is YAML
    except ImportError:
        raise ImportAborted(
            "Markdown front matter is read with PyYAML, which is not installed here: pip install pyyaml"
        ) from None
    root = path if path.is_dir() else path.parent
    for file in [path] if path.is_file() else files_under(path, SUFFIXES):
        escaped = None if file is path else outside(path, file)
        if escaped is not None:
            yield escaped
            continue
        name = file.relative_to(root).as_posix()
        raw = read_bounded(file, MAX_NOTE_BYTES)
        if raw is None:
            size = file.stat().st_size
            yield Problem(name, too_large(size, MAX_NOTE_BYTES, "the note"))
            progress(size)
            continue
        lines = raw.count(b"\n")
        if lines > MAX_NOTE_LINES:
            yield Problem(name, f"the note has {lines:,} lines, more than the {MAX_NOTE_LINES:,} it may have; skipped")
        else:
            yield from _note(file, name, raw, max_content_bytes)
        progress(len(raw))


@dataclass(slots=True)
class Section:
    heading: str | None
    line: int
    lines: list[str] = field(default_factory=list)


def _note(file: Path, name: str, raw: bytes, limit: int) -> Iterator[Item]:
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        yield Problem(name, f"not valid UTF-8 (at byte {exc.start}); the note is skipped")
        return
    front, body_line, body = {}, 1, text
    match = FRONT_MATTER.match(text)
    if match is not None:
        if len(match.group(1)) > MAX_FRONT_MATTER:
            yield Problem(
                f"{name}:1", f"the front matter is longer than {MAX_FRONT_MATTER:,} characters; the note is skipped"
            )
            return
        try:
            front = _front_matter(match.group(1))
        except FrontMatterError as exc:
            yield Problem(f"{name}:{exc.line + 1}", f"the front matter {exc}; the note is skipped")
            return
        body_line, body = 1 + match.group(0).count("\n"), text[match.end() :]
    first_heading = TITLE_HEADING.search(body)
    title = str(front.get("title") or (first_heading.group(1) if first_heading else Path(name).stem))
    try:
        occurred_at = (
            timestamp("created", front.get("created"))
            or timestamp("date", front.get("date"))
            or timestamp("modified", front.get("modified"))
            or datetime.fromtimestamp(file.stat().st_mtime, UTC).isoformat().replace("+00:00", "Z")
        )
    except AppError as exc:
        yield Problem(f"{name}:1", f"{exc.message}; the note is skipped")
        return
    tags = Tags()
    tags.extend(tag_list(front.get("tags")))
    metadata = {
        "title": title,
        **({"permalink": front["permalink"]} if front.get("permalink") else {}),
        **{key: value for key, value in front.items() if key not in STANDARD},
    }
    note = {"location": name, "occurred_at": occurred_at, "metadata": metadata}
    sections: list[Section] = []
    facts = 0
    for fact in _parse(body, body_line, title, name, tags, note, sections):  # one at a time: memory stays flat
        facts += 1
        yield fact
    prose = _prose_memories(sections, title, limit)
    kind = word(str(front.get("type") or "note")) or "note"
    for line, content in prose:
        yield Candidate(
            f"{name}:{line}",
            {
                **note,
                "content": content,
                "type": kind,
                "tags": list(tags.values),
                "provenance": {"source": SOURCE, "file": name, "line": line},
            },
        )
    if not prose and not facts:
        yield Problem(name, "the note holds no text; skipped")


class FrontMatterError(ValueError):
    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.line = line  # in the front matter, 1-based; 0 when unknown


def _front_matter(text: str) -> dict[str, Any]:
    """The front matter as JSON values (dates as ISO text), or FrontMatterError saying what is wrong."""
    import yaml

    try:
        loaded = _safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise FrontMatterError(
            f"is not valid YAML ({getattr(exc, 'problem', None) or exc})", mark.line + 1 if mark is not None else 0
        ) from None
    except RecursionError:
        raise FrontMatterError("is nested too deeply") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise FrontMatterError("is not a mapping of fields")
    converted: dict[str, Any] = json.loads(json.dumps({str(k): v for k, v in loaded.items()}, default=_iso))
    return converted


def _safe_load(text: str) -> Any:
    """yaml.safe_load, refusing a document whose aliases expand it past MAX_EXPANDED: safe_load shares an
    anchor's value between its aliases, but turning it into JSON copies each one (a 328-byte alias bomb is
    gigabytes)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_expansion(root: Any) -> None:
    """Raise FrontMatterError when the node graph, aliases expanded, weighs more than MAX_EXPANDED (a
    scalar weighs its length plus one, a collection one plus its items) or refers to itself. Iterative, each
    node weighed once."""
    import yaml

    weights: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in weights:
            continue
        if isinstance(node, yaml.ScalarNode):
            weights[id(node)] = len(node.value) + 1
            continue
        children = [part for pair in node.value for part in pair] if isinstance(node, yaml.MappingNode) else node.value
        if done:
            open_nodes.discard(id(node))
            weight = 1 + sum(weights[id(child)] for child in children)
            if weight > MAX_EXPANDED:
                raise FrontMatterError(f"expands to more than {MAX_EXPANDED:,} characters through its aliases")
            weights[id(node)] = weight
            continue
        if id(node) in open_nodes:
            raise FrontMatterError("refers to itself through an alias")
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in weights)


def _iso(value: object) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _parse(
    body: str, first_line: int, title: str, name: str, tags: Tags, note: dict[str, Any], sections: list[Section]
) -> Iterator[Item]:
    """The observations and relations of the body as memories, as they are met; its sections of prose are
    added to `sections`."""
    sections.append(Section(None, first_line))
    fenced = False
    for number, line in enumerate(body.splitlines(), start=first_line):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            heading = HEADING.match(line)
            if heading is not None:
                sections.append(Section(heading.group(2), number))
                continue
            fact = _fact(line, number, title, name, tags, note)
            if fact is not None:
                yield fact
                continue
        sections[-1].lines.append(line)


def _fact(line: str, number: int, title: str, name: str, tags: Tags, note: dict[str, Any]) -> Item | None:
    """An observation or a relation line as a memory; None for any other line."""
    where = f"{name}:{number}"
    provenance = {"source": SOURCE, "file": name, "line": number}
    observation = OBSERVATION.match(line)
    category, text = (observation.group(1).strip(), observation.group(2)) if observation else (None, None)
    if category in CHECKBOX:
        return None
    if category is None:
        relation = RELATION.match(line)
        if relation is not None:
            kind, target, context = relation.group(1).strip("\"'"), relation.group(2), relation.group(3)
            own = Tags(list(tags.values))
            own.add(kind, "relation:")
            content = f"{title} {kind.replace('_', ' ')} {target}" + (f" ({context})" if context else "")
            return Candidate(
                where, {**note, "content": content, "type": "relation", "tags": own.values, "provenance": provenance}
            )
        item = LIST_ITEM.match(line)
        if item is None or not INLINE_TAG.search(item.group(1)):
            return None
        category, text = "note", item.group(1)  # a list item with #tags and no [category]
    assert text is not None
    own = Tags(list(tags.values))
    own.extend(INLINE_TAG.findall(text))
    stated = re.sub(r"\s{2,}", " ", INLINE_TAG.sub("", text)).strip()
    if not stated:
        return Problem(where, "an observation with no text; skipped")
    kind = word(category) or "note"
    return Candidate(
        where,
        {
            **note,
            "content": f"{title}: {stated}",
            "type": kind,
            "tags": own.values,
            "metadata": {**note["metadata"], "category": category},
            "provenance": provenance,
        },
    )


def _prose_memories(sections: list[Section], title: str, limit: int) -> list[tuple[int, str]]:
    """(line, content): the whole prose as one memory when it fits, else one per section, cut to fit."""
    kept = [(section, text) for section in sections if (text := _text(section.lines))]
    if not kept:
        return []
    parts = [text if section.heading in (None, title) else f"## {section.heading}\n\n{text}" for section, text in kept]
    whole = f"{title}\n\n" + "\n\n".join(parts)
    if _fits(whole, limit):
        return [(kept[0][0].line, whole)]
    out = []
    for section, text in kept:
        head = title if section.heading in (None, title) else f"{title} — {section.heading}"
        for piece in pieces(text, limit - len(head.encode()) - 2):
            out.append((section.line, f"{head}\n\n{piece}"))
    return out


def _text(lines: list[str]) -> str:
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _fits(text: str, limit: int) -> bool:
    return len(text.encode()) <= limit


def pieces(text: str, limit: int) -> list[str]:
    """The text cut into parts of at most `limit` bytes: at paragraphs, a paragraph too long at words, a word
    too long at characters."""
    if _fits(text, limit):
        return [text]
    out: list[str] = []
    current = ""
    for paragraph in re.split(r"\n\s*\n", text):
        for unit in [paragraph] if _fits(paragraph, limit) else _words(paragraph, limit):
            joined = f"{current}\n\n{unit}" if current else unit
            if _fits(joined, limit):
                current = joined
            else:
                out.append(current)
                current = unit
    if current:
        out.append(current)
    return [part for part in out if part]


def _words(paragraph: str, limit: int) -> list[str]:
    out: list[str] = []
    current = ""
    for token in paragraph.split():
        while not _fits(token, limit):  # a "word" longer than a memory: cut at characters
            cut = len(token.encode()[:limit].decode("utf-8", "ignore"))
            out += [current] if current else []
            out.append(token[:cut])
            current, token = "", token[cut:]
        joined = f"{current} {token}" if current else token
        if _fits(joined, limit):
            current = joined
        else:
            out.append(current)
            current = token
    if current:
        out.append(current)
    return out
