"""The quality benchmarks' data is in the repository (bench/data/): every file the benchmarks read by default is
there, inside the clone, with the checksum bench/data/README.md gives, and every data file has its source and
licence written beside it."""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data"
CHECKSUM = re.compile(r"^([0-9a-f]{64})  (\S+)$", re.MULTILINE)


def listed() -> dict[str, str]:
    """The files bench/data/README.md gives a SHA-256 for, by their path under bench/data/."""
    return {name: digest for digest, name in CHECKSUM.findall((DATA / "README.md").read_text(encoding="utf-8"))}


def test_every_data_file_is_listed_with_its_checksum() -> None:
    files = sorted(str(path.relative_to(DATA)) for path in DATA.rglob("*") if path.is_file() and path.suffix != ".md")
    assert files and sorted(listed()) == files
    for name, digest in listed().items():
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == digest, name


def test_each_data_set_names_its_source_and_licence() -> None:
    for folder in {Path(name).parts[0] for name in listed()}:
        notes = (DATA / folder / "README.md").read_text(encoding="utf-8")
        assert re.search(r"CC BY(-[A-Z]+)* 4\.0", notes), f"{folder}: no licence"
        assert "et al." in notes or "github.com/" in notes, f"{folder}: no source"


def test_the_benchmarks_read_the_data_in_the_repository() -> None:
    sys.path.insert(0, str(ROOT))
    from bench import locomo, multilingual

    for default in (locomo.DEFAULT_DATA, multilingual.DEFAULT_DATA):
        assert default.resolve().is_relative_to(DATA) and default.exists(), default
    assert sorted(path.name for path in multilingual.DEFAULT_DATA.glob("*.json")) == sorted(
        Path(name).name for name in listed() if name.startswith("multilingual/")
    )
