"""Helpers of the storage contract suite (one file per store, tests/README.md lists them): the `storage`
fixture (each test on SQLite and on PostgreSQL) and `both` (the two side by side), records to store, a corpus
to rank, appender processes."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_server.ranking.lexical import analyzed_text
from memory_server.storage.factory import open_storage
from memory_server.storage.protocols import Storage
from memory_server.storage.records import Document, Kept, NewMemory, Words

from conftest import make_settings

REPO_ROOT = Path(__file__).resolve().parent.parent
WHEN = "2024-05-01T10:00:00.000000Z"
DIM = 8


@pytest.fixture(params=["sqlite", "postgres"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    if request.param == "sqlite":
        settings = make_settings(tmp_path / "data")
    else:
        settings = make_settings(tmp_path / "data", database_url=request.getfixturevalue("postgres_url"))
    opened = open_storage(settings)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def both(tmp_path: Path, postgres_url: str) -> Iterator[tuple[Storage, Storage]]:
    sqlite = open_storage(make_settings(tmp_path / "data"))
    postgres = open_storage(make_settings(tmp_path / "data", database_url=postgres_url))
    try:
        yield sqlite, postgres
    finally:
        sqlite.close()
        postgres.close()


def site(storage: Storage, name: str = "acme") -> int:
    return storage.sites.create_site(name, f"hash-of-{name}")


def memory(content: str, **fields: Any) -> NewMemory:
    values: dict[str, Any] = {
        "type": "note",
        "location": None,
        "project": None,
        "team": None,
        "bucket": "default",
        "tags": (),
        "metadata": {},
        "provenance": {},
        "occurred_at": WHEN,
    }
    values.update(fields)
    values["tags"] = tuple(values["tags"])
    return NewMemory(content=content, **values)


def vector(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)


def document(content: str, *, model: str = "model-a", seed: int = 0) -> Document:
    return Document(vector=vector(seed), model=model, terms=analyzed_text(content))


def remember(
    storage: Storage,
    site_id: int,
    content: str,
    *,
    kept: Kept | None = None,
    words: Words = Words(),
    model: str = "model-a",
    **fields: Any,
) -> Any:
    """Insert one memory; its Inserted outcome."""
    new = memory(content, **fields)
    return storage.memories.insert(site_id, [(new, document(content, model=model, seed=len(content)), kept)], words)[0]


# A vocabulary with repeats (BM25 ties), stemming, underscores (one analysed term, two FTS5 tokens) and
# diacritics (folded by FTS5's tokenizer).
VOCABULARY = (
    "apple banana cherry delta echo foxtrot garden harbor island jungle kettle lemon meadow night "
    "orange piano quartz river sunset tiger umbrella violet walnut xenon yellow zebra running runs "
    "café cafe naïve naive snake_case snake case x_y 2024 v2 Zürich zurich"
).split()


def corpus(size: int, *, seed: int = 11) -> list[tuple[int, str]]:
    """(site 0 or 1, content) for `size` memories of 1-24 words each, some words far more common."""
    rng = random.Random(seed)
    weights = [1.0 / (1 + i % 13) for i in range(len(VOCABULARY))]
    return [
        (rng.randrange(2), " ".join(rng.choices(VOCABULARY, weights, k=rng.randint(1, 24))) + f" #{n}")
        for n in range(size)
    ]


APPENDER = """
import asyncio, json, random, sys
from pathlib import Path
from memory_server.settings import Settings
from memory_server.storage.factory import open_storage

url, data_dir, site_id, writer, batches = sys.argv[1:]
site_id, writer, batches = int(site_id), int(writer), int(batches)
rng = random.Random(writer)
storage = open_storage(Settings(data_dir=Path(data_dir), database_url=url))
conversations = [f"conv-shared-{n:04d}" for n in range(4)]

async def main():
    acks = []
    for batch in range(batches):
        size = rng.randint(1, 15)
        conversation = rng.choice(conversations)
        texts = [json.dumps({"writer": writer, "batch": batch, "pos": pos}) for pos in range(size)]
        acks.append([batch, dict(await storage.logs.append(site_id, conversation, texts, None))])
    return acks

acks = asyncio.run(main())
storage.close()
print(json.dumps(acks))
"""


def run_appenders(url: str, data_dir: Path, site_id: int, writers: int, batches: int) -> dict[tuple[int, int], Any]:
    """`writers` OS processes, each with its own storage, appending `batches` batches to 4 conversations."""
    children = [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER, url, str(data_dir), str(site_id), str(w), str(batches)],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(writers)
    ]
    acks: dict[tuple[int, int], Any] = {}
    try:
        for writer, child in enumerate(children):
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0, err
            acks.update({(writer, batch): ack for batch, ack in json.loads(out)})
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    return acks


def check_acks(storage: Storage, site_id: int, acks: dict[Any, Any], payload: Any) -> dict[str, int]:
    """Every acknowledged batch is in its conversation at its seqs, whole; the seqs of each conversation are
    0..n-1 without a gap or a repeat. `payload(key, pos)` is the JSON text of item `pos` of batch `key`.
    Returns each conversation's item count."""
    logs: dict[str, list[tuple[int, str, str]]] = {}
    for key, ack in acks.items():
        cid = ack["conversation_id"]
        if cid not in logs:
            logs[cid] = storage.logs.replay(site_id, cid, 0, 1_000_000)
        items = logs[cid]
        for pos, seq in enumerate(range(ack["first_seq"], ack["last_seq"] + 1)):
            assert items[seq][0] == seq and items[seq][2] == payload(key, pos), (key, ack)
            assert items[seq][1] == ack["recorded_at"]
    for items in logs.values():
        assert [seq for seq, _, _ in items] == list(range(len(items)))
        assert [at for _, at, _ in items] == sorted(at for _, at, _ in items)  # recorded_at never goes back
    return {cid: len(items) for cid, items in logs.items()}
