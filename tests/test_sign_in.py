"""Failed sign-ins against a real server process: after 10 failures a minute from one address the server
answers 429 with Retry-After without checking the credential (no scrypt), concurrent guessers cannot take
more than one core or pile up memory, and legitimate callers are unaffected."""

from __future__ import annotations

import base64
import concurrent.futures
import os
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from procs import ServerProcess, parse_fields, run_cli

LIMIT = 10  # the default MEMORY_SIGN_IN_FAILURES_PER_MINUTE


def basic(site: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{site}:{secret}".encode()).decode()


def client_from(address: str) -> httpx2.Client:
    """An HTTP client whose connections come from `address` (any 127.x address reaches the server)."""
    return httpx2.Client(transport=httpx2.HTTPTransport(local_address=address), timeout=60)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[ServerProcess, str]]:
    data = tmp_path / "data"
    secret = parse_fields(run_cli("site", "create", "acme", data_dir=data).stdout)["secret"]
    process = ServerProcess(data)
    # Ready: the model is loaded, so its ~130 MB do not land inside a memory measurement.
    process.start().wait_ready()
    try:
        yield process, secret
    finally:
        process.kill()


def test_guesses_from_one_address_get_429_without_their_secret_being_checked(server: tuple[ServerProcess, str]) -> None:
    process, secret = server
    url = f"{process.base}/v1/conversations"
    with client_from("127.0.0.1") as known:
        assert known.get(url, headers={"Authorization": basic("acme", secret)}).status_code == 200
    assert process.proc is not None
    before = cpu_seconds(process.proc.pid)
    statuses = []
    with client_from("127.0.0.1") as attacker:
        for n in range(300):
            site = "acme" if n % 2 else "no-such-site"  # an unknown name costs the same as a wrong secret
            response = attacker.get(url, headers={"Authorization": basic(site, f"guess-{n}")})
            statuses.append(response.status_code)
            if response.status_code == 429:
                assert int(response.headers["retry-after"]) >= 1
                assert response.json()["error"]["code"] == "rate_limited"
                assert response.json()["error"]["retryable"] is True
    assert statuses[:LIMIT] == [401] * LIMIT and set(statuses[LIMIT:]) == {429}
    # 300 scrypt checks would cost ~12 s of CPU; ten of them, and 290 refusals, well under one.
    assert cpu_seconds(process.proc.pid) - before < 3.0
    with client_from("127.0.0.1") as known:  # a credential this server verified before still works from there
        assert known.get(url, headers={"Authorization": basic("acme", secret)}).status_code == 200
    with client_from("127.0.0.2") as other:  # and a new caller from another address is unaffected
        assert other.get(url, headers={"Authorization": basic("acme", secret + "x")}).status_code == 401
        assert other.get(url, headers={"Authorization": basic("acme", secret)}).status_code == 200


def test_concurrent_guessers_cannot_pin_the_cpu_or_the_memory(server: tuple[ServerProcess, str]) -> None:
    """40 guessers, each from its own address (so each gets its 10 failures): 400 secret checks at once."""
    process, secret = server
    assert process.proc is not None
    url = f"{process.base}/v1/conversations"
    with client_from("127.0.0.2") as warm:
        assert warm.get(url, headers={"Authorization": basic("acme", secret)}).status_code == 200
    rss_before = rss_mb(process.proc.pid)
    peak = rss_before

    def guess(address: str) -> list[int]:
        with client_from(address) as http:
            return [
                http.get(url, headers={"Authorization": basic("acme", f"wrong-{n}")}).status_code
                for n in range(LIMIT + 5)
            ]

    addresses = [f"127.0.1.{n}" for n in range(1, 41)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=40) as pool:
        running = [pool.submit(guess, address) for address in addresses]
        # Meanwhile a legitimate caller signing in for the first time from its own address gets through.
        with client_from("127.0.2.1") as legit:
            assert legit.get(url, headers={"Authorization": basic("acme", secret)}).status_code == 200
        while not all(f.done() for f in running):
            peak = max(peak, rss_mb(process.proc.pid))
            concurrent.futures.wait(running, timeout=0.2)
        outcomes = [f.result() for f in running]
    for statuses in outcomes:
        assert statuses.count(401) == LIMIT and statuses.count(429) == 5
    # Secrets are checked on one thread: one scrypt buffer (16 MiB) at a time, not one per worker thread.
    assert peak - rss_before < 120, (rss_before, peak)
    assert rss_mb(process.proc.pid) - rss_before < 120
