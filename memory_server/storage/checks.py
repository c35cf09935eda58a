"""A check's result, as `memory-server doctor` prints it: ok, WARN, FAIL or skip, a detail, and the fix."""

from __future__ import annotations

from dataclasses import dataclass

OK, WARN, FAIL, SKIP = "ok", "WARN", "FAIL", "skip"


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: str  # OK, FAIL or SKIP
    detail: str
    fix: str | None = None

    def render(self) -> str:
        line = f"{self.status:<4}  {self.name}: {self.detail}"
        if self.status in (FAIL, WARN) and self.fix:
            line += f" -- fix: {self.fix}"
        return line
