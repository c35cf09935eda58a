"""Local stdio clients sharing one store: how fast a client is answered, and what N clients cost in memory.

Each client is a real `python -m memory_server serve --transport stdio` process spoken to with MCP's JSON-RPC
lines on its stdin and stdout, as every MCP client does (no SDK in between, so only the server is timed):

- the first client on a store with no owner: seconds from its start to the `initialize` answer, whether the
  model was still loading then (`memory-server owner status`), and seconds to its first `recall` answer;
- `--starts` later clients joining the warm owner one after another: seconds from start to `initialize`
  (median), and their first `recall` (median ms) (the baseline's clients each start a server of their own);
- `--clients` clients connected at once: each bridge's RSS, the owner's RSS, and their sum.

`--baseline TREE` measures the same on another checkout (e.g. `git worktree add ../base <commit>`), whose
stdio server loads the model before it answers and takes its store for itself: its concurrent clients get a data
directory each.

    python bench/local_clients.py [--starts 20] [--clients 4] [--baseline ../base] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.serverproc import ROOT, child_env  # noqa: E402

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench-local-clients", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def recall_request(query: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "recall", "arguments": {"query": query, "limit": 3}},
    }


class StdioClient:
    """One client process, timed from its start."""

    def __init__(self, tree: Path, data_dir: Path) -> None:
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "memory_server", "serve", "--data-dir", str(data_dir)],
            cwd=tree,
            env=child_env(MEMORY_TRANSPORT="stdio", MEMORY_OWNER_IDLE_S="30"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"the server closed its output (exit code {self.process.poll()})")
            answer: dict[str, Any] = json.loads(line)
            if answer.get("id") == message["id"]:
                return answer

    def initialize(self) -> float:
        self.ask(INITIALIZE)
        elapsed = time.monotonic() - self.started
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(INITIALIZED).encode() + b"\n")
        self.process.stdin.flush()
        return elapsed

    def recall_ms(self, query: str) -> float:
        began = time.monotonic()
        answer = self.ask(recall_request(query))
        assert "result" in answer and not answer["result"].get("isError"), answer
        return (time.monotonic() - began) * 1000

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def owner(tree: Path, data_dir: Path) -> dict[str, Any] | None:
    done = subprocess.run(
        [sys.executable, "-m", "memory_server", "owner", "status", "--data-dir", str(data_dir)],
        cwd=tree,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return json.loads(done.stdout) if done.returncode == 0 and done.stdout.lstrip().startswith("{") else None


def measure(tree: Path, starts: int, clients: int, shared: bool) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-local-"))
    data = work / "data"
    first = StdioClient(tree, data)
    first_init = first.initialize()
    status = owner(tree, data) if shared else None
    loading = status is not None and status.get("model") == "loading"
    first.recall_ms("warm up")
    first_recall = time.monotonic() - first.started
    joins, recalls = [], []
    for number in range(starts):  # each start while the first client keeps the owner warm
        # A server of its own (the baseline) cannot open a store another one holds: a data directory each.
        client = StdioClient(tree, data if shared else work / f"solo-{number}")
        joins.append(client.initialize())
        recalls.append(client.recall_ms("what do we ship?"))
        client.close()
    together = [StdioClient(tree, data if shared else work / f"data-{n}") for n in range(clients)]
    for client in together:
        client.initialize()
        client.recall_ms("what do we ship?")
    bridges = [rss_mb(client.process.pid) for client in together]
    status = owner(tree, data) if shared else None
    owner_mb = rss_mb(int(status["pid"])) if status else 0.0
    for client in [first, *together]:
        client.close()
    if shared:
        subprocess.run(
            [sys.executable, "-m", "memory_server", "owner", "stop", "--data-dir", str(data)],
            cwd=tree,
            env=child_env(),
            capture_output=True,
            timeout=60,
        )
    return {
        "first_initialize_s": round(first_init, 2),
        "model_loading_at_first_initialize": loading,
        "first_recall_answered_s": round(first_recall, 2),
        "join_initialize_s_median": round(statistics.median(joins), 3) if joins else None,
        "join_initialize_s_max": round(max(joins), 3) if joins else None,
        "join_first_recall_ms_median": round(statistics.median(recalls), 1) if recalls else None,
        "client_process_rss_mb": round(max(bridges), 1),
        "owner_rss_mb": round(owner_mb, 1),
        f"{clients}_clients_total_rss_mb": round(sum(bridges) + owner_mb, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--baseline-starts", type=int, default=5, help="each loads the model: fewer")
    parser.add_argument("--baseline", type=Path, help="another checkout to measure the same way")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report: dict[str, Any] = {"this": measure(ROOT, args.starts, args.clients, shared=True)}
    if args.baseline is not None:
        report["baseline"] = measure(args.baseline, args.baseline_starts, args.clients, shared=False)
    print(json.dumps(report, indent=2))
    for name, figures in report.items():
        print(f"\n{name}:")
        for key, value in figures.items():
            print(f"  {key:40} {value}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
