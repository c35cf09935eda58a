"""A short soak (bench/soak.py): several clients mix appends, remembers, recalls, searches and tails against a
real `memory-server serve` process for SECONDS; then every acknowledged write is read back.

No answer is a 5xx, the server logs no traceback, every acknowledged batch is in its conversation at its seq
with its payloads (each conversation gapless), and every acknowledged memory is there with its content.
"""

from __future__ import annotations

from pathlib import Path

from bench import soak

SECONDS = 40
CLIENTS = 6


def test_a_short_soak_answers_no_5xx_logs_no_traceback_and_loses_no_acknowledged_write(tmp_path: Path) -> None:
    report = soak.run(tmp_path / "data", seconds=SECONDS, clients=CLIENTS, sample_s=2)
    summary = soak.table(report)
    for op, data in report["operations"].items():
        assert data["requests"] > 0, (op, summary)
    assert report["five_xx"] == 0, (report["five_xx_samples"], summary)
    assert report["tracebacks"] == 0, summary
    assert report["transport_errors"] == 0, summary
    assert report["remembers_not_created"] == 0, summary  # every memory is new: a retry never answered
    checked = report["verified"]
    assert checked["batches_checked"] > 0 and checked["memories_checked"] > 0, summary
    assert (checked["batches_lost"], checked["memories_lost"], checked["logs_not_gapless"]) == (0, 0, []), summary
    assert report["rss_samples"], summary
