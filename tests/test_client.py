"""memory_client's Client and AsyncClient against a real `memory-server serve` process.

Every REST operation through both clients, typed answers, every error code of docs/spec.md mapped onto its exception
(with code, message, retryable and HTTP status), transport failures as retryable errors, and the package's
own promises: it depends on httpx and pydantic only, it is typed (`mypy --strict`), and its models accept
fields a newer server adds.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from client_support import SilentListener, Site, create_site

from memory_client import (
    UNSET,
    AsyncClient,
    Client,
    ContextPack,
    Forbidden,
    Hit,
    InvalidParameters,
    LogItem,
    Memory,
    MemoryServerError,
    NotFound,
    PayloadTooLarge,
    TransportError,
    Unauthorized,
    Unavailable,
    UnprocessableParameters,
)

from conftest import free_port
from procs import REPO_ROOT, ServerProcess

CLIENT_DIR = REPO_ROOT / "client"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    return create_site(tmp_path_factory.mktemp("client") / "data")


@pytest.fixture(scope="module")
def live(site: Site) -> Iterator[ServerProcess]:
    process = ServerProcess(site.data_dir).start()
    try:
        with Client(process.base) as probe:
            while not probe.ready():
                time.sleep(0.05)
        yield process
    finally:
        process.kill()


@pytest.fixture
def client(live: ServerProcess, site: Site) -> Iterator[Client]:
    with Client(live.base, auth=site.auth) as c:
        yield c


# --- saved memories -----------------------------------------------------------------------------------


def test_saved_memory_operations(client: Client) -> None:
    made = client.remember(
        "The sync client ships its own pyproject.",
        type="decision",
        bucket="client-sync",
        project="memory-os",
        tags=["client", "packaging"],
        metadata={"n": 1},
        provenance={"source": "test"},
        occurred_at="2026-11-30T10:00:00Z",
    )
    assert made.created is True
    again = client.remember(
        "The sync client ships its own pyproject.", type="decision", bucket="client-sync", project="memory-os"
    )
    assert (again.reference, again.created) == (made.reference, False)

    memory = client.get(made.reference)
    assert isinstance(memory, Memory)
    assert (memory.content, memory.type, memory.bucket, memory.tags) == (
        "The sync client ships its own pyproject.",
        "decision",
        "client-sync",
        ["client", "packaging"],
    )
    assert memory.occurred_at.year == 2026 and memory.occurred_at.tzinfo is not None
    assert memory.supersedes is None and memory.expires_at is None

    changed = client.update(made.reference, tags=["client"], metadata={"n": 2}, location="projects/client")
    assert (changed.tags, changed.metadata, changed.location) == (["client"], {"n": 2}, "projects/client")
    assert changed.type == "decision"  # untouched: UNSET fields are not sent
    reset = client.update(made.reference, location=None, type=None)
    assert (reset.location, reset.type) == (None, "note")  # None resets to the remember default

    hits = client.recall("which client has its own pyproject?", bucket="client-sync")
    assert hits and isinstance(hits[0], Hit) and hits[0].reference == made.reference
    found = client.search("own pyproject for the client", bucket="client-sync", min_score=0.0)
    assert [h.reference for h in found] == [made.reference]
    assert client.search("own pyproject for the client", bucket="client-sync", tags=["nope"]) == []

    pack = client.context("client packaging", bucket="client-sync", max_items=3, max_tokens=200)
    assert isinstance(pack, ContextPack)
    assert pack.budget.max_items == 3 and pack.budget.used_tokens <= 200
    assert [item.reference for item in pack.items] == [made.reference]

    second = client.remember("A second memory for paging.", bucket="client-sync")
    page = client.list_memories(bucket="client-sync", limit=1)
    assert len(page.memories) == 1 and page.next_cursor is not None
    listed = [m.reference for m in client.iter_memories(bucket="client-sync", page_size=1)]
    assert listed == [second.reference, made.reference]  # newest first, each once
    assert [m.reference for m in client.list_memories(bucket="client-sync", tags=["client"]).memories] == [
        made.reference
    ]

    gone = client.forget(made.reference)
    assert (gone.reference, gone.forgotten) == (made.reference, True)
    with pytest.raises(NotFound):
        client.get(made.reference)


async def test_saved_memory_operations_async(live: ServerProcess, site: Site) -> None:
    async with AsyncClient(live.base, auth=site.auth) as client:
        assert await client.ready()
        made = await client.remember("The async client mirrors the sync one.", bucket="client-async", tags=["async"])
        assert made.created
        assert (await client.get(made.reference)).tags == ["async"]
        updated = await client.update(made.reference, content="The async client mirrors every sync method.")
        assert updated.content == "The async client mirrors every sync method."
        assert (await client.update(made.reference, tags=UNSET, metadata={"k": "v"})).tags == ["async"]
        hits = await client.recall("does the async client mirror the sync one?", bucket="client-async")
        assert hits[0].reference == made.reference
        assert [
            h.reference for h in await client.search("async client mirrors", bucket="client-async", min_score=0.0)
        ] == [made.reference]
        pack = await client.context("async client", bucket="client-async")
        assert pack.items[0].reference == made.reference
        page = await client.list_memories(bucket="client-async")
        assert [m.reference for m in page.memories] == [made.reference]
        assert [m.reference async for m in client.iter_memories(bucket="client-async")] == [made.reference]
        assert (await client.forget(made.reference)).forgotten
        with pytest.raises(NotFound) as missing:
            await client.forget(made.reference)
        assert missing.value.status == 404


# --- conversation logs --------------------------------------------------------------------------------


def test_log_operations(client: Client) -> None:
    cid = "client-sync-log-01"
    ack = client.append(cid, [{"turn": 0, "text": "héllo"}, {"turn": 1}], idempotency_key="batch-1")
    assert (ack.first_seq, ack.last_seq, ack.count, ack.duplicate) == (0, 1, 2, False)
    retry = client.append(cid, [{"turn": 0, "text": "héllo"}, {"turn": 1}], idempotency_key="batch-1")
    assert retry.duplicate and (retry.first_seq, retry.recorded_at) == (0, ack.recorded_at)
    for start in range(2, 25, 5):
        client.append(cid, [{"turn": n} for n in range(start, start + 5)])  # 27 items in all

    tail = client.tail(cid, 3)
    assert [i.payload["turn"] for i in tail] == [24, 25, 26] and all(isinstance(i, LogItem) for i in tail)
    assert client.tail(cid, 0) == []
    page = client.replay(cid, offset=5, limit=4)
    assert [i.seq for i in page] == [5, 6, 7, 8]
    assert client.tail("client-never-written", 10) == []  # unknown conversation: empty, not an error

    for page_size in (5, 9, 27, 1000):  # pages that divide the log exactly, and ones that do not
        items = list(client.iter_log(cid, page_size=page_size))
        assert [i.seq for i in items] == list(range(27))
    assert items[0].payload == {"turn": 0, "text": "héllo"}
    assert [i.seq for i in client.iter_log(cid, offset=20)] == list(range(20, 27))

    listed = {c.conversation_id: c for c in client.iter_conversations(page_size=1)}
    assert listed[cid].item_count == 27
    first = client.list_conversations(limit=1)
    assert len(first.conversations) == 1


async def test_log_operations_async(live: ServerProcess, site: Site) -> None:
    cid = "client-async-log-01"
    async with AsyncClient(live.base, auth=site.auth) as client:
        ack = await client.append(cid, [{"n": n} for n in range(12)], idempotency_key="a-1")
        assert ack.count == 12 and not ack.duplicate
        assert (await client.append(cid, [{"n": 0}], idempotency_key="a-1")).duplicate
        assert [i.payload["n"] for i in await client.tail(cid, 2)] == [10, 11]
        assert [i.seq for i in await client.replay(cid, offset=3, limit=2)] == [3, 4]
        assert [i.seq async for i in client.iter_log(cid, page_size=4)] == list(range(12))
        assert [i.seq async for i in client.iter_log(cid, 10)] == [10, 11]
        conversations = [c.conversation_id async for c in client.iter_conversations()]
        assert cid in conversations
        assert (await client.list_conversations(limit=1000)).next_cursor is None


# --- errors -------------------------------------------------------------------------------------------


def check_error(error: MemoryServerError, cls: type[MemoryServerError], code: str, status: int | None) -> None:
    assert type(error) is cls, repr(error)
    assert error.code == code and error.status == status
    assert error.retryable is (code == "unavailable")
    assert error.message and str(error).startswith(f"{code}: ")
    assert "Traceback" not in error.message


def test_every_error_code(live: ServerProcess, site: Site, client: Client) -> None:
    reader = site.token("memory:read")
    writer = site.token("memory:read", "memory:write")
    with Client(live.base, token=writer) as bearer:
        with pytest.raises(UnprocessableParameters) as info:
            bearer.append("client-bearer-01", [{"a": 1}])
        check_error(info.value, UnprocessableParameters, "unprocessable_parameters", 422)
        with pytest.raises(UnprocessableParameters):
            bearer.tail("client-bearer-01")
        assert bearer.remember("A bearer with write scope may remember.", bucket="client-err").created
    with Client(live.base, token=reader) as read_only:
        with pytest.raises(Forbidden) as forbidden:
            read_only.remember("A read-only token may not remember.")
        check_error(forbidden.value, Forbidden, "forbidden", 403)
        assert read_only.list_memories(bucket="client-err").memories  # reading is allowed
    with pytest.raises(NotFound) as not_found:
        client.forget("no-such-reference")
    check_error(not_found.value, NotFound, "not_found", 404)
    with pytest.raises(PayloadTooLarge) as too_large:
        client.remember("x" * (33 * 1024))
    check_error(too_large.value, PayloadTooLarge, "payload_too_large", 413)
    with pytest.raises(InvalidParameters) as invalid:
        client.tail("short")  # 5 characters: the server rejects it
    check_error(invalid.value, InvalidParameters, "invalid_parameters", 422)
    with pytest.raises(InvalidParameters) as local:
        client.append("has/slash-in-it", [{"a": 1}])  # cannot even be put in the path: rejected here
    assert local.value.status is None
    with pytest.raises(InvalidParameters):
        client.recall("   ")
    with pytest.raises(InvalidParameters):
        client.tail("client-sync-log-01", 5000)
    with Client(live.base, auth=(site.name, "wrong-secret")) as wrong:
        with pytest.raises(Unauthorized) as unauthorized:
            wrong.list_conversations()
        check_error(unauthorized.value, Unauthorized, "unauthorized", 401)
    with Client(live.base) as anonymous:
        with pytest.raises(Unauthorized):
            anonymous.recall("anything")


async def test_every_error_code_async(live: ServerProcess, site: Site) -> None:
    reader = site.token("memory:read")
    async with AsyncClient(live.base, token=reader) as read_only:
        with pytest.raises(UnprocessableParameters):
            await read_only.append("client-bearer-02", [{"a": 1}])
        with pytest.raises(Forbidden):
            await read_only.remember("nope")
    async with AsyncClient(live.base, auth=site.auth) as client:
        with pytest.raises(NotFound):
            await client.get("no-such-reference")
        with pytest.raises(PayloadTooLarge):
            await client.append("client-async-big-1", [{"blob": "y" * (300 * 1024)}])
        with pytest.raises(InvalidParameters):
            await client.replay("bad id!", limit=1)
    async with AsyncClient(live.base, auth=(site.name, "wrong")) as wrong:
        with pytest.raises(Unauthorized):
            await wrong.tail("client-async-log-01")


def test_transport_failures_are_retryable() -> None:
    with Client(f"http://127.0.0.1:{free_port()}", auth=("a", "b")) as down:
        with pytest.raises(TransportError) as refused:
            down.tail("client-down-0001")
        assert refused.value.retryable and refused.value.status is None and refused.value.code == "unavailable"
        assert isinstance(refused.value, Unavailable)
        assert down.ready() is False
    silent = SilentListener()
    try:
        with Client(silent.base, auth=("a", "b"), timeout=0.5) as hung:
            with pytest.raises(TransportError) as timed_out:
                hung.recall("anything")
            assert "timed out" in timed_out.value.message
    finally:
        silent.close()


async def test_transport_failures_are_retryable_async() -> None:
    async with AsyncClient(f"http://127.0.0.1:{free_port()}", auth=("a", "b")) as down:
        with pytest.raises(TransportError):
            await down.recall("anything")
        assert await down.ready() is False


def canned(status: int, body: Any, headers: dict[str, str] | None = None) -> httpx.MockTransport:
    """An httpx transport answering every request with one response: for answers no healthy server gives
    (a proxy's 502 page, a rate limit), to check how they are mapped."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.MockTransport(lambda request: httpx.Response(status, content=content, headers=headers))


@pytest.mark.parametrize(
    ("status", "body", "cls", "code"),
    [
        (
            503,
            {"error": {"code": "unavailable", "message": "model loading", "retryable": True}},
            Unavailable,
            "unavailable",
        ),
        (502, b"<html>Bad Gateway</html>", Unavailable, "unavailable"),
        (500, {"error": {"code": "internal", "message": "boom", "retryable": False}}, Unavailable, "internal"),
        (429, b"slow down", Unavailable, "unavailable"),
        (413, b"too big", PayloadTooLarge, "payload_too_large"),
        (
            418,
            {"error": {"code": "teapot", "message": "short and stout", "retryable": False}},
            MemoryServerError,
            "teapot",
        ),
    ],
)
def test_responses_without_a_server_error_body(status: int, body: Any, cls: type[MemoryServerError], code: str) -> None:
    with Client("http://memory.invalid", transport=canned(status, body, {"retry-after": "2"})) as client:
        with pytest.raises(MemoryServerError) as info:
            client.tail("client-canned-01")
    assert type(info.value) is cls and info.value.code == code and info.value.status == status
    assert info.value.retryable is (status >= 500 or status == 429)
    assert info.value.retry_after == 2.0


def test_models_accept_fields_a_newer_server_adds() -> None:
    memory = {
        "reference": "r1",
        "type": "fact",
        "content": "c",
        "location": None,
        "project": None,
        "team": None,
        "bucket": "default",
        "tags": [],
        "metadata": {},
        "provenance": {},
        "occurred_at": "2026-01-01T00:00:00Z",
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-02T00:00:00Z",
        "supersedes": "r0",
        "superseded_by": "r2",
        "valid_to": "2026-02-01T00:00:00Z",
        "expires_at": "2027-01-01T00:00:00Z",
        "a_field_from_the_future": {"x": 1},
    }
    with Client("http://memory.invalid", transport=canned(200, memory)) as client:
        got = client.get("r1")
    assert (got.supersedes, got.superseded_by) == ("r0", "r2")
    assert got.valid_to is not None and got.expires_at is not None and got.expires_at.year == 2027
    assert not hasattr(got, "a_field_from_the_future")
    hit = Hit.model_validate({**memory, "score": 0.5, "rank_reason": "new"})
    assert hit.score == 0.5 and hit.superseded_by == "r2"
    with Client("http://memory.invalid", transport=canned(200, {"results": "not a list"})) as client:
        with pytest.raises(Unavailable):  # a 2xx the client cannot read: a broken proxy, retryable
            client.recall("q")


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError):
        Client("http://127.0.0.1:1", auth=("a", "b"), token="t")


