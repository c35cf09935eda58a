"""`memory-server doctor`: check a data directory and say how to fix what is wrong.

Each check gives ok, WARN, FAIL or skip, a detail, and for a failure or warning the fix. A check that
cannot run (a damaged file raising where a sound one answers) is a FAIL line too: doctor never crashes.
A check that needs the vector index is skipped, not failed, when a running server holds the embedded
index: that is the normal state of a serving data directory. Nothing here changes the data; the index,
when free, is opened only to read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memory_server.embeddings.base import Embedder
from memory_server.index.base import IndexInfo, VectorIndex
from memory_server.settings import Settings
from memory_server.storage.backends import POSTGRES, backend_of, database_url
from memory_server.storage.checks import FAIL, OK, SKIP, WARN, Check
from memory_server.storage.files import exposed
from memory_server.storage.sqlite.checks import SqliteState, sqlite_checks

if TYPE_CHECKING:
    from memory_server.embeddings.factory import ModelChoice
    from memory_server.storage.postgres.checks import PostgresState

__all__ = ["FAIL", "OK", "SKIP", "WARN", "Check", "run_checks"]


@dataclass
class _State:
    embedder: Embedder | None = None
    storage: SqliteState | PostgresState = field(default_factory=SqliteState)
    index: VectorIndex | None = None
    index_held: bool = False  # a running server holds the embedded index
    follows: bool = False  # the embedded index follows a shared authority's change feed
    index_path: Path | None = None  # where the index's own files are (its re-embedding marker)

    @property
    def memories(self) -> int | None:
        return self.storage.counts[0] if self.storage.counts is not None else None


def run_checks(
    settings: Settings, *, project_root: Path, load_embedder: Callable[[ModelChoice], Any] | None = None
) -> Iterator[Check]:
    """Yield the checks one by one (the slow model load comes first, then the fast ones)."""
    state = _State(follows=_follows(settings), index_path=settings.index_path)
    try:
        yield from _guarded("model", lambda: iter([_check_model(settings, state, project_root, load_embedder)]))
        if backend_of(settings) is POSTGRES:
            yield from _guarded("postgres", lambda: _postgres(settings, state))
        else:
            data_dir = settings.data_dir
            if not data_dir.is_dir():
                yield Check(
                    "data directory",
                    FAIL,
                    f"{data_dir.resolve()} does not exist",
                    "start the server once (it creates it), or pass the right --data-dir",
                )
                return
            yield from _guarded("permissions", lambda: _check_permissions(settings))
            yield from _guarded("owner", lambda: _check_owner(settings))
            sqlite = state.storage = SqliteState()
            yield from _guarded("sqlite", lambda: sqlite_checks(settings.db_path, sqlite))
        if state.storage.conn is None:
            return
        yield from _guarded("index", lambda: _check_index(settings, state))
        if _follows(settings):
            yield from _guarded("index follows", lambda: _check_following(settings, state))
        else:
            yield from _guarded("index backlog", lambda: _check_outbox(state))
    finally:
        if state.index is not None:
            state.index.close()
        state.storage.close()


def _postgres(settings: Settings, state: _State) -> Iterator[Check]:
    """The database's checks (the data directory then holds only the embedded index, if any)."""
    from memory_server.storage.postgres.checks import PostgresState, postgres_checks  # psycopg only when it is used

    if settings.data_dir.is_dir():
        yield from _check_permissions(settings)
    postgres = state.storage = PostgresState()
    yield from postgres_checks(database_url(settings), postgres)


def _guarded(name: str, checks: Callable[[], Iterator[Check]]) -> Iterator[Check]:
    """The checks, and a FAIL line in place of whatever exception a damaged file raises in the middle."""
    try:
        yield from checks()
    except Exception as exc:
        yield Check(
            name,
            FAIL,
            f"could not be checked: {type(exc).__name__}: {exc}",
            "restore the latest `memory-server backup` into the data directory, then `memory-server reindex`",
        )


def _check_permissions(settings: Settings) -> Iterator[Check]:
    """The data directory holds every memory, every log and the credential hashes: its owner's only."""
    data_dir = settings.data_dir.resolve()
    readable = [p for p in (data_dir, *sorted(data_dir.glob("memory.db*"))) if p.exists() and exposed(p)]
    if not readable:
        yield Check("permissions", OK, f"{data_dir} and its database files are private to their owner")
        return
    fix = f"chmod 700 {data_dir}"
    if any(p != data_dir for p in readable):
        fix += f" && chmod 600 {data_dir}/memory.db*"
    yield Check("permissions", WARN, f"other users of this machine can read {', '.join(str(p) for p in readable)}", fix)


