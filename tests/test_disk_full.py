"""A full disk under a real server process: clients get `unavailable` saying the disk is full (not a generic
internal error), /readyz says so, the log gets a line a minute instead of a traceback per request, nothing
acknowledged is lost, and writes resume by themselves once there is space again.

The data directory lives on a small tmpfs mounted for the test (root only; skipped where mounting is not
allowed)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from conftest import wait_ready
from procs import ServerProcess, parse_fields, run_cli

CONVERSATION = "conv-disk-full-01"
DISK_MB = 160


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(mount: Path, leave_bytes: int) -> Path:
    """A filler file taking all but `leave_bytes` of the disk."""
    filler = mount / "filler"
    stats = os.statvfs(mount)
    free = stats.f_bavail * stats.f_frsize
    with open(filler, "wb") as out:
        out.truncate(0)
        remaining = max(0, free - leave_bytes)
        chunk = b"\0" * (1 << 20)
        while remaining > 0:
            out.write(chunk[: min(len(chunk), remaining)])
            remaining -= len(chunk)
    return filler


def test_a_full_disk_is_reported_clearly_and_loses_nothing(small_disk: Path, tmp_path: Path) -> None:
    data = small_disk / "data"
    secret = parse_fields(run_cli("site", "create", "acme", data_dir=data).stdout)["secret"]
    log_path = tmp_path / "server.log"  # not on the full disk
    server = ServerProcess(data, log_path=log_path)
    server.start()
    try:
        auth = ("acme", secret)
        url = f"{server.base}/v1/conversations/{CONVERSATION}/items"
        acknowledged: list[tuple[int, int]] = []  # (batch number, first seq)
        wait_ready(server.base)  # the model and a fresh index first: the disk fills under a serving server
        with httpx2.Client(timeout=60) as http:
            assert http.post(url, auth=auth, json={"items": [{"batch": -1}]}).status_code == 201
            filler = fill(small_disk, leave_bytes=256 * 1024)
            failures = []
            for batch in range(300):
                response = http.post(url, auth=auth, json={"items": [{"batch": batch, "pad": "x" * 4000}] * 10})
                if response.status_code == 201:
                    acknowledged.append((batch, response.json()["first_seq"]))
                else:
                    failures.append(response)
            assert len(failures) >= 50, f"the disk never filled: {len(acknowledged)} batches went in"
            for response in failures:
                assert response.status_code == 503, response.text[:300]
                error = response.json()["error"]
                assert error["code"] == "unavailable" and error["retryable"] is True
                assert "the disk holding the database is full" in error["message"], error
            # A memory on the full disk: committed to SQLite if there is room for it, never a crash of the
            # embedded index (it refuses writes instead of taking SIGBUS on a file it cannot extend).
            remembered = http.post(
                f"{server.base}/v1/memories", auth=auth, json={"content": "The spare keys are in the blue drawer."}
            )
            assert remembered.status_code in (201, 503), remembered.text[:300]
            assert server.proc is not None and server.proc.poll() is None, "the server died on the full disk"
            ready = http.get(f"{server.base}/readyz")
            assert ready.status_code == 503
            assert any("disk holding the database is full" in r for r in ready.json()["reasons"]), ready.text

            log = log_path.read_text(errors="replace")
            assert "Traceback" not in log
            # One access line per request, as always; beyond those, the disk is reported once (a minute).
            others = [line for line in log.splitlines() if "memory_server.access" not in line]
            assert sum("disk holding the database is full" in line for line in others) == 1, others
            assert len(others) <= 10, others

            filler.unlink()  # space again: the next write succeeds with no restart
            after = http.post(url, auth=auth, json={"items": [{"batch": "after"}]})
            assert after.status_code == 201, after.text[:300]
            assert http.get(f"{server.base}/readyz").status_code == 200
            again = http.post(
                f"{server.base}/v1/memories", auth=auth, json={"content": "The spare keys are in the blue drawer."}
            )
            assert again.status_code in (200, 201), again.text[:300]
            deadline = time.monotonic() + 60  # the maintenance thread indexes what the full disk held back
            while True:
                found = http.post(
                    f"{server.base}/v1/search", auth=auth, json={"query": "where are the spare keys", "min_score": 0.3}
                ).json()["results"]
                if found or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert [hit["content"] for hit in found] == ["The spare keys are in the blue drawer."]

        server.kill()  # and every acknowledged batch survived, whole
        server.start()
        with httpx2.Client(timeout=30) as http:
            items = []
            while True:
                page = http.get(url, auth=auth, params={"offset": len(items), "limit": 1000}).json()["items"]
                items += page
                if len(page) < 1000:
                    break
        assert [item["seq"] for item in items] == list(range(len(items)))
        by_seq = {item["seq"]: item["payload"] for item in items}
        for batch, first_seq in acknowledged:
            assert [by_seq[first_seq + i]["batch"] for i in range(10)] == [batch] * 10
        assert items[-1]["payload"] == {"batch": "after"}
    finally:
        server.kill()