# --- the package itself -------------------------------------------------------------------------------


def test_package_depends_on_httpx_and_pydantic_only() -> None:
    project = tomllib.loads((CLIENT_DIR / "pyproject.toml").read_text())["project"]
    assert project["name"] == "memory-client"
    assert sorted(dep.split(">")[0].split("=")[0].split("<")[0] for dep in project["dependencies"]) == [
        "httpx",
        "pydantic",
    ]
    assert (CLIENT_DIR / "memory_client" / "py.typed").exists()
    allowed = set(sys.stdlib_module_names) | {"httpx", "pydantic", "memory_client"}
    for source in (CLIENT_DIR / "memory_client").glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, f"{source.name} imports {name}"


def test_package_passes_mypy_strict(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), "memory_client"],
        cwd=CLIENT_DIR,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_package_builds_alone(tmp_path: Path) -> None:
    """The client is a project of its own: its sdist/wheel build holds the package and py.typed."""
    source = tmp_path / "src"  # a copy: an in-tree build would leave build/ and *.egg-info behind
    shutil.copytree(CLIENT_DIR, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "-w",
            str(tmp_path),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    wheels = list(tmp_path.glob("memory_client-*.whl"))
    assert len(wheels) == 1
    import zipfile

    names = set(zipfile.ZipFile(wheels[0]).namelist())
    assert {"memory_client/__init__.py", "memory_client/py.typed", "memory_client/recorder.py"} <= names
    assert not any(name.startswith(("memory_server/", "tests/")) for name in names)


# --- the README examples run as written -----------------------------------------------------------------


def python_blocks(markdown: str, heading: str | None = None) -> list[str]:
    if heading is not None:
        markdown = markdown.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    return [block.split("```", 1)[0] for block in markdown.split("```python\n")[1:]]


def run_example(code: str, live: ServerProcess, site: Site) -> dict[str, Any]:
    code = code.replace("http://127.0.0.1:8765", live.base).replace('("default", SECRET)', "(SITE, SECRET)")
    namespace: dict[str, Any] = {
        "SITE": site.name,
        "SECRET": site.secret,
        "__name__": "example",
        "call_your_model": lambda context, question: f"answer to {question}",
    }
    exec(compile(code, "README example", "exec"), namespace)
    return namespace


def test_readme_examples_run(
    live: ServerProcess, site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # the spool path in the example starts with ~
    monkeypatch.chdir(tmp_path)
    readme = (REPO_ROOT / "README.md").read_text()
    quick, agent = python_blocks(readme, "## Python client")
    assert quick == python_blocks((CLIENT_DIR / "README.md").read_text())[0]  # both READMEs show the same
    assert len(quick.strip().splitlines()) <= 10
    run_example(quick, live, site)
    assert "{'role': 'user', 'content': 'Ship it on Friday?'}" in capsys.readouterr().out
    namespace = run_example(agent, live, site)
    with Client(live.base, auth=site.auth) as client:
        turns = [item.payload for item in client.iter_log(namespace["conversation_id"])]
    assert [t["role"] for t in turns] == ["user", "assistant"] * 2
    assert turns[1]["content"] == "answer to Where do we deploy?"
