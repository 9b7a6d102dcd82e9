"""Files never run out: near the process's open-file limit a request waits, then gets a 503
with ``Retry-After``; an ``EMFILE`` met on the way is never a 500.

Before, under ``ulimit -n 256``, 16 clients writing 600 scenarios got 500s (EMFILE opening
``packed-refs``): 0-3 of 1,200 requests on a quiet machine, 456 with the CPUs busy, since the
open-scenario bound counted scenarios while every one of them was in use.  Here a real ``reef
serve`` under that limit takes 1,000 scenarios from 16 clients with two busy CPU loops beside
it; the rest drives the same paths in-process, where the test can fill the daemon's own
descriptor table.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reef_core.daemon.admission import SCENARIO_FILES, SCENARIO_HELD, FileBudget, count_open_files
from reef_core.daemon.context import DAEMON
from reef_core.store import limit_open_packs
from tests.conftest import git, wait_for
from tests.daemon.test_many_scenarios import low_file_limit
from tests.daemon.test_process import start
from tests.fakes.upstream import Delay, Text
from tests.store.procs import descriptors

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
SCENARIOS = 1000
CLIENTS = 16
ATTEMPTS = 5  # a 503 is retried after its Retry-After, this many tries in all


class Load:
    """``CLIENTS`` threads, each with its own keep-alive client, sending one chat request per
    name; a 503 is retried after its ``Retry-After``.  A request failed unless a try got 200."""

    def __init__(self, url: str) -> None:
        self.clients = [httpx.Client(base_url=url, timeout=60) for _ in range(CLIENTS)]
        self.receipts: dict[str, str] = {}
        self.failures: list[tuple[str, str]] = []
        self.statuses: dict[int, int] = {}
        self.retried = 0
        self._lock = threading.Lock()

    def close(self) -> None:
        for client in self.clients:
            client.close()

    def run(self, names: list[str]) -> None:
        todo = iter(names)
        threads = [threading.Thread(target=self._client, args=(c, todo)) for c in self.clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _client(self, client: httpx.Client, todo: Iterator[str]) -> None:
        while True:
            with self._lock:
                name = next(todo, None)
            if name is None:
                return
            self._one(client, name)

    def _one(self, client: httpx.Client, name: str) -> None:
        outcome = "no answer"
        for attempt in range(ATTEMPTS):
            try:
                r = client.post("/v1/chat/completions", json=CHAT, headers={"x-reef-scenario": name})
            except httpx.HTTPError as exc:
                outcome = f"{type(exc).__name__}: {exc}"
                break
            with self._lock:
                self.statuses[r.status_code] = self.statuses.get(r.status_code, 0) + 1
            if r.status_code == 200:
                with self._lock:
                    self.receipts[name] = r.headers["x-reef-agent-record-id"]
                return
            outcome = f"{r.status_code}: {r.text[:200]}"
            if r.status_code != 503 or "retry-after" not in r.headers or attempt == ATTEMPTS - 1:
                break
            with self._lock:
                self.retried += 1
            time.sleep(float(r.headers["retry-after"]))
        with self._lock:
            self.failures.append((name, outcome))


def held(pid: int) -> tuple[int, int, int]:
    """(open files that are not sockets, sockets, threads) of process ``pid``."""
    targets = descriptors(pid)
    sockets = sum(target.startswith("socket:") for target in targets)
    return len(targets) - sockets, sockets, len(list(Path(f"/proc/{pid}/task").iterdir()))


def _open_count(url: str) -> int:
    return httpx.get(f"{url}/reef/status", timeout=60).json()["open_scenarios"]["open"]


@contextlib.contextmanager
def busy_cpus(count: int = 2) -> Iterator[None]:
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait(10)


@pytest.mark.slow
def test_a_thousand_scenarios_under_ulimit_256_beside_busy_cpus_fail_no_request(tmp_path, upstream):
    log = (tmp_path / "reef.log").open("w")
    proc, url = start(
        tmp_path, upstream.url, "--storage.idle-close-s", "1", log=log, preexec_fn=low_file_limit
    )
    load = Load(url)
    try:
        # warm: every client connected, the upstream pool and the loop's threads grown, then
        # every scenario closed again; that is "idle"
        load.run([f"warm-{n}" for n in range(CLIENTS)])
        assert wait_for(lambda: _open_count(url) == 0, timeout=30)
        before = held(proc.pid)
        names = [f"project-{n:04d}" for n in range(SCENARIOS)]
        again = random.Random(7).sample(names, SCENARIOS // 5)  # reopened, out of order
        started = time.monotonic()
        with busy_cpus():
            load.run(names + again)
            took = time.monotonic() - started
            peak = httpx.get(f"{url}/reef/status", timeout=60).json()["open_scenarios"]
        assert wait_for(lambda: _open_count(url) == 0, timeout=30)
        after = held(proc.pid)
        print(
            f"\n{len(names) + len(again)} requests in {took:.1f}s, statuses {load.statuses}, "
            f"{load.retried} retried, failed {len(load.failures)}; files/threads idle "
            f"{before} -> {after}; open at the end of the load: {peak}"
        )
        assert load.failures == [], load.failures[:5]
        assert set(load.statuses) <= {200, 503}, load.statuses
        assert len(load.receipts) == SCENARIOS + CLIENTS
        # back where it started: no file or thread left behind by 1,200 opens and closes; the
        # upstream's keep-alive pool may have grown, at most to one connection per client
        files, sockets, threads = after
        assert files <= before[0] + 1 and threads <= before[2] + 1, (before, after)
        assert sockets <= before[1] + CLIENTS, (before, after)
        assert "Traceback" not in (tmp_path / "reef.log").read_text()
    finally:
        load.close()
        proc.terminate()
        proc.wait(30)
        log.close()
    for name in names[::100]:
        repo = str(tmp_path / "state" / "scenarios" / f"{name}.git")
        git("--git-dir", repo, "fsck", "--no-progress")
        assert load.receipts[name] in git("--git-dir", repo, "log", "--format=%s", "data").stdout


# -- in-process: the daemon's own descriptor table ---------------------------------------------


@contextlib.contextmanager
def no_descriptor_left() -> Iterator[None]:
    """Every descriptor this process may open taken (by /dev/null), until the block ends."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    used = count_open_files()
    assert used is not None
    resource.setrlimit(resource.RLIMIT_NOFILE, (used + 64, hard))
    taken: list[int] = []
    try:
        while True:
            try:
                taken.append(os.open(os.devnull, os.O_RDONLY))
            except OSError as exc:
                if exc.errno != errno.EMFILE:
                    raise
                break
        yield
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _chat(client: httpx.Client, name: str) -> httpx.Response:
    return client.post("/v1/chat/completions", json=CHAT, headers={"x-reef-scenario": name})


