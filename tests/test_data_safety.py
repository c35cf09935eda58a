"""Data safety against a real server process: backups and exports never land on live files, every file the
server or CLI writes is private, a damaged database is refused at start-up, and doctor never crashes."""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpx2
import pytest

from procs import ServerProcess, parse_fields, run_cli, server_env

CONVERSATION = "conv-safety-0001"


def create_site(data: Path, name: str = "acme") -> str:
    created = run_cli("site", "create", name, data_dir=data)
    assert created.returncode == 0, created.stderr
    return parse_fields(created.stdout)["secret"]


def append(server: ServerProcess, secret: str, n: int) -> None:
    response = httpx2.post(
        f"{server.base}/v1/conversations/{CONVERSATION}/items",
        auth=("acme", secret),
        json={"items": [{"n": i} for i in range(n)]},
        timeout=30,
    )
    assert response.status_code == 201, response.text


def items(server: ServerProcess, secret: str) -> list[int]:
    response = httpx2.get(
        f"{server.base}/v1/conversations/{CONVERSATION}/items",
        auth=("acme", secret),
        params={"offset": 0, "limit": 1000},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return [item["payload"]["n"] for item in response.json()["items"]]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def modes(paths: Iterable[Path]) -> dict[Path, str]:
    """Each path's mode, leaving out one that went away since it was listed."""
    found = {}
    for path in paths:
        try:
            found[path] = oct(mode(path))
        except FileNotFoundError:
            continue
    return found


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[ServerProcess, str, Path]]:
    data = tmp_path / "data"
    secret = create_site(data)
    server = ServerProcess(data)
    server.start()
    try:
        append(server, secret, 29)
        yield server, secret, data
    finally:
        server.kill()


def test_backup_and_export_refuse_every_live_file_even_through_links(
    running: tuple[ServerProcess, str, Path], tmp_path: Path
) -> None:
    server, secret, data = running
    link = tmp_path / "innocent.db"
    link.symlink_to(data / "memory.db-wal")
    hard = tmp_path / "hard.db"
    os.link(data / "memory.db", hard)
    targets = [
        data / "memory.db-wal",
        data / "memory.db-shm",
        data / "memory.db-journal",
        data / "memory.db",
        data / "index" / "copy.db",
        link,
        hard,
        data / "." / "memory.db-wal",
        data / "other.db",
        data / "exports" / "all.jsonl",
    ]
    for target in targets:
        for command in (("backup", str(target), "--force"), ("export", str(target), "--force")):
            refused = run_cli(*command, data_dir=data)
            assert refused.returncode == 1, (command, refused.stdout)
            assert "which the server writes to" in refused.stderr and "Traceback" not in refused.stderr
    assert os.readlink(link) == str(data / "memory.db-wal")  # the link itself was not replaced either
    # Every acknowledged item is still there after a restart (the WAL was never touched).
    server.stop()
    server.start()
    assert items(server, secret) == list(range(29))


def leftovers(directory: Path) -> list[str]:
    """Temporary files a backup or an export left behind."""
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_backup_and_export_replace_their_target_by_renaming_a_finished_file(
    running: tuple[ServerProcess, str, Path], tmp_path: Path
) -> None:
    server, secret, data = running
    for command in ("backup", "export"):
        target = tmp_path / f"{command}.out"
        target.write_text("precious")
        old = tmp_path / f"{command}.old"
        os.link(target, old)  # the file FILE named before: written into in place, it would change too
        done = run_cli(command, str(target), "--force", data_dir=data)
        assert done.returncode == 0, done.stderr
        assert old.read_text() == "precious", f"{command} wrote into the existing file instead of replacing it"
        assert not os.path.samefile(target, old) and target.stat().st_size > len("precious")
    assert leftovers(tmp_path) == []
    assert items(server, secret) == list(range(29))


def test_every_file_written_is_private_whatever_the_umask(tmp_path: Path) -> None:
    data = tmp_path / "data"
    previous = os.umask(0o022)  # the usual umask, inherited by the processes below: it leaked 0755/0644 files
    try:
        check_private_files(data, tmp_path)
    finally:
        os.umask(previous)


