"""The word store's contract on SQLite and PostgreSQL: the memories' vocabulary (a word's vector per model) and
its backfill.

Part of the storage seam's contract suite (tests/README.md lists the others); the fixtures and records
are in tests/storage_support.py.
"""

from __future__ import annotations

import re

import numpy as np
from storage_support import (
    WHEN,
    remember,
    site,
    storage,  # noqa: F401
    vector,
)

from memory_server.storage.protocols import Storage
from memory_server.storage.records import (
    Words,
)

RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def test_words(storage: Storage) -> None:
    sid, other = site(storage), site(storage, "other")
    words = Words(("apple", "pie", "apple"), np.stack([vector(1), vector(2), vector(3)]))
    remember(storage, sid, "apple pie", words=words)
    found = sorted((s, w, v.tolist()) for s, w, v in storage.words.all_words("model-a"))
    assert found == [(sid, "apple", vector(3).tolist()), (sid, "pie", vector(2).tolist())]  # the last one wins
    assert list(storage.words.all_words("model-b")) == []
    assert storage.words.backfill_mark("model-b") == 0
    second = remember(storage, other, "banana split")
    texts = storage.words.texts_after(0, 10)
    assert [(t[1], t[2], t[3]) for t in texts] == [(sid, "apple pie", WHEN), (other, "banana split", WHEN)]
    assert storage.words.texts_after(texts[0][0], 10)[0][0] == second.row_id
    storage.words.save_backfill([(other, Words(("banana",), np.stack([vector(4)])))], "model-b", second.row_id)
    assert storage.words.backfill_mark("model-b") == second.row_id and storage.words.backfill_mark("model-a") == 0
    assert [(s, w) for s, w, _ in storage.words.all_words("model-b")] == [(other, "banana")]