def _quiet(reef) -> FileBudget:
    """Once the daemon opens no file of its own accord (each writer makes its spare files
    while idle, a descriptor at a time, which the test's fill would catch and then see
    freed), a budget that never steps in and never lists the descriptors: the write itself
    must meet EMFILE."""
    scenarios = reef.app[DAEMON].scenarios
    scenarios.files = FileBudget(limit=1 << 20, count=lambda: 0)
    writers = [scenario.writer for name in scenarios.open_names if (scenario := scenarios.peek(name))]
    assert wait_for(lambda: not any(w.spares.low or w.spares.untidy for w in writers), timeout=10)
    return scenarios.files


def test_a_write_out_of_descriptors_closes_an_idle_scenario_and_tries_once_more(make_reef):
    reef = make_reef()
    scenarios = reef.app[DAEMON].scenarios
    with httpx.Client(base_url=reef.url, timeout=30) as client:
        for name in ("idle", "busy"):  # both open; the client's and the upstream's sockets made
            assert _chat(client, name).status_code == 200
        assert scenarios.open_names == ["idle", "busy"]
        _quiet(reef)
        with no_descriptor_left():
            r = _chat(client, "busy")
        assert r.status_code == 200, r.text
        # the retry found the nine descriptors of the idle scenario, closed for it
        assert scenarios.open_names == ["busy"] and scenarios.closed == 1
        receipt = r.headers["x-reef-agent-record-id"]
        assert receipt in {item.id for item in reef.reader("busy").data.iter_items()}
        assert _chat(client, "idle").status_code == 200  # and it opens again
    git("--git-dir", reef.repo("busy"), "fsck", "--no-progress")


def test_a_write_out_of_descriptors_with_nothing_to_close_is_a_503_never_a_500(make_reef):
    reef = make_reef()
    with httpx.Client(base_url=reef.url, timeout=30) as client:
        assert _chat(client, "only").status_code == 200
        _quiet(reef)
        with no_descriptor_left():
            r = _chat(client, "only")
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] == "1"
        assert r.json()["error"]["code"] == "out_of_files"
        assert len(list(reef.reader("only").data.iter_items())) == 1  # nothing half-stored
        assert _chat(client, "only").status_code == 200  # the client's retry succeeds


def _budget(reef, limit: int, base: int = 40) -> FileBudget:
    """A budget whose count is ``base`` plus nine per open scenario: what the daemon holds,
    without the test process's own descriptors in the way."""
    scenarios = reef.app[DAEMON].scenarios
    return FileBudget(limit, count=lambda: base + 9 * len(scenarios.open_names))


