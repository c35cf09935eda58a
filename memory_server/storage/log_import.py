"""Importing log items, the part every storage backend shares: each item's outcome, decided from the
conversation's item count and the payloads it already holds at the imported seqs."""

from __future__ import annotations

import json
from collections.abc import Sequence

from memory_server.storage.records import APPENDED, PRESENT, RawItem


def plan_import(
    conversation_id: str, count: int, stored: dict[int, str], items: Sequence[RawItem]
) -> tuple[list[str], list[RawItem]]:
    """Each item's outcome and the items to append, given the conversation's item count and its stored
    payloads at the seqs below it (`stored`, seq → payload text).

    An outcome is "appended", "present" (that seq holds the identical payload), or an error message (a
    different payload at that seq, or a seq that would leave a gap). New items must continue the
    conversation: seq == its item count.
    """
    outcomes: list[str] = []
    new: list[RawItem] = []
    for seq, recorded_at, text in items:
        if seq < count:
            if seq in stored and same_payload(stored[seq], text):
                outcomes.append(PRESENT)
            else:
                outcomes.append(f"conflict: conversation {conversation_id} already has a different item at seq {seq}")
        elif seq == count + len(new):
            new.append((seq, recorded_at, text))
            outcomes.append(APPENDED)
        elif seq < count + len(new):  # the same seq twice in this run of lines
            if new[seq - count][2] == text:
                outcomes.append(PRESENT)
            else:
                outcomes.append(
                    f"conflict: seq {seq} of conversation {conversation_id} appears twice in the file "
                    "with different payloads"
                )
        else:
            outcomes.append(
                f"gap: conversation {conversation_id} has {count + len(new)} items, so the next seq "
                f"must be {count + len(new)}, not {seq}"
            )
    return outcomes, new


def same_payload(stored: str, text: str) -> bool:
    """Whether a stored payload is the imported one: the same JSON, keys in the same order."""
    if stored == text:
        return True
    try:  # stored by some other writer in another spacing: compare the canonical forms
        return json.dumps(json.loads(stored), ensure_ascii=False, separators=(",", ":"), allow_nan=False) == text
    except ValueError:
        return False


def new_batches(new: Sequence[RawItem]) -> list[list[RawItem]]:
    """The items to append cut into runs of consecutive items sharing a recorded_at: each run is appended
    as one batch, so each item keeps its recorded_at and the batches keep their boundaries."""
    batches: list[list[RawItem]] = []
    for item in new:
        if batches and batches[-1][0][1] == item[1]:
            batches[-1].append(item)
        else:
            batches.append([item])
    return batches
