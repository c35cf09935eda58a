"""What a scope's held candidate set leaves behind when it is built anew (memory_server/retrieval/candidates.py):
the cached candidates use the set's matrix rows as their vectors, so a memory the new set no longer holds must
not stay cached on a row of the old matrix, which would keep the whole matrix alive. Real SQLite, Qdrant Edge
and the model."""

from __future__ import annotations

import gc
import weakref
from dataclasses import replace
from typing import Any

from memory_server.memories.validation import Filters, read_scope
from memory_server.retrieval.candidates import CandidateSource
from memory_server.services import Services
from memory_server.timestamps import now_rfc3339


def test_a_forgotten_memory_does_not_keep_its_old_set_alive(services: Services, embedder: Any) -> None:
    principal = services.local_principal("acme")
    memories = services.loaded_memories()
    writes = memories.writes
    inserted = writes.remember_many(
        principal.site_id, [writes.validate(content=f"Kept note {n}", bucket="eng") for n in range(6)]
    )
    source = CandidateSource(
        services.storage.candidates,
        memories.index,
        model=memories.embedder.name,
        change_mark=services.storage.outbox.change_mark,
    )
    scope = read_scope(principal, Filters(bucket="eng"))
    vector = embedder.embed_query("note")

    def ranked() -> set[int]:
        return {c.id for c in source.candidates(replace(scope, at=now_rfc3339()), "note", vector)}

    ids = ranked()
    assert ids == {i.row_id for i in inserted}
    gone = inserted[0]
    assert gone.row_id is not None
    first = source.held(scope)
    assert first is not None
    old_matrix = weakref.ref(first[0].vector.base)  # every held vector is a row of the set's one matrix
    del first
    writes.forget(principal, gone.reference)
    assert ranked() == ids - {gone.row_id}  # the set is built anew without it
    gc.collect()
    assert source.cached(gone.row_id) is None
    assert old_matrix() is None
    assert all(source.cached(row_id) is not None for row_id in ids - {gone.row_id})  # the rest stay cached