def test_near_the_limit_an_opener_waits_for_a_scenario_in_use_then_is_served(make_reef, upstream):
    reef = make_reef()
    scenarios = reef.app[DAEMON].scenarios
    # under 79 the reserve is 24: a scenario opens while the estimate stays under 55, so one
    # fits beside the 40 of the rest (40 + 12), two do not (49 + 12)
    budget = _budget(reef, 79)
    scenarios.files = budget
    assert budget.reserve == 24 and budget.room_for_scenario()
    upstream.script(Delay(0.5, Text("slow")), Text("quick"))
    answers: dict[str, tuple[int, float]] = {}

    def send(name: str) -> None:
        started = time.monotonic()
        r = httpx.post(
            f"{reef.url}/v1/chat/completions", json=CHAT, headers={"x-reef-scenario": name}, timeout=30
        )
        answers[name] = (r.status_code, time.monotonic() - started)

    first = threading.Thread(target=send, args=("a",))
    first.start()
    assert wait_for(lambda: scenarios.open_names == ["a"], timeout=10)
    send("b")  # waits for a to be released, closes it, opens b
    first.join()
    assert answers["a"][0] == answers["b"][0] == 200
    assert scenarios.open_names == ["b"] and budget.waited == 1 and budget.refused == 0


def test_at_the_limit_a_request_waits_a_bounded_time_then_gets_a_503_with_retry_after(make_reef):
    reef = make_reef()
    scenarios = reef.app[DAEMON].scenarios
    full = [True]
    scenarios.files = FileBudget(256, count=lambda: 256 if full[0] else 40)
    scenarios.wait_s = 0.3
    r = httpx.post(
        f"{reef.url}/v1/messages",
        json={"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-reef-scenario": "s"},
        timeout=30,
    )
    # it waited (bounded by wait_s, not a clock this test reads) and was then refused
    assert scenarios.files.waited >= 1 and scenarios.files.refused == 1
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert r.json()["error"]["type"] == "overloaded_error"  # Anthropic's envelope, as SDKs retry it
    assert httpx.get(f"{reef.url}/healthz", timeout=30).status_code == 200  # never held back
    assert scenarios.files.refused == 1
    full[0] = False
    time.sleep(0.02)  # past the recount interval
    assert httpx.post(
        f"{reef.url}/v1/chat/completions", json=CHAT, headers={"x-reef-scenario": "s"}, timeout=30
    ).is_success


def test_the_budget_charges_opens_at_once_and_counts_only_near_the_limit():
    counted = [100]
    now = [0.0]
    budget = FileBudget(256, count=lambda: counted[0], clock=lambda: now[0])
    assert (budget.reserve, budget.packs) == (32, 16)  # scenarios open while under 256 - 32
    for _ in range(10):  # openers deciding at one moment each see the others' share
        assert budget.room_for_scenario()
        budget.opening()
    assert budget.used == 100 + 10 * SCENARIO_FILES
    assert not budget.room_for_scenario() and budget.counts == 1  # counted a moment ago
    for _ in range(10):
        budget.opened()  # what an open scenario holds, until the next count says
    assert budget.used == 100 + 10 * SCENARIO_HELD and budget.room_for_scenario()
    assert budget.counts == 1  # far from the limit a check is a comparison
    assert budget.count_every() == 0.1  # above half the limit the watcher counts 10 times a second
    # a close that a count overlapped is not taken off again: that count saw it (partly) gone
    counted[0] = 180
    closing = budget.closing()
    budget.count()
    budget.closed(closing)
    assert budget.used == 180
    budget.closed(budget.closing())
    assert budget.used == 180 - SCENARIO_HELD
    # near the limit, a check that would say no counts again first (at most every 10 ms)
    for _ in range(4):
        budget.opening()
    counted[0] = 100
    assert not budget.room_for_scenario()
    now[0] += 0.02
    assert budget.room_for_scenario() and budget.used == 100 + 4 * SCENARIO_FILES


def open_files_under(root: Path) -> int:
    """This process's descriptors on files under ``root``: the process-wide count also moves
    when libgit2 closes packs an earlier test in this worker left open (the cap evicts them)."""
    return sum(Path(target).is_relative_to(root) for target in descriptors())


def test_one_open_scenario_holds_nine_descriptors_and_packs_are_capped(store):
    """The number the budget charges, measured: an open scenario's writer lock and ring of
    eight ref files, whatever it writes; libgit2's open packs are capped for the process."""
    root = store.state_dir.resolve()
    limit_open_packs(4)
    try:
        assert open_files_under(root) == 0
        scenarios = [store.open(f"s{n}", create=True) for n in range(3)]
        for scenario in scenarios:
            for batch in range(12):  # twelve packs each
                scenario.append_sync("record", {"n": batch})
            scenario.releases.tip()
            assert len(list(scenario.data.iter_items())) == 12  # reads every pack
        # each writer makes its spare files while idle, a descriptor for a moment each
        writers = [scenario.writer for scenario in scenarios]
        assert wait_for(lambda: not any(w.spares.low or w.spares.untidy for w in writers), timeout=10)
        held_now = open_files_under(root)
        # libgit2 may be one pack over its cap while it reads from every pack it holds
        assert 3 * 9 <= held_now <= 3 * 9 + 4 + 1, held_now
        for scenario in scenarios:
            scenario.close()
        assert open_files_under(root) == 0
    finally:
        limit_open_packs(0)
