"""`memory-server import --from FORMAT` against `import` of our own export holding the same memories.

`--records` facts (default 5,000) are written in each foreign format: the MCP memory server's knowledge graph
(one entity per five facts, five observations each), a mem0 export (`{"results": [...]}`, one item each) and
a folder of Markdown notes (one note per five facts, five observations each). Each format turns the facts into
memories of its own wording ("Topic_3 (topic): …", "Note 3: …"), and the embedding's cost follows the words,
so each format is compared with our own export (JSON Lines) of exactly the memories it makes: same contents,
types, tags, metadata and provenance, made by reading the format in this process.

Each run is `python -m memory_server import ...` on a new data directory (the model's load included, as a user sees
it): its wall time and the CPU time it used (steadier than wall time on a shared machine). A format and its
export take turns, `--runs` times (default 3); medians are reported. Beside them, the time to read and
validate each input into the records the write path takes (in this process, nothing written): the only work
that differs between a format and its export. Prints JSON and a table; `--json PATH` also writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memory_server.admin.export_lines import MemoryRecord, numbered_lines, parse_line  # noqa: E402
from memory_server.admin.foreign import FORMATS  # noqa: E402
from memory_server.admin.foreign.records import Candidate  # noqa: E402
from memory_server.logs.validation import LogLimits  # noqa: E402
from memory_server.memories.validation import validate_new  # noqa: E402

PEOPLE = ["Maria", "Ivo", "Nate", "Joanna", "Priya", "Tomas", "Aiko", "Lena", "Omar", "Grace"]
TOPICS = [
    "the billing service",
    "the data pipeline",
    "the mobile app",
    "the search index",
    "the on-call rota",
    "the design system",
    "the release train",
    "the support queue",
    "the Lisbon office",
    "the staging cluster",
]
VERBS = ["moved", "reviewed", "postponed", "rewrote", "documented", "benchmarked", "migrated", "cleaned up"]
WHEN = ["on Monday", "last week", "in March", "before the offsite", "after the incident", "during the sprint"]
LIMITS = LogLimits(256 * 1024, 4 * 1024 * 1024)
MAX_CONTENT = 32 * 1024


def facts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [
        f"{rng.choice(PEOPLE)} {rng.choice(VERBS)} {rng.choice(TOPICS)} {rng.choice(WHEN)} (note {n})."
        for n in range(count)
    ]


def write_formats(texts: list[str], folder: Path) -> dict[str, Path]:
    groups = [texts[i : i + 5] for i in range(0, len(texts), 5)]
    graph = folder / "memory.jsonl"
    graph.write_text(
        "\n".join(
            json.dumps({"type": "entity", "name": f"Topic_{n}", "entityType": "topic", "observations": group})
            for n, group in enumerate(groups)
        )
    )
    mem0 = folder / "mem0.json"
    mem0.write_text(
        json.dumps(
            {
                "results": [
                    {
                        "id": f"00000000-0000-4000-8000-{n:012d}",
                        "memory": text,
                        "hash": "",
                        "metadata": None,
                        "created_at": "2025-01-01T00:00:00Z",
                        "updated_at": None,
                        "user_id": "bench",
                    }
                    for n, text in enumerate(texts)
                ]
            },
            indent=2,
        )
    )
    notes = folder / "notes"
    notes.mkdir()
    for n, group in enumerate(groups):
        body = "\n".join(f"- [fact] {text}" for text in group)
        (notes / f"note-{n:05d}.md").write_text(
            f"---\ntitle: Note {n}\ntags: [bench]\ncreated: 2025-01-01\n---\n\n{body}\n"
        )
    return {"mcp-memory": graph, "mem0": mem0, "markdown": notes}


def write_export(fmt: str, source: Path, target: Path) -> int:
    """Our export of the memories `fmt` makes of `source`; how many."""
    read, _ = FORMATS[fmt]
    count = 0
    with open(target, "w", encoding="utf-8") as out:
        out.write(json.dumps({"kind": "header", "version": 1}) + "\n")
        for item in read(source, max_content_bytes=MAX_CONTENT, progress=lambda n: None):
            assert isinstance(item, Candidate), item
            memory = validate_new(**item.fields, max_content_bytes=MAX_CONTENT)
            record = {
                "kind": "memory",
                "site": "default",
                "reference": item.reference,
                "content": memory.content,
                "type": memory.type,
                "location": memory.location,
                "bucket": memory.bucket,
                "tags": list(memory.tags),
                "metadata": memory.metadata,
                "provenance": memory.provenance,
                "occurred_at": memory.occurred_at,
                "expires_at": memory.expires_at,
            }
            out.write(json.dumps({k: v for k, v in record.items() if v is not None}, ensure_ascii=False) + "\n")
            count += 1
    return count


def read_and_validate(fmt: str | None, path: Path) -> tuple[float, int]:
    """Seconds to read and validate every record, as `import` does before writing (fmt None: our export)."""
    started, count = time.perf_counter(), 0
    if fmt is None:
        with open(path, "rb") as stream:
            for number, raw, _ in numbered_lines(stream):
                record = parse_line(raw, number, limits=LIMITS, max_content_bytes=MAX_CONTENT, mapped=False)
                count += isinstance(record, MemoryRecord)
    else:
        read, _ = FORMATS[fmt]
        for item in read(path, max_content_bytes=MAX_CONTENT, progress=lambda n: None):
            if isinstance(item, Candidate):
                validate_new(**item.fields, max_content_bytes=MAX_CONTENT)
                count += 1
    return time.perf_counter() - started, count


def run_import(args: list[str], data_dir: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the import process, memories created)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "memory_server", "import", *args, "--data-dir", str(data_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    created = re.search(r"^memories created: (\d+)$", done.stdout, re.M)
    if done.returncode != 0 or created is None:
        raise RuntimeError(f"import {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return seconds, cpu, int(created.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    texts = facts(options.records, options.seed)
    names = options.formats.split(",")
    runs: dict[str, dict[str, list[tuple[float, float]]]] = {name: {"format": [], "export": []} for name in names}
    reading: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="import-formats-") as tmp:
        folder = Path(tmp)
        sources = write_formats(texts, folder)
        exports = {name: folder / f"export-{name}.jsonl" for name in names}
        for name in names:
            if write_export(name, sources[name], exports[name]) != options.records:
                raise RuntimeError(f"{name} does not make {options.records} memories")
            reading[name] = {
                "format": min(read_and_validate(name, sources[name])[0] for _ in range(3)),
                "export": min(read_and_validate(None, exports[name])[0] for _ in range(3)),
            }
        for run in range(options.runs):
            for name in names:
                order = [("format", ["--from", name, str(sources[name])]), ("export", [str(exports[name])])]
                for kind, args in order if run % 2 == 0 else order[::-1]:
                    seconds, cpu, created = run_import(args, folder / f"data-{name}-{kind}-{run}")
                    if created != options.records:
                        raise RuntimeError(f"{name} {kind}: {created} memories created, expected {options.records}")
                    runs[name][kind].append((seconds, cpu))
                    print(f"run {run + 1} {name} {kind}: {seconds:.1f} s, CPU {cpu:.1f} s", file=sys.stderr)

    def median(values: list[tuple[float, float]], at: int) -> float:
        return statistics.median(v[at] for v in values)

    report: dict[str, Any] = {"records": options.records, "runs": options.runs, "formats": {}}
    for name in names:
        row: dict[str, Any] = {}
        for kind in ("format", "export"):
            timed = runs[name][kind]
            row[kind] = {
                "seconds": round(median(timed, 0), 2),
                "cpu_s": round(median(timed, 1), 2),
                "memories_per_s": round(options.records / median(timed, 0), 1),
                "all": [[round(s, 2), round(c, 2)] for s, c in timed],
                "read_and_validate_s": round(reading[name][kind], 3),
            }
        row["time_vs_export"] = round(row["format"]["seconds"] / row["export"]["seconds"], 2)
        row["cpu_vs_export"] = round(row["format"]["cpu_s"] / row["export"]["cpu_s"], 2)
        report["formats"][name] = row
    print(json.dumps(report, indent=2))
    print(
        f"\n{options.records} memories, medians of {options.runs} runs (the format | our export of the same memories)\n"
    )
    print("| format | import, s | memories/s | CPU, s | CPU vs export | read and validate, s |")
    print("|---|---|---|---|---|---|")
    for name, row in report["formats"].items():
        f, e = row["format"], row["export"]
        print(
            f"| {name} | {f['seconds']} \\| {e['seconds']} | {f['memories_per_s']} \\| {e['memories_per_s']} | "
            f"{f['cpu_s']} \\| {e['cpu_s']} | {row['cpu_vs_export']}× | {f['read_and_validate_s']} \\| "
            f"{e['read_and_validate_s']} |"
        )
    if options.json:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
