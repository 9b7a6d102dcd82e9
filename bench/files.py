"""Near the open-file limit: request latency with admission waiting, against files to spare.

    python bench/files.py [--scenarios 400] [--requests 2000] [--clients 16] [--quick]

Two real ``reef serve``, same flags, in front of one scripted upstream (tests/fakes/upstream.py):

* admission: under ``ulimit -n 256``, where about 17 scenarios fit: most requests find their
  scenario closed, and when every open one is in use, wait for one to be released and closed
  before theirs opens (``reef_core/daemon/admission.py``);
* baseline: this machine's open-file limit, where the file budget never holds a request back
  (its check is one comparison), with ``storage.max-open-scenarios`` set to the number the
  other fits, so both close and reopen as often: what differs is the waiting.

Both get the same load, in rounds that alternate between them so drift hits both alike:
``--clients`` keep-alive clients (reef's lean client, on uvloop), each request to a random one
of ``--scenarios`` scenarios, made on both daemons first.  A 503 is retried after its
``Retry-After``, its wait counted in the request's latency.  Printed: p50 and p99 of each, the
ratio of the p99s, the 503s, what the admission daemon's budget counted (``/reef/status``);
and what the budget costs a request far from the limit (one check) against what a count of
``/proc/self/fd`` would (the reason it is not counted per request).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import uvloop

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.proxy import bench_parser, free_port, parsed, pct, start_upstream  # noqa: E402  (one copy of each, shared)
from reef_core.daemon.admission import FileBudget, count_open_files  # noqa: E402
from reef_core.upstream.lean import LeanHTTP  # noqa: E402

REEF = str(Path(sys.executable).with_name("reef"))
BODY = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "hi"}]}).encode()
LOW_LIMIT = 256


def _low_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LOW_LIMIT, LOW_LIMIT))


def start(state: str, upstream: str, *flags: str, low: bool) -> tuple[subprocess.Popen[bytes], str]:
    """``reef serve`` in front of ``upstream`` (under ``ulimit -n 256`` if ``low``), once healthy."""
    port = free_port()
    command = [REEF, "serve", "--inference.upstream-url", upstream, "--reef.port", str(port), *flags]
    proc = subprocess.Popen(
        [*command, "--storage.state-dir", state],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=_low_limit if low else None,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1):
                return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("reef did not start")


class Load:
    def __init__(self, url: str, clients: int) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.clients = [
            LeanHTTP(host, int(port), authority=f"{host}:{port}", connect_timeout_s=10, read_timeout_s=120)
            for _ in range(clients)
        ]
        self.busy = 0  # 503s, each retried

    async def close(self) -> None:
        for client in self.clients:
            await client.close()

    async def one(self, client: LeanHTTP, scenario: str) -> float:
        headers = {"content-type": "application/json", "x-reef-scenario": scenario}
        started = time.perf_counter()
        while True:
            reply = await client.post("/v1/chat/completions", headers, BODY)
            if reply.status == 200:
                return time.perf_counter() - started
            if reply.status != 503:
                raise RuntimeError(f"{scenario}: {reply.status} {reply.body[:200]!r}")
            self.busy += 1
            await asyncio.sleep(float(reply.headers.get("retry-after", "1")))

    async def run(self, scenarios: list[str]) -> list[float]:
        todo = iter(scenarios)
        took: list[float] = []

        async def worker(client: LeanHTTP) -> None:
            for scenario in todo:
                took.append(await self.one(client, scenario))

        await asyncio.gather(*(worker(client) for client in self.clients))
        return took


def status(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/reef/status", timeout=60) as r:
        return json.load(r)["open_scenarios"]


async def measure(args: argparse.Namespace, urls: dict[str, str]) -> None:
    names = [f"project-{n:04d}" for n in range(args.scenarios)]
    loads = {kind: Load(url, args.clients) for kind, url in urls.items()}
    try:
        for load in loads.values():  # every scenario made (and closed again) on both
            await load.run(names)
        rng = random.Random(1)
        took: dict[str, list[float]] = {kind: [] for kind in loads}
        rounds = 10
        for n in range(rounds):
            batch = [rng.choice(names) for _ in range(args.requests // rounds)]
            order = list(loads) if n % 2 == 0 else list(reversed(loads))
            for kind in order:
                took[kind] += await loads[kind].run(batch)
    finally:
        for load in loads.values():
            await load.close()
    ms = 1000.0
    for kind, values in took.items():
        print(
            f"{kind:9}  {len(values)} requests over {args.scenarios} scenarios, c={args.clients}: "
            f"p50 {pct(values, 0.5) * ms:7.2f} ms  p99 {pct(values, 0.99) * ms:7.2f} ms  "
            f"503s retried {loads[kind].busy}"
        )
    base, low = took["baseline"], took["admission"]
    print(
        f"ratio      p50 {pct(low, 0.5) / pct(base, 0.5):5.2f}  p99 {pct(low, 0.99) / pct(base, 0.99):5.2f}  "
        f"(admission under ulimit -n {LOW_LIMIT} / baseline)"
    )
    for kind, url in urls.items():
        print(f"{kind:9}  open scenarios {status(url)}")


def check_cost() -> None:
    """A request's check far from the limit, against one count of /proc/self/fd."""
    budget = FileBudget()
    n = 200_000
    started = time.perf_counter()
    for _ in range(n):
        budget.room_for_request()
    check = (time.perf_counter() - started) / n
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(max(0, 250 - (count_open_files() or 0)))]
    try:
        n = 2000
        started = time.perf_counter()
        for _ in range(n):
            count_open_files()
        count = (time.perf_counter() - started) / n
    finally:
        for fd in held:
            os.close(fd)
    print(
        f"request path: the budget's check {check * 1e9:5.0f} ns; a count of /proc/self/fd at 250 "
        f"descriptors {count * 1e6:5.0f} us ({count / check:,.0f} times the check, done by the "
        f"watcher once a second instead)"
    )


def main() -> None:
    parser = bench_parser(__doc__, quick="100 scenarios, 500 requests")
    parser.add_argument("--scenarios", type=int, default=400)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=16)
    args = parsed(parser, scenarios=100, requests=500)
    check_cost()
    upstream, direct = start_upstream()
    procs = []
    try:
        with tempfile.TemporaryDirectory(prefix="reef-files-bench-") as tmp:
            proc, low = start(str(Path(tmp) / "admission"), direct, low=True)
            procs.append(proc)
            fits = ["--storage.max-open-scenarios", str(status(low)["limit"])]
            proc, high = start(str(Path(tmp) / "baseline"), direct, *fits, low=False)
            procs.append(proc)
            urls = {"baseline": high, "admission": low}
            try:
                with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                    runner.run(measure(args, urls))
            finally:
                for proc in procs:
                    proc.terminate()
                    proc.wait(30)
    finally:
        upstream.kill()
    print(f"cpu: {os.cpu_count()} cores (upstream, both daemons and this client share them)")


if __name__ == "__main__":
    main()
