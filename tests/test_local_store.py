"""One store per user, shared by every local client at once (memory_server/local/): each stdio client's
process is a bridge to the one process that owns the store, which the first client starts; a killed owner is
replaced without losing an acknowledged write; `serve` takes the store over and the bridges follow it; files
that are not this user's own are refused. Real processes throughout: the MCP Python SDK's stdio client
starting `python -m memory_server serve`, the owner it starts, `kill -9`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

from memory_server.local.paths import store_paths

from conftest import make_settings, query
from procs import REPO_ROOT, ServerProcess, parse_fields, run_cli, server_env

CALL_LIMIT_S = 15.0  # no call may hang longer: it either answers or says unavailable within this


def stdio_client(data_dir: Path, *, legacy: bool = False, **env: str) -> Client:
    """A client of the MCP Python SDK; `legacy`: one that starts with the initialize handshake."""
    transport = StdioTransport(
        command=sys.executable,
        args=["-m", "memory_server", "serve", "--data-dir", str(data_dir)],
        env=server_env(MEMORY_TRANSPORT="stdio", **env),
        cwd=str(REPO_ROOT),
        keep_alive=False,
    )
    return Client(transport, timeout=120, mode="legacy" if legacy else "auto")


def owner_status(data_dir: Path) -> dict[str, Any] | None:
    done = run_cli("owner", "status", data_dir=data_dir)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.lstrip().startswith("{") else None


@pytest.fixture
def stop_owner() -> Iterator[list[Path]]:
    """Data directories whose owner is stopped when the test ends (it would leave by itself, idle, soon)."""
    data_dirs: list[Path] = []
    yield data_dirs
    for data_dir in data_dirs:
        run_cli("owner", "stop", data_dir=data_dir)


async def call(client: Client, tool: str, args: dict[str, Any]) -> Any:
    result = await client.call_tool(tool, args, raise_on_error=False)
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def test_every_client_shares_the_one_owner_of_the_store(tmp_path: Path, stop_owner: list[Path]) -> None:
    data = tmp_path / "data"
    stop_owner.append(data)
    async with stdio_client(data) as first, stdio_client(data) as second:
        made = await call(first, "remember", {"content": "We ship on Fridays.", "bucket": "eng"})
        found = await call(second, "recall", {"query": "when do we ship?", "limit": 3})
        assert found["results"][0]["reference"] == made["reference"]
        await call(second, "append_memory", {"conversation_id": "conv-shared-0001", "items": [{"n": 1}]})
        replayed = await call(first, "replay_memory", {"conversation_id": "conv-shared-0001", "limit": 10})
        assert [item["payload"] for item in replayed["items"]] == [{"n": 1}]
        status = owner_status(data)
        assert status is not None and status["serving"] == "stdio" and len(status["clients"]) == 2
        assert {client["site"] for client in status["clients"]} == {"default"}
        assert status["socket"] == str(data / "owner.sock") and status["model"] == "loaded"
        assert os.stat(data / "owner.sock").st_mode & 0o777 == 0o600
        bridges = {client["pid"] for client in status["clients"]}
        assert status["pid"] not in bridges  # the owner is a process of its own, not either client's


async def test_each_client_acts_for_its_own_site(tmp_path: Path, stop_owner: list[Path]) -> None:
    data = tmp_path / "data"
    stop_owner.append(data)
    async with stdio_client(data) as mine, stdio_client(data, MEMORY_STDIO_SITE="team-local") as theirs:
        await call(mine, "append_memory", {"conversation_id": "conv-site-0001", "items": [{"site": "default"}]})
        assert (await call(theirs, "list_conversations", {}))["conversations"] == []
        await call(theirs, "append_memory", {"conversation_id": "conv-site-0001", "items": [{"site": "team"}]})
        replayed = await call(mine, "replay_memory", {"conversation_id": "conv-site-0001", "limit": 10})
        assert [item["payload"] for item in replayed["items"]] == [{"site": "default"}]


# --- kill -9 of the owner while four clients write ----------------------------------------------------

WRITERS = 4
ACKS_BEFORE_KILL = 6
ACKS_PER_WRITER = 18


class Ledger:
    def __init__(self) -> None:
        self.appends: dict[int, list[int]] = {writer: [] for writer in range(WRITERS)}
        self.remembered: set[str] = set()
        self.unavailable = 0
        self.killed = asyncio.Event()


async def retried(client: Client, tool: str, args: dict[str, Any], ledger: Ledger) -> Any:
    """Call until answered: `unavailable` (the owner died under the call, or no owner yet) is retried with the
    same arguments, as a client does; any other error fails the test, and so does a call that hangs."""
    for _ in range(40):
        result = await asyncio.wait_for(client.call_tool(tool, args, raise_on_error=False), CALL_LIMIT_S)
        if not result.is_error:
            return result.structured_content
        text = result.content[0].text
        assert text.startswith("unavailable: "), text
        ledger.unavailable += 1
        await asyncio.sleep(0.2)
    raise AssertionError(f"{tool} never answered")


async def writer(data: Path, number: int, ledger: Ledger) -> None:
    conversation = f"conv-kill-{number:04d}"
    async with stdio_client(data, legacy=number % 2 == 0) as client:  # both kinds of client
        for step in range(ACKS_PER_WRITER):
            items = [{"writer": number, "step": step}]
            args = {"conversation_id": conversation, "items": items, "idempotency_key": f"w{number}-s{step}"}
            ack = await retried(client, "append_memory", args, ledger)
            assert ack["first_seq"] == step  # retried with its key: never twice
            ledger.appends[number].append(step)
            if step % 3 == 0:
                content = f"Writer {number} reached step {step} of the kill test."
                await retried(client, "remember", {"content": content, "bucket": "kill"}, ledger)
                ledger.remembered.add(content)
            if step % 4 == 1:
                await retried(client, "recall", {"query": f"writer {number} step", "limit": 3}, ledger)
            if step == ACKS_BEFORE_KILL:
                await ledger.killed.wait()


async def test_killing_the_owner_loses_no_acknowledged_write_and_a_new_owner_serves(
    tmp_path: Path, stop_owner: list[Path]
) -> None:
    data = tmp_path / "data"
    stop_owner.append(data)
    ledger = Ledger()
    writers = [asyncio.create_task(writer(data, number, ledger)) for number in range(WRITERS)]
    while min(len(steps) for steps in ledger.appends.values()) < ACKS_BEFORE_KILL:
        await asyncio.sleep(0.05)
        for task in writers:
            if task.done():
                task.result()
    before = owner_status(data)
    assert before is not None and len(before["clients"]) == WRITERS
    os.kill(before["pid"], signal.SIGKILL)
    ledger.killed.set()
    await asyncio.gather(*writers)

    after = owner_status(data)
    assert after is not None and after["pid"] != before["pid"]
    settings = make_settings(data)
    for number, steps in ledger.appends.items():
        stored = query(
            settings,
            "SELECT seq, payload FROM log_items WHERE conversation_id = ? ORDER BY seq",
            f"conv-kill-{number:04d}",
        )
        assert [seq for seq, _ in stored] == steps == list(range(ACKS_PER_WRITER))
        assert [json.loads(payload)["step"] for _, payload in stored] == steps
    contents = {row[0] for row in query(settings, "SELECT content FROM memories WHERE bucket = ?", "kill")}
    assert ledger.remembered <= contents


# --- serve (HTTP and the console) on a store stdio clients use -------------------------------------------


async def test_serve_takes_the_store_over_and_the_stdio_clients_follow_it(
    tmp_path: Path, stop_owner: list[Path]
) -> None:
    data = tmp_path / "data"
    stop_owner.append(data)
    async with stdio_client(data) as client:
        made = await call(client, "remember", {"content": "The console shows every memory.", "bucket": "ui"})
        stdio_owner = owner_status(data)
        assert stdio_owner is not None
        with ServerProcess(data) as server:
            secret = parse_fields(server.log().split("first HTTP start")[1])["secret"]
            served = owner_status(data)
            assert served is not None and served["pid"] == server.proc.pid
            assert served["serving"] == f"HTTP at {server.base}/mcp"
            # The stdio client goes on, now through the HTTP server's process, with the same answers.
            found = await call(client, "recall", {"query": "what does the console show?", "limit": 1})
            assert found["results"][0]["reference"] == made["reference"]
            await call(client, "append_memory", {"conversation_id": "conv-console-0001", "items": [{"n": 1}]})
            listed = httpx2.get(f"{server.base}/v1/conversations", auth=("default", secret), timeout=30)
            assert [c["conversation_id"] for c in listed.json()["conversations"]] == ["conv-console-0001"]
            page = httpx2.get(f"{server.base}/ui/sign-in", timeout=30)
            assert page.status_code == 200
        # The HTTP server stopped: the client's bridge starts a new owner and goes on.
        again = await call(client, "recall", {"query": "what does the console show?", "limit": 1})
        assert again["results"][0]["reference"] == made["reference"]
        last = owner_status(data)
        assert last is not None and last["serving"] == "stdio"


def test_a_second_http_server_on_the_store_is_refused_saying_who_holds_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with ServerProcess(data) as server:
        second = subprocess.run(
            [sys.executable, "-m", "memory_server", "serve", "--port", "0", "--data-dir", str(data)],
            cwd=REPO_ROOT,
            env=server_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode != 0
        assert f"pid {server.proc.pid}" in second.stderr and "Traceback" not in second.stderr


# --- files that are not this user's own, dead owners, odd paths --------------------------------------------


async def first_answer(data: Path, **env: str) -> str:
    """What a client gets when the store cannot be joined: its initialize fails with the reason."""
    with pytest.raises(Exception) as failed:
        async with stdio_client(data, **env) as client:
            await client.list_tools()
    return str(failed.value)


def test_a_dead_owners_socket_and_lock_are_replaced(tmp_path: Path, stop_owner: list[Path]) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    stop_owner.append(data)
    # A process that took the lock and bound the socket, then died without cleaning up.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, socket, sys, time\n"
            f"fd = os.open({str(data / 'owner.lock')!r}, os.O_RDWR | os.O_CREAT, 0o600)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            f"s = socket.socket(socket.AF_UNIX); s.bind({str(data / 'owner.sock')!r}); s.listen(1)\n"
            "print('ready', flush=True); time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == b"ready"
    holder.kill()
    holder.wait()
    assert (data / "owner.sock").exists()

    async def use() -> None:
        async with stdio_client(data) as client:
            await call(client, "append_memory", {"conversation_id": "conv-stale-0001", "items": [{"n": 1}]})

    asyncio.run(use())


async def test_a_socket_that_is_a_symlink_or_another_users_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(elsewhere))
    listener.listen(1)
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "owner.sock").symlink_to(elsewhere)
    said = await first_answer(data)
    assert "owner.sock is not a socket (a symlink" in said
    (data / "owner.sock").unlink()
    if os.getuid() != 0:
        listener.close()
        pytest.skip("giving a socket to another user needs root")
    os.link(elsewhere, data / "owner.sock")
    os.chown(data / "owner.sock", 65534, 65534, follow_symlinks=False)
    said = await first_answer(data)
    assert "belongs to another user (uid 65534); refusing to connect" in said
    listener.close()


async def test_a_lock_file_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    target = tmp_path / "someone-elses-file"
    target.write_text("keep me")
    (data / "owner.lock").symlink_to(target)
    said = await first_answer(data)
    assert "owner.lock is a symlink; remove it" in said
    assert target.read_text() == "keep me"


async def test_a_data_directory_too_deep_for_a_unix_socket_puts_the_socket_in_a_private_folder(
    tmp_path: Path, stop_owner: list[Path]
) -> None:
    data = tmp_path / ("deep-" * 12) / ("folder-" * 10) / "data"
    stop_owner.append(data)
    assert len(os.fsencode(data / "owner.sock")) > 108
    async with stdio_client(data) as client, stdio_client(data) as other:
        await call(client, "append_memory", {"conversation_id": "conv-deep-0001", "items": [{"n": 1}]})
        listed = await call(other, "list_conversations", {})
        assert [c["conversation_id"] for c in listed["conversations"]] == ["conv-deep-0001"]
        status = owner_status(data)
        assert status is not None and len(status["clients"]) == 2
        assert Path(status["socket"]) == store_paths(data).socket
        assert not Path(status["socket"]).is_relative_to(data)
        assert os.stat(Path(status["socket"]).parent).st_mode & 0o777 == 0o700


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


async def test_a_read_only_data_directory_is_reported_and_keeps_what_it_holds(tmpfs: Path) -> None:
    data = tmpfs / "data"
    async with stdio_client(data) as client:
        await call(client, "append_memory", {"conversation_id": "conv-ro-0001", "items": [{"n": 1}]})
    assert run_cli("owner", "stop", data_dir=data).returncode == 0
    remounted = subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], capture_output=True)
    assert remounted.returncode == 0, remounted.stderr
    said = await first_answer(data)
    assert "Read-only file system" in said and "Traceback" not in said
    subprocess.run(["mount", "-o", "remount,rw", str(tmpfs)], check=True)
    async with stdio_client(data) as client:
        listed = await call(client, "list_conversations", {})
        assert [c["conversation_id"] for c in listed["conversations"]] == ["conv-ro-0001"]
    run_cli("owner", "stop", data_dir=data)


async def test_a_full_disk_is_reported_to_the_client(tmpfs: Path) -> None:
    data = tmpfs / "data"
    filler = tmpfs / "filler"
    with open(filler, "wb") as file:
        try:
            while True:
                file.write(b"\0" * (1 << 20))
        except OSError:
            pass
    said = await first_answer(data)
    assert "full" in said.lower() and "Traceback" not in said


def test_an_owner_of_another_version_is_named_with_what_to_do(tmp_path: Path, stop_owner: list[Path]) -> None:
    """An owner started from an older copy of the server keeps the store; a client of this version says so."""
    data = tmp_path / "data"
    stop_owner.append(data)
    old = tmp_path / "old"
    subprocess.run(["cp", "-r", str(REPO_ROOT / "memory_server"), str(old)], check=True)
    version_file = old / "version.py"
    version_file.write_text(version_file.read_text() + '\n__version__ = "0.0.9"\n')
    starter = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import old as memory_server; "
        "sys.modules['memory_server'] = memory_server; "
        "from memory_server.launch import main; sys.argv = ['memory-server', 'owner', 'run', *sys.argv[1:]]; main()"
    )
    older = subprocess.Popen(
        [sys.executable, "-c", starter, "--data-dir", str(data)],
        cwd=tmp_path,
        env=server_env(MEMORY_OWNER_IDLE_S="60"),
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while (status := owner_status(data)) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert status is not None and status["version"] == "0.0.9"
        said = asyncio.run(first_answer(data))
        assert f"served by memory-server 0.0.9 (pid {older.pid})" in said
        assert "memory-server owner stop" in said
    finally:
        older.kill()
        older.wait()


# --- the owner's life, and where the store is ----------------------------------------------------------


async def test_an_owner_without_clients_exits_after_its_idle_time(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with stdio_client(data, MEMORY_OWNER_IDLE_S="1") as client:
        await call(client, "append_memory", {"conversation_id": "conv-idle-0001", "items": [{"n": 1}]})
        status = owner_status(data)
        assert status is not None
    deadline = time.monotonic() + 30
    while running(status["pid"]) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert not running(status["pid"]), "the idle owner did not exit"
    assert owner_status(data) is None and not (data / "owner.sock").exists()


def running(pid: int) -> bool:
    """Whether the process exists and has not exited (a zombie waiting for its parent has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


async def test_without_a_data_directory_every_client_uses_the_per_user_store(
    tmp_path: Path, stop_owner: list[Path]
) -> None:
    data_home = tmp_path / "xdg-data"
    store = data_home / "memory-server"
    stop_owner.append(store)
    env = server_env(MEMORY_TRANSPORT="stdio", XDG_DATA_HOME=str(data_home))

    def client(cwd: Path) -> Client:
        cwd.mkdir(exist_ok=True)
        transport = StdioTransport(
            command=sys.executable, args=["-m", "memory_server", "serve"], env=env, cwd=str(cwd), keep_alive=False
        )
        return Client(transport, timeout=120)

    # Two projects, two working directories: one store.
    async with client(tmp_path / "project-a") as first, client(tmp_path / "project-b") as second:
        await call(first, "append_memory", {"conversation_id": "conv-home-0001", "items": [{"n": 1}]})
        listed = await call(second, "list_conversations", {})
        assert [c["conversation_id"] for c in listed["conversations"]] == ["conv-home-0001"]
    assert (store / "memory.db").is_file() and not (tmp_path / "project-a" / "data").exists()
    assert os.stat(store).st_mode & 0o777 == 0o700


def test_a_store_left_in_dot_data_is_named_at_start_up(tmp_path: Path) -> None:
    """The default used to be ./data: a server started beside such a store says where the memory is."""
    old = tmp_path / "data"
    old.mkdir()
    (old / "memory.db").write_bytes(b"")
    data_home = tmp_path / "xdg-data"
    done = subprocess.run(
        [sys.executable, "-m", "memory_server", "serve", "--transport", "stdio"],
        cwd=tmp_path,
        env=server_env(XDG_DATA_HOME=str(data_home)),
        input=b"",
        capture_output=True,
        timeout=120,
    )
    said = done.stderr.decode()
    assert f"a memory store exists in {old}" in said and f"--data-dir {old}" in said, said
    assert str(data_home / "memory-server") in said
    run_cli("owner", "stop", "--data-dir", str(data_home / "memory-server"))