def _check_owner(settings: Settings) -> Iterator[Check]:
    """The process that owns the store for local clients (memory_server/local), if one runs."""
    from memory_server.local.paths import UnsafePath, store_paths
    from memory_server.local.status import describe, owner_status

    paths = store_paths(settings.data_dir)
    try:
        status = owner_status(paths)
    except UnsafePath as exc:
        yield Check("owner", FAIL, str(exc), f"remove {paths.socket}; the next client starts an owner")
        return
    if status is None:
        yield Check("owner", OK, f"none running (the next client starts one at {paths.socket})")
    else:
        yield Check("owner", OK, describe(status))


def _check_model(
    settings: Settings, state: _State, project_root: Path, load_embedder: Callable[[ModelChoice], Any] | None
) -> Check:
    from memory_server.embeddings.factory import NAMED_MODELS, resolve_model
    from memory_server.embeddings.factory import load_embedder as default_loader

    choice = resolve_model(settings.embedding_model, project_root=project_root)
    try:
        state.embedder = (
            load_embedder or (lambda choice: default_loader(choice, threads=1, engine=settings.embedding_engine))
        )(choice)
    except Exception as exc:
        return Check(
            "model",
            FAIL,
            f"cannot load {choice.describe()}: {exc}",
            f"set MEMORY_EMBEDDING_MODEL to one of {', '.join(NAMED_MODELS)} or to a local "
            "sentence-transformers model directory",
        )
    return Check("model", OK, f"{state.embedder.name} ({state.embedder.dimension} dimensions), {choice.describe()}")


def _check_index(settings: Settings, state: _State) -> Iterator[Check]:
    from memory_server.index.base import IndexLocked

    reindex = "run `memory-server reindex` (with the server stopped)"
    if settings.index_backend == "embedded" and not settings.index_path.is_dir():
        if state.memories and state.follows:
            yield Check(
                "index",
                OK,
                f"not created yet at {settings.index_path} (the server builds it from the "
                f"database's {state.memories} memories at start-up)",
            )
        elif state.memories:
            yield Check(
                "index", FAIL, f"no index at {settings.index_path} but {state.memories} memories in SQLite", reindex
            )
        else:
            yield Check("index", OK, f"not created yet at {settings.index_path} (the server builds it at start-up)")
        return
    try:
        from memory_server.services import open_configured_index

        index = open_configured_index(settings)
    except IndexLocked as exc:
        state.index_held = True
        yield Check("index", SKIP, f"a server is running: {exc} Checks that need the index are skipped.")
        return
    except Exception as exc:
        where = settings.qdrant_url if settings.index_backend == "server" else settings.index_path
        fix = (
            "start Qdrant or correct MEMORY_QDRANT_URL"
            if settings.index_backend == "server"
            else f"delete {settings.index_path} and {reindex}"
        )
        yield Check("index", FAIL, f"cannot open the index at {where}: {exc}", fix)
        return
    state.index = index
    try:
        info = index.info()
    except Exception as exc:
        where = f"the Qdrant server at {settings.qdrant_url}" if settings.index_backend == "server" else "the index"
        fix = "start Qdrant or correct MEMORY_QDRANT_URL" if settings.index_backend == "server" else reindex
        yield Check("index", FAIL, f"{where} is not reachable: {exc}", fix)
        return
    where = settings.qdrant_url if settings.index_backend == "server" else settings.index_path
    yield Check("index", OK, f"{settings.index_backend} index reachable at {where}")
    yield from _check_index_contents(state, index, info, reindex)


