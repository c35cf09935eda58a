"""`import --from FORMAT` against hostile files, through real CLI processes: a note that links out of its
folder is skipped unread, and whatever the input (a YAML alias bomb, a 200 MB one-line note or JSON line) the
import's peak memory stays bounded, the bad record is reported and skipped and the rest is imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from procs import REPO_ROOT, parse_fields, server_env
from tests import backends

BIG = 200 * 1024 * 1024  # the one-line file: far past every bound, small enough for a test's disk
# The import's whole process, model included (~315 MB measured), plus the most one bounded record may take.
PEAK_LIMIT_MB = 450


# Runs `memory-server ARGS` and, as it exits, writes its own peak RSS (VmHWM, kB). Read inside the process: the
# rusage a parent gets also counts the parent's own pages, which the child held between fork and exec.
PEAK_REPORTER = """
import atexit, runpy, sys
def report(path):
    peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    open(path, "w").write(peak.split()[1])
atexit.register(report, sys.argv[1])
sys.argv = ["memory-server", *sys.argv[2:]]
runpy.run_module("memory_server", run_name="__main__")
"""


def measured_import(fmt: str, source: Path, data_dir: Path, tmp_path: Path) -> tuple[dict[str, str], str, int, float]:
    """`memory-server import --from FMT SOURCE` in a child process: its report, stderr, exit code and peak RSS
    in MB, as the process itself saw it."""
    out, err, peak = tmp_path / "out.txt", tmp_path / "err.txt", tmp_path / "peak.txt"
    arguments = ["import", "--from", fmt, str(source), "--data-dir", str(data_dir)]
    command = [sys.executable, "-c", PEAK_REPORTER, str(peak), *arguments]
    with open(out, "w") as stdout, open(err, "w") as stderr:
        code = subprocess.run(
            command, cwd=REPO_ROOT, env={**backends.current.env(data_dir), **server_env()}, stdout=stdout, stderr=stderr
        ).returncode
    return parse_fields(out.read_text()), err.read_text(), code, int(peak.read_text()) / 1024


def alias_bomb() -> str:
    """A 328-byte note whose front matter's aliases expand to 9^8 items (gigabytes once copied)."""
    lines = ["a: &a [lo,lo,lo,lo,lo,lo,lo,lo,lo]"]
    for previous, name in zip("abcdefg", "bcdefgh", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    lines.append("i: [" + ",".join(["*h"] * 9) + "]")
    note = "---\n" + "\n".join(lines) + "\n---\n"
    return note + "\n" + "x" * (328 - len(note.encode()) - 2) + "\n"


def one_line(path: Path, *, before: str = "", after: str = "") -> Path:
    """A file of a 200 MB line (a JSON object whose one string ends only in its last bytes), between lines."""
    with open(path, "wb") as out:
        out.write(before.encode())
        out.write(b'{"type": "entity", "name": "x", "entityType": "y", "observations": ["')
        chunk = b"a" * (1 << 20)
        for _ in range(BIG // len(chunk)):
            out.write(chunk)
        out.write(b'"]}\n')
        out.write(after.encode())
    return path


def test_a_note_linking_out_of_its_folder_is_skipped_unread(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (tmp_path / "secret.md").write_text("The vault password is hunter2.\n")
    (notes / "passwd.md").symlink_to("/etc/passwd")
    (notes / "beside.md").symlink_to(tmp_path / "secret.md")
    (notes / "kept.md").write_text("# Kettle\n\nThe kettle is in the left cupboard.\n")
    (notes / "again.md").symlink_to(notes / "kept.md")  # a link inside the folder is a note of it
    report, errors, code, _ = measured_import("markdown", notes, tmp_path / "data", tmp_path)
    assert code == 1, errors
    assert (report["memories created"], report["rejected records"]) == ("2", "2"), errors
    assert "passwd.md: a link to a file outside the folder imported; skipped unread" in errors
    assert "beside.md: a link to a file outside the folder imported; skipped unread" in errors
    assert "Traceback" not in errors
    export = subprocess.run(
        [sys.executable, "-m", "memory_server", "export", "-", "--data-dir", str(tmp_path / "data")],
        cwd=REPO_ROOT,
        env={**backends.current.env(tmp_path / "data"), **server_env()},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "kettle" in export.stdout and "hunter2" not in export.stdout and "root:" not in export.stdout


def test_hostile_notes_and_lines_are_skipped_within_a_bounded_peak(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    bomb = alias_bomb()
    assert len(bomb.encode()) == 328
    (notes / "bomb.md").write_text(bomb)
    big = one_line(notes / "huge.md")  # a note of one 200 MB line
    (notes / "kept.md").write_text("---\ntitle: Kettle\n---\n\nThe kettle is in the left cupboard.\n")
    report, errors, code, peak = measured_import("markdown", notes, tmp_path / "data", tmp_path)
    assert code == 1 and "Traceback" not in errors, errors
    assert (report["memories created"], report["rejected records"]) == ("1", "2"), errors
    assert "bomb.md:1: the front matter expands to more than" in errors
    assert f"huge.md: the note is {big.stat().st_size:,} bytes, more than the 4 MiB it may be" in errors
    assert peak < PEAK_LIMIT_MB, peak

    big.unlink()
    graph = one_line(  # a good line, the 200 MB line, a good line
        tmp_path / "memory.jsonl",
        before='{"type": "entity", "name": "Ada", "entityType": "person", "observations": ["Wrote a program"]}\n',
        after='{"type": "relation", "from": "Ada", "to": "Charles", "relationType": "worked_with"}\n',
    )
    report, errors, code, peak = measured_import("mcp-memory", graph, tmp_path / "data", tmp_path)
    assert code == 1 and "Traceback" not in errors, errors
    assert (report["memories created"], report["rejected records"]) == ("2", "1"), errors
    assert "memory.jsonl:2: the line is" in errors and "more than the 4 MiB it may be" in errors
    assert peak < PEAK_LIMIT_MB, peak
