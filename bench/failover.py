"""Losing the PostgreSQL primary under load: how long until writes are acknowledged again, and what is lost.

Each round starts a private PostgreSQL primary and a streaming standby on this machine (tests/postgres.py:
`pg_basebackup -R -X stream`, production durability settings), two `memory-server serve` replicas on one
multi-host URL (`host=PRIMARY,STANDBY&port=P,Q&target_session_attrs=read-write`, each with its own embedded
index), and clients appending and remembering through both over REST (tests/failover_load.py). Mid-load the
primary is crashed (`pg_ctl stop -m immediate`) and the standby promoted (`pg_ctl promote`) `--promote-after`
seconds later, as a failover manager would once it has decided. With `--standby-away S` the standby is first
stopped for S seconds under load (a disconnected or slow standby) and started again after the crash.

Reported per round: when the standby accepted writes, each replica's first acknowledged write after that
(seconds from the crash), the writes acknowledged, and those not on the new primary afterwards: none may be
lost with a synchronous standby (`synchronous_standby_names`), some can be with an asynchronous one.

Prints JSON and a table; `--json PATH` also writes the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402

from bench.serverproc import child_env, free_port, parse_fields  # noqa: E402
from tests.failover_load import Replica, run_failover, verify  # noqa: E402
from tests.postgres import ReplicatedPostgres, _server_user, find_bindir  # noqa: E402

SITE = "bench"
READY_TIMEOUT_S = 120.0


class Replicas:
    """`memory-server serve` processes on one database, each on a data directory of its own."""

    def __init__(self, root: Path, url: str) -> None:
        self.root, self.env = root, child_env(MEMORY_DATABASE_URL=url)
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, names: list[str]) -> list[Replica]:
        created = subprocess.run(
            [sys.executable, "-m", "memory_server", "site", "create", SITE, "--data-dir", str(self.root / "admin")],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if created.returncode != 0:
            raise RuntimeError(f"site create failed:\n{created.stdout}{created.stderr}")
        auth = (SITE, parse_fields(created.stdout)["secret"])
        replicas = []
        for name in names:
            port = free_port()
            with open(self.root / f"{name}.log", "ab") as log:
                self.procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "memory_server",
                            "serve",
                            "--host",
                            "127.0.0.1",
                            "--port",
                            str(port),
                            "--data-dir",
                            str(self.root / name),
                        ],
                        cwd=ROOT,
                        env=self.env,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=log,
                    )
                )
            replicas.append(Replica(name, f"http://127.0.0.1:{port}", auth))
        for replica, proc in zip(replicas, self.procs, strict=True):
            self._wait_ready(replica, proc)
        return replicas

    def _wait_ready(self, replica: Replica, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"replica {replica.name} exited:\n{(self.root / f'{replica.name}.log').read_text()}")
            try:
                if httpx2.get(f"{replica.base}/readyz", timeout=2).status_code == 200:
                    return
            except httpx2.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"replica {replica.name} not ready in {READY_TIMEOUT_S:.0f} s")
            time.sleep(0.1)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=20)


def one_round(tmp: Path, *, synchronous: bool, args: argparse.Namespace) -> dict[str, Any]:
    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("PostgreSQL server binaries not found: install Debian's postgresql package")
    pair = ReplicatedPostgres(bindir, _server_user(), synchronous=synchronous)
    replicas: Replicas | None = None
    try:
        pair.start()
        replicas = Replicas(tmp, pair.create_database())
        started = replicas.start(["a", "b"])
        ledger, failover = asyncio.run(
            run_failover(
                started,
                pair,
                appenders=args.appenders,
                rememberers=args.rememberers,
                warm_up=args.warm_up,
                standby_away_s=args.standby_away,
                promote_after_s=args.promote_after,
                after_promotion=args.after_promotion,
            )
        )
        if ledger.faults:
            raise RuntimeError(f"answers that were neither a success nor `unavailable`: {ledger.faults[:5]}")
        survival = asyncio.run(verify(started[0], ledger))
    finally:
        if replicas is not None:
            replicas.stop()
        pair.destroy()
    acks = ledger.acks()
    lost_before = sorted(failover.crashed_at - acks[name].at for name in survival.lost)
    return {
        "promoted_s": round(failover.promoted_s, 3),
        "first_ack_s": {name: round(s, 3) for name, s in sorted(failover.first_ack_s.items())},
        "acknowledged": {
            "appends": len(ledger.appends),
            "memories": len(ledger.memories),
            "before_crash": failover.acknowledged_before_crash,
        },
        "lost": {
            "appends": len(survival.lost) - len(survival.lost_memories),
            "memories": len(survival.lost_memories),
            "acknowledged_ms_before_crash": [round(s * 1000, 1) for s in lost_before],
        },
        "unavailable_answers": dict(sorted(ledger.unavailable.items())),
    }


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    first = [s for r in rounds for s in r["first_ack_s"].values()]
    after = [s - r["promoted_s"] for r in rounds for s in r["first_ack_s"].values()]
    return {
        "rounds": len(rounds),
        "first_ack_after_crash_s": {"median": round(statistics.median(first), 3), "max": round(max(first), 3)},
        "first_ack_after_promotion_s": {"median": round(statistics.median(after), 3), "max": round(max(after), 3)},
        "acknowledged_before_crash": sum(r["acknowledged"]["before_crash"] for r in rounds),
        "acknowledged": sum(r["acknowledged"]["appends"] + r["acknowledged"]["memories"] for r in rounds),
        "lost": sum(r["lost"]["appends"] + r["lost"]["memories"] for r in rounds),
    }


def table(report: dict[str, Any]) -> str:
    lines = [
        "| standby | round | promoted s | first ack a s | first ack b s | acknowledged (before crash) | lost | 503s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode, result in report["modes"].items():
        for n, r in enumerate(result["rounds"], 1):
            acked = r["acknowledged"]["appends"] + r["acknowledged"]["memories"]
            lost = r["lost"]["appends"] + r["lost"]["memories"]
            lines.append(
                f"| {mode} | {n} | {r['promoted_s']} | {r['first_ack_s'].get('a', '')} |"
                f" {r['first_ack_s'].get('b', '')} | {acked} ({r['acknowledged']['before_crash']}) | {lost} |"
                f" {sum(r['unavailable_answers'].values())} |"
            )
        s = result["summary"]
        lines.append(
            f"| {mode} | median | | {s['first_ack_after_crash_s']['median']} (after promotion"
            f" {s['first_ack_after_promotion_s']['median']}) | | {s['acknowledged']}"
            f" ({s['acknowledged_before_crash']}) | {s['lost']} | |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--standby", choices=["synchronous", "asynchronous", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=3, help="failovers per kind of standby")
    parser.add_argument(
        "--standby-away",
        type=float,
        default=0.0,
        help="seconds the standby is stopped (falls behind) under load before the crash",
    )
    parser.add_argument(
        "--promote-after",
        type=float,
        default=0.0,
        help="seconds from the crash to the promotion (a failover manager's decision)",
    )
    parser.add_argument("--appenders", type=int, default=3, help="appending clients per replica")
    parser.add_argument("--rememberers", type=int, default=1, help="remembering clients per replica")
    parser.add_argument("--warm-up", type=int, default=20, help="writes each replica acknowledges before the crash")
    parser.add_argument(
        "--after-promotion",
        type=int,
        default=20,
        help="writes each replica acknowledges after the promotion before the round ends",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    modes = ["synchronous", "asynchronous"] if args.standby == "both" else [args.standby]
    report: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores",
        "standby_away_s": args.standby_away,
        "promote_after_s": args.promote_after,
        "clients_per_replica": {"appenders": args.appenders, "rememberers": args.rememberers},
        "modes": {},
    }
    for mode in modes:
        rounds = []
        for n in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix=f"failover-{mode}-{n}-") as tmp:
                rounds.append(one_round(Path(tmp), synchronous=mode == "synchronous", args=args))
        report["modes"][mode] = {"rounds": rounds, "summary": summarise(rounds)}
    print(json.dumps(report, indent=2))
    print(table(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