def _check_index_contents(state: _State, index: VectorIndex, info: IndexInfo | None, reindex: str) -> Iterator[Check]:
    from memory_server.memories.reembedding import MARKER_FILE, read_marker

    """The open index was built with the configured model and holds one point per indexed memory."""
    if info is None:
        if state.memories:
            yield Check(
                "index model", FAIL, f"the index is not initialised but SQLite holds {state.memories} memories", reindex
            )
        else:
            yield Check("index model", OK, "the index is not initialised yet (the server does it at start-up)")
        return
    embedder = state.embedder
    if embedder is None:
        yield Check(
            "index model",
            SKIP,
            f"built with {info.model} ({info.dimension} dimensions); the model did not load, so it cannot be compared",
        )
        return
    if (info.model, info.dimension) != (embedder.name, embedder.dimension):
        yield Check(
            "index model",
            WARN,
            f"the index was built with {info.model} ({info.dimension} dimensions) but the configured model "
            f"is {embedder.name} ({embedder.dimension} dimensions): the next start embeds every memory "
            "again in the background, recall ranking by words alone meanwhile",
            f"to do it now instead, {reindex}",
        )
        return
    marker = read_marker(state.index_path / MARKER_FILE) if state.index_path is not None else None
    if marker is not None:
        left = state.storage.counts[2] if state.storage.counts is not None and not state.follows else None
        yield Check(
            "index model",
            WARN,
            f"memories are being embedded again with {marker.target} (from "
            f"{marker.source}, {marker.total} in all"
            + (f", {left} not in the index yet" if left is not None else "")
            + "): recall ranks by words "
            "alone until it is done",
            "let the server run; it carries on after a restart",
        )
    else:
        yield Check("index model", OK, f"built with {info.model} ({info.dimension} dimensions), as configured")

    if state.storage.counts is None:
        return
    try:
        points = index.count()
    except Exception as exc:
        yield Check("index points", FAIL, f"cannot count the index's points: {exc}", reindex)
        return
    if state.follows:  # the index holds every memory of the authority, whoever wrote it
        if points == state.memories:
            yield Check("index points", OK, f"{points} points, one per memory")
        else:
            yield Check(
                "index points",
                WARN,
                f"the index holds {points} points for {state.memories} memories: the server catches up at start-up",
                reindex,
            )
        return
    indexed = state.storage.counts[1]
    if points == indexed:
        yield Check("index points", OK, f"{points} points, one per indexed memory")
    else:
        yield Check(
            "index points",
            FAIL,
            f"the index holds {points} points but SQLite marks {indexed} memories indexed",
            reindex,
        )


def _follows(settings: Settings) -> bool:
    return backend_of(settings).shared and settings.index_backend == "embedded"


def _check_following(settings: Settings, state: _State) -> Iterator[Check]:
    """How far this server's own index got in the authority's change feed (others write while it is down)."""
    from memory_server.memories.follower import FOLLOW_FILE, read_state

    conn = state.storage.conn
    if conn is None or state.index_held:
        return
    identity = conn.execute("SELECT value FROM meta WHERE key = 'identity'").fetchone()
    newest = conn.execute("SELECT seq FROM memory_change_counter").fetchone()
    followed = read_state(settings.index_path / FOLLOW_FILE)
    if identity is None or newest is None:
        return
    if followed is None or followed.authority != identity[0]:
        yield Check(
            "index follows",
            WARN,
            "the index has not followed this database yet: the server rebuilds it from the stored vectors at start-up",
        )
    elif followed.mark >= int(newest[0]):
        yield Check("index follows", OK, f"up to date with the database's change feed (change {followed.mark})")
    else:
        yield Check(
            "index follows",
            OK,
            f"{int(newest[0]) - followed.mark} changes behind the database: the server applies them at start-up",
        )


def _check_outbox(state: _State) -> Iterator[Check]:
    if state.storage.counts is None:
        return
    _, _, pending, deletions = state.storage.counts
    fix = "start the server (it indexes the backlog at start-up) or run `memory-server reindex`"
    running = (
        "; the running server retries them every few seconds - if the number does not fall, "
        "read its log for index errors"
    )
    if not pending:
        yield Check("index backlog", OK, "every memory is indexed")
    elif state.index_held:
        yield Check("index backlog", OK, f"{pending} memories not yet indexed{running}")
    else:
        yield Check("index backlog", FAIL, f"{pending} memories are in SQLite but not in the vector index", fix)
    if not deletions:
        yield Check("index deletions", OK, "no deletions queued")
    elif state.index_held:
        yield Check("index deletions", OK, f"{deletions} forgotten memories still queued for removal{running}")
    else:
        yield Check(
            "index deletions",
            FAIL,
            f"{deletions} forgotten memories are still queued for removal from the vector index",
            fix,
        )