def check_private_files(data: Path, tmp_path: Path) -> None:
    secret = create_site(data)
    with ServerProcess(data) as server:
        append(server, secret, 3)
        httpx2.post(
            f"{server.base}/v1/memories", auth=("acme", secret), json={"content": "A private fact."}, timeout=60
        )
        backup = run_cli("backup", str(tmp_path / "backup.db"), data_dir=data)
        assert backup.returncode == 0, backup.stderr
        export = run_cli("export", str(tmp_path / "export.jsonl"), data_dir=data)
        assert export.returncode == 0, export.stderr
        assert mode(data) == 0o700
        # The index writes through short-lived temporary files: one listed may be gone when it is looked at.
        written = modes(p for p in data.rglob("*") if p.is_file())
        assert {p.name for p in written} >= {"memory.db", "memory.db-wal", "memory.db-shm"}
        assert set(written.values()) == {oct(0o600)}, written
        folders = modes(p for p in data.rglob("*") if p.is_dir())
        assert set(folders.values()) == {oct(0o700)}, folders
        assert mode(tmp_path / "backup.db") == 0o600
        assert mode(tmp_path / "export.jsonl") == 0o600


def test_doctor_warns_about_a_readable_data_directory_with_the_fix(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_site(data)
    os.chmod(data, 0o755)
    os.chmod(data / "memory.db", 0o644)
    report = run_cli("doctor", data_dir=data)
    line = next(line for line in report.stdout.splitlines() if "permissions" in line)
    assert line.startswith("WARN") and f"chmod 700 {data.resolve()}" in line and "chmod 600" in line, line
    os.chmod(data, 0o700)
    os.chmod(data / "memory.db", 0o600)
    report = run_cli("doctor", data_dir=data)
    assert next(line for line in report.stdout.splitlines() if "permissions" in line).startswith("ok")


def damage(db: Path) -> None:
    """Flip the page-type byte of a leaf page of the log, in the middle of it (one flipped byte)."""
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    leaves = [
        row[0]
        for row in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = 'log_items' AND pagetype = 'leaf' ORDER BY pageno"
        )
    ]
    conn.close()
    with open(db, "r+b") as file:
        file.seek((leaves[len(leaves) // 2] - 1) * page_size)
        byte = file.read(1)
        file.seek(-1, os.SEEK_CUR)
        file.write(bytes([byte[0] ^ 0xFF]))


def damaged_data_dir(tmp_path: Path) -> Path:
    """A data directory whose database holds 8,000 log items and then one flipped byte in a b-tree leaf."""
    data = tmp_path / "data"
    secret = create_site(data)
    with ServerProcess(data) as server:
        for _ in range(40):
            append(server, secret, 200)
        server.stop()
    damage(data / "memory.db")
    return data


def test_a_damaged_database_is_refused_at_start_up_and_doctor_reports_it(tmp_path: Path) -> None:
    data = damaged_data_dir(tmp_path)
    serve = run_cli("serve", "--port", "0", data_dir=data)
    assert serve.returncode == 1
    assert f"the database {data / 'memory.db'} is damaged" in serve.stderr
    assert "memory-server backup" in serve.stderr and "memory-server doctor" in serve.stderr
    assert "Traceback" not in serve.stderr and "secret" not in serve.stderr
    report = run_cli("doctor", data_dir=data)
    assert report.returncode == 1 and "Traceback" not in report.stdout + report.stderr
    assert any(line.startswith("FAIL  sqlite integrity") for line in report.stdout.splitlines()), report.stdout
    check_copies_refused(data, tmp_path)


def check_copies_refused(data: Path, tmp_path: Path) -> None:
    """backup and export of a damaged database: the start-up message, the target left as it was, no
    temporary file behind."""
    out = tmp_path / "copies"
    out.mkdir()
    for command in ("backup", "export"):
        target = out / f"{command}.out"
        target.write_text("precious")
        done = run_cli(command, str(target), "--force", data_dir=data)
        assert done.returncode == 1, (command, done.stdout)
        assert done.stderr.startswith(f"error: the database {data / 'memory.db'} is damaged"), (command, done.stderr)
        assert "memory-server doctor" in done.stderr and "Traceback" not in done.stderr, (command, done.stderr)
        assert target.read_text() == "precious"
    assert leftovers(out) == []


@pytest.mark.parametrize("content", [b"this is not a database at all" * 100, b"\x00" * 4096, b"SQLite format 3\x00"])
def test_a_file_that_is_not_a_database_gets_the_same_clean_message(tmp_path: Path, content: bytes) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "memory.db").write_bytes(content)
    for command in (("serve", "--port", "0"), ("site", "list"), ("export", "-"), ("token", "list", "--site", "x")):
        outcome = run_cli(*command, data_dir=data)
        assert outcome.returncode == 1, (command, outcome.stdout)
        assert "Traceback" not in outcome.stderr, (command, outcome.stderr)
        assert outcome.stderr.startswith(f"error: the database {data / 'memory.db'} is damaged"), (
            command,
            outcome.stderr,
        )
    report = run_cli("doctor", data_dir=data)
    assert report.returncode == 1 and "Traceback" not in report.stdout + report.stderr
    assert "FAIL" in report.stdout
    check_copies_refused(data, tmp_path)


def test_a_damaged_page_met_while_serving_is_reported_by_readyz(tmp_path: Path) -> None:
    data = tmp_path / "data"
    secret = create_site(data)
    with ServerProcess(data) as server:
        for _ in range(40):
            append(server, secret, 200)
        server.stop()
    # Damage it after the start-up check would pass: start, then damage the file under the running server.
    with ServerProcess(data) as server:
        damage(data / "memory.db")
        for offset in range(0, 8000, 1000):  # replaying the whole log reads the damaged page
            response = httpx2.get(
                f"{server.base}/v1/conversations/{CONVERSATION}/items",
                auth=("acme", secret),
                params={"offset": offset, "limit": 1000},
                timeout=30,
            )
            if response.status_code != 200:
                break
        assert response.status_code == 503, response.status_code
        assert "is damaged" in response.json()["error"]["message"], response.text[:500]
        ready = httpx2.get(f"{server.base}/readyz", timeout=30)
        assert ready.status_code == 503 and any("is damaged" in r for r in ready.json()["reasons"])


def test_damage_the_start_up_check_had_no_time_for_is_found_in_the_background(tmp_path: Path) -> None:
    """MEMORY_INTEGRITY_CHECK_S bounds the check before the port opens (0: none); the rest of it runs in
    the background, and damage it finds shows in /readyz and the log."""
    data = damaged_data_dir(tmp_path)
    server = ServerProcess(data, env=server_env(MEMORY_INTEGRITY_CHECK_S="0"))
    server.start()
    try:
        deadline = time.monotonic() + 60
        while True:
            ready = httpx2.get(f"{server.base}/readyz", timeout=30)
            reasons = ready.json().get("reasons", [])
            if any("is damaged" in r for r in reasons) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert ready.status_code == 503, ready.text
        assert any(f"the database {data / 'memory.db'} is damaged" in r for r in reasons), reasons
        assert "is damaged" in server.log() and "Traceback" not in server.log()
    finally:
        server.kill()


def test_a_missing_database_beside_a_used_index_is_damage_not_a_first_start(tmp_path: Path) -> None:
    """memory.db and its WAL gone while index/ holds points: every command refuses with what to do; nothing
    makes a new site or secret, and the index keeps its points for the restored database."""
    data = tmp_path / "data"
    secret = create_site(data)
    facts = [f"The spare fuse number {n} sits in drawer {n} of the workshop." for n in range(4)]
    with ServerProcess(data) as server:
        server.wait_ready()
        for fact in facts:
            response = httpx2.post(
                f"{server.base}/v1/memories", json={"content": fact}, auth=("acme", secret), timeout=60
            )
            assert response.status_code == 201, response.text
        server.stop()
    kept = tmp_path / "memory.db.kept"
    assert run_cli("backup", str(kept), data_dir=data).returncode == 0
    for name in ("memory.db", "memory.db-wal", "memory.db-shm"):
        (data / name).unlink(missing_ok=True)

    for command in (
        ("serve", "--port", "0"),
        ("site", "list"),
        ("reindex",),
        ("import", "--from", "markdown", str(tmp_path)),
    ):
        done = run_cli(*command, data_dir=data)
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and "secret" not in done.stdout + done.stderr, (command, done.stderr)
        assert f"the database {data / 'memory.db'} is missing, though the vector index" in done.stderr, (
            command,
            done.stderr,
        )
        assert "memory-server backup" in done.stderr, done.stderr
    assert not (data / "memory.db").exists()  # nothing made a new database

    # Restored, everything is there, and the index kept its points through the refused starts.
    (data / "memory.db").write_bytes(kept.read_bytes())
    report = run_cli("doctor", data_dir=data)
    assert f"ok    index points: {len(facts)} points, one per indexed memory" in report.stdout, report.stdout


def test_a_new_data_directory_and_a_never_filled_index_still_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert run_cli("site", "create", "acme", data_dir=data).returncode == 0  # no index at all: a first start
    with ServerProcess(data) as server:  # the index is set up, with no memories in it
        server.wait_ready()
        server.stop()
    for name in ("memory.db", "memory.db-wal", "memory.db-shm"):
        (data / name).unlink(missing_ok=True)
    created = run_cli("site", "create", "acme", data_dir=data)
    assert created.returncode == 0, created.stderr
