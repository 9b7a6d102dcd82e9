"""A daemon that sees many scenarios holds a bounded number of them open.

One scenario per project is how people use reef; each open scenario holds threads and open
files, so without a bound 300 scenarios exhausted ``ulimit -n 1024``.  Here a real
``reef serve`` runs under ``ulimit -n 256`` (macOS's default) and gets one request for each
of 1,000 scenarios from eight clients at once.
"""

from __future__ import annotations

import os
import resource
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.conftest import git, wait_for
from tests.daemon.test_process import start

SCENARIOS = 1000
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def held(pid: int) -> tuple[int, int]:
    """(open files, threads) of process ``pid``."""
    files = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    status = Path(f"/proc/{pid}/status").read_text()
    threads = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))
    return files, threads


def low_file_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


@pytest.mark.slow
def test_a_thousand_scenarios_under_ulimit_256_hold_a_bounded_number_open(tmp_path, upstream):
    log = (tmp_path / "reef.log").open("w")
    proc, url = start(
        tmp_path, upstream.url, "--storage.idle-close-s", "3", log=log, preexec_fn=low_file_limit
    )
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            client.post("/v1/chat/completions", json=CHAT, headers={"x-reef-scenario": "warm"})
        before = held(proc.pid)
        # as many as the file budget fits under 256 beside what the process holds (17 or so)
        budget = httpx.get(f"{url}/reef/status", timeout=60).json()["open_scenarios"]
        limit, packs = budget["limit"], budget["files"]["packs"]
        assert 8 <= limit <= 20
        names = [f"project-{n:04d}" for n in range(SCENARIOS)]

        def one(name: str) -> tuple[int, str]:
            with httpx.Client(base_url=url, timeout=60) as client:
                r = client.post("/v1/chat/completions", json=CHAT, headers={"x-reef-scenario": name})
                return r.status_code, r.headers.get("x-reef-agent-record-id", r.text)

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(one, names))
        assert [status for status, _ in answers] == [200] * SCENARIOS, [a for a in answers if a[0] != 200][:3]
        # the scenarios still in use when others opened are closed beside the requests
        assert wait_for(lambda: _open_count(url) <= limit, timeout=30)
        files, threads = held(proc.pid)
        # at most ``limit`` scenarios open, each 9 files and 2 threads, the packs libgit2 may
        # keep open; and the threads of asyncio's default executor, which grows under load
        executor = min(32, (os.cpu_count() or 1) + 4)
        assert files - before[0] <= limit * 9 + packs + 8, (before, files)
        assert threads - before[1] <= limit * 2 + executor, (before, threads)
        reply = httpx.get(f"{url}/reef/status", timeout=60)
        assert reply.status_code == 200, reply.text
        status = reply.json()["open_scenarios"]
        assert status["limit"] == limit and status["open"] <= limit
        # quiet for the idle time, every scenario is closed: back where it started (less the
        # warm scenario, plus the upstream connections eight clients at once left in the pool)
        assert wait_for(lambda: _open_count(url) == 0, timeout=30)
        files, threads = held(proc.pid)
        assert files <= before[0] - 9 + 8 and threads <= before[1] - 2 + executor, (before, files, threads)

        # every record reads back, through the daemon and with git; then each scenario opens again
        with httpx.Client(base_url=url, timeout=60) as client:
            for name, (_, receipt) in zip(names, answers, strict=True):
                listing = client.get(f"/reef/scenarios/{name}/records").json()
                assert [r["id"] for r in listing["records"]] == [receipt]
        with ThreadPoolExecutor(8) as pool:
            again = list(pool.map(one, names[::10]))
        assert [status for status, _ in again] == [200] * len(again)
        assert "Too many open files" not in (tmp_path / "reef.log").read_text()
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
    for name, (_, receipt) in list(zip(names, answers, strict=True))[::100]:
        repo = str(tmp_path / "state" / "scenarios" / f"{name}.git")
        git("--git-dir", repo, "fsck", "--no-progress")
        assert receipt in git("--git-dir", repo, "log", "--format=%s", "data").stdout


def _open_count(url: str) -> int:
    return httpx.get(f"{url}/reef/status", timeout=60).json()["open_scenarios"]["open"]


def test_scenarios_closed_and_reopened_under_load_lose_nothing(make_reef, upstream):
    """One scenario open at a time, three written at once: each request closes another
    scenario or waits for its close, and every acknowledged record is there."""
    reef = make_reef("--storage.max-open-scenarios", "1")
    names = ["a", "b", "c"]

    def one(n: int) -> tuple[str, int, str]:
        name = names[n % 3]
        r = httpx.post(
            f"{reef.url}/v1/chat/completions", json=CHAT, headers={"x-reef-scenario": name}, timeout=60
        )
        return name, r.status_code, r.headers.get("x-reef-agent-record-id", r.text)

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(one, range(120)))
    assert {status for _, status, _ in answers} == {200}
    # the closes run beside the requests, so the last may still be under way
    assert wait_for(lambda: _open_count(reef.url) == 1), _open_count(reef.url)
    for name in names:
        stored = {item.id for item in reef.reader(name).data.iter_items()}
        assert stored == {receipt for n, _, receipt in answers if n == name}
        git("--git-dir", reef.repo(name), "fsck", "--no-progress")
