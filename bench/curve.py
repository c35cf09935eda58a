"""Draw recall's latency against corpus size from a `bench/perf.py --json` report, as a small SVG.

    python bench/curve.py REPORT.json docs/recall-at-scale.svg

Written by hand (no plotting library in the environment): x is the number of memories on a log scale,
y is milliseconds on a log scale; one line per series, labelled at its right end.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

LABEL_GAP = 13  # px between the labels at the lines' right ends, so close ones do not overlap
SERIES = (  # (label, phase, percentile, colour, dashed)
    ("recall p50", "recall", "p50_ms", "#1f77b4", False),
    ("recall p99", "recall", "p99_ms", "#1f77b4", True),
    ("recall, one bucket p50", "recall_bucket", "p50_ms", "#2ca02c", False),
    ("recall cold p99", "recall_cold", "p99_ms", "#d62728", True),
    ("search_memory p50", "search_memory", "p50_ms", "#7f7f7f", False),
)
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 640, 360, 56, 170, 28, 44


def draw(report: dict[str, Any]) -> str:
    sizes = sorted(int(s) for s in report["search"])
    values = [
        report["search"][str(n)][phase][key]
        for n in sizes
        for _, phase, key, _, _ in SERIES
        if phase in report["search"][str(n)]
    ]
    low, high = math.log10(max(1.0, min(values) * 0.8)), math.log10(max(values) * 1.25)
    x0, x1 = math.log10(sizes[0]), math.log10(sizes[-1])

    def x(n: float) -> float:
        return LEFT + (math.log10(n) - x0) / max(x1 - x0, 1e-9) * (WIDTH - LEFT - RIGHT)

    def y(ms: float) -> float:
        return TOP + (high - math.log10(ms)) / (high - low) * (HEIGHT - TOP - BOTTOM)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="16" font-size="13">recall latency by corpus size (bench/perf.py, MCP over HTTP, '
        "2 cores)</text>",
    ]
    for ms in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000):
        if low <= math.log10(ms) <= high:
            out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(ms):.1f}" y2="{y(ms):.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{LEFT - 6}" y="{y(ms) + 4:.1f}" text-anchor="end">{ms} ms</text>')
    for n in sizes:
        out.append(f'<line x1="{x(n):.1f}" x2="{x(n):.1f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}" stroke="#eee"/>')
        label = f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k"
        out.append(f'<text x="{x(n):.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">{label}</text>')
    out.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{HEIGHT - 8}" text-anchor="middle">memories</text>')
    ends: list[tuple[float, float, str, str]] = []  # where each series' label goes: x, y, text, colour
    for label, phase, key, colour, dashed in SERIES:
        points = [(x(n), y(report["search"][str(n)][phase][key])) for n in sizes if phase in report["search"][str(n)]]
        if not points:
            continue
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
        dash = ' stroke-dasharray="5,4"' if dashed else ""
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        out += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}"/>' for px, py in points]
        ends.append((points[-1][0] + 8, points[-1][1] + 4, label, colour))
    placed: list[float] = []
    for lx, ly, label, colour in sorted(ends, key=lambda end: end[1]):  # top to bottom, each below the last
        ly = max(ly, placed[-1] + LABEL_GAP) if placed else ly
        placed.append(ly)
        out.append(f'<text x="{lx:.1f}" y="{ly:.1f}" fill="{colour}">{label}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> None:
    report = json.loads(Path(sys.argv[1]).read_text())
    Path(sys.argv[2]).parent.mkdir(parents=True, exist_ok=True)
    Path(sys.argv[2]).write_text(draw(report))


if __name__ == "__main__":
    main()
