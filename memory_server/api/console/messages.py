"""A log item as the viewer shows it: a line of a conversation (who said what) when its payload is shaped
like a chat message, with its JSON one click away; any other payload as its JSON.

Payloads are never interpreted elsewhere: this is only how the console reads them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from memory_server.storage.records import RawItem

SPEAKER_KEYS = ("role", "speaker")
TEXT_KEYS = ("text", "content")
STYLED = frozenset({"user", "assistant", "system", "tool"})  # speakers styled apart; any other is "other"
MAX_SPEAKER = 64  # characters of a speaker's name shown
MAX_SHOWN = 20_000  # characters of one item's text or JSON shown (the rest: over REST)


@dataclass(frozen=True, slots=True)
class Entry:
    seq: int
    recorded_at: str
    speaker: str | None  # None: not a message; the JSON is shown open
    text: str
    style: str  # user, assistant, system, tool or other
    json: str  # pretty-printed, cut at MAX_SHOWN
    fields: int  # how many fields the payload has


def cut(text: str, total: int) -> str:
    if len(text) <= MAX_SHOWN:
        return text
    return f"{text[:MAX_SHOWN]}\n… ({total:,} characters in all; read the whole item over REST)"


def text_of(value: Any) -> str | None:
    """A message's text: a string, or the text parts of a list of parts (as chat APIs send them)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [
            part if isinstance(part, str) else part.get("text") if isinstance(part, dict) else None for part in value
        ]
        texts = [part for part in parts if isinstance(part, str)]
        return "\n\n".join(texts) if texts else None
    return None


def message(payload: Any) -> tuple[str, str] | None:
    """(speaker, text) of a message-shaped payload: a role or speaker, and a text or content."""
    if not isinstance(payload, dict):
        return None
    speaker = next(
        (payload[key] for key in SPEAKER_KEYS if isinstance(payload.get(key), str) and payload[key].strip()), None
    )
    text = next((found for key in TEXT_KEYS if (found := text_of(payload.get(key))) is not None), None)
    if speaker is None or text is None:
        return None
    return speaker.strip()[:MAX_SPEAKER], text


def entry(item: RawItem) -> Entry:
    seq, recorded_at, stored = item
    payload = json.loads(stored)
    pretty = json.dumps(payload, indent=2, ensure_ascii=False)
    said = message(payload)
    speaker, text = said if said is not None else (None, "")
    style = speaker.lower() if speaker is not None and speaker.lower() in STYLED else "other"
    return Entry(
        seq=seq,
        recorded_at=recorded_at,
        speaker=speaker,
        text=cut(text, len(text)),
        style=style,
        json=cut(pretty, len(stored)),
        fields=len(payload) if isinstance(payload, dict) else 0,
    )
