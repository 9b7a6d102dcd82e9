"""Proxy benchmark: reef's added latency and throughput against the same upstream called directly.

    python bench/proxy.py [--requests 500] [--quick] [--fresh] [--client lean|aiohttp]

Three processes, as in production: the scripted upstream (tests/fakes/upstream.py), a real
``reef serve`` with recording on, and this load generator (``--client lean``, the default:
reef's own keep-alive client on uvloop, which costs a third of aiohttp's client per request;
``--client aiohttp`` for comparison; they share the machine's cores with what they measure).
Every measurement is taken both ways in the same run, interleaved so drift hits both alike:

* concurrency 1, non-streaming: latency p50/p99, direct and through reef, and the difference;
* concurrency 1, streaming: time to first byte, and to the last;
* concurrency 1, a 180 KB request (the size of Claude Code's, mostly tool definitions);
* concurrency 64, non-streaming and streaming: requests per second, and the ratio;
* ``/metrics``' cost: concurrency 1, non-streaming, through reef (metrics on, ``/metrics``
  scraped every second by a thread of this process) and through a second reef on the same
  upstream with ``--ops.metrics false``, interleaved with the direct path: each one's added p50,
  and the difference.

The daemon's state directory is kept between runs (``.cache/bench/proxy-state``, started
afresh past 50,000 records), as a user's is; ``--fresh`` uses a new one, removed after.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import uvloop

from reef_core.upstream.lean import LeanHTTP

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "bench" / "proxy-state"
_RESET_AT = 50_000  # records in the kept scenario before it is started afresh
BODY = {"model": "bench", "messages": [{"role": "user", "content": "Say hello in a short sentence."}]}


def large_body() -> dict:
    """A request shaped like a coding agent's: a long system prompt and 40 tool schemas."""
    rng = random.Random(1)
    words = "file tool path string the of command input returns read write edit bash glob grep".split()

    def text(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n))

    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": text(400),
                "parameters": {
                    "type": "object",
                    "properties": {f"p{j}": {"type": "string", "description": text(30)} for j in range(8)},
                },
            },
        }
        for i in range(40)
    ]
    system = {"role": "system", "content": text(4000)}
    return {**BODY, "messages": [system, *BODY["messages"]], "tools": tools}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_upstream() -> tuple[subprocess.Popen[str], str]:
    code = (
        "import time; from tests.fakes.upstream import ScriptedUpstream; "
        "u = ScriptedUpstream(); u.default_text = 'Hello there, this is a short answer.'; u.start(); "
        "print(u.url, flush=True); time.sleep(10**9)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def start_reef(upstream: str, state: str) -> tuple[subprocess.Popen[bytes], str]:
    """``reef serve`` in front of ``upstream``, once it accepts connections."""
    return launch_reef(state, "--inference.upstream-url", upstream)


def launch_reef(
    state: str, *flags: str, ready: str | None = None, failed: str = "reef did not start"
) -> tuple[subprocess.Popen[bytes], str]:
    """``reef serve FLAGS`` on a free port with ``state`` as its state dir, once it accepts
    connections, or with ``ready`` (a path, such as ``/v1/models`` while a local model may
    still be loading) once that path answers 200; a ``RuntimeError(failed)`` if it does not."""
    port = free_port()
    reef = Path(sys.executable).with_name("reef")
    proc = subprocess.Popen(
        [str(reef), "serve", *flags, "--reef.port", str(port), "--storage.state-dir", state],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300  # a local model loads before the daemon listens
    while time.time() < deadline and proc.poll() is None:
        if _answers(port, ready):
            return proc, url
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(failed)


def _answers(port: int, ready: str | None) -> bool:
    try:
        if ready is not None:
            return httpx.get(f"http://127.0.0.1:{port}{ready}", timeout=1).status_code == 200
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except (OSError, httpx.HTTPError):
        return False


@contextlib.contextmanager
def upstream_running() -> Iterator[str]:
    """The scripted upstream's URL for the block (:func:`start_upstream`), killed after."""
    proc, url = start_upstream()
    try:
        yield url
    finally:
        proc.kill()


@contextlib.contextmanager
def reef_running(
    state: str, *flags: str, ready: str | None = None, failed: str = "reef did not start"
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``reef serve`` for the block (:func:`launch_reef`), stopped after."""
    proc, url = launch_reef(state, *flags, ready=ready, failed=failed)
    try:
        yield proc, url
    finally:
        proc.terminate()
        proc.wait(30)


@contextlib.contextmanager
def reef_on_upstream(state: str) -> Iterator[tuple[subprocess.Popen[bytes], str, str]]:
    """The scripted upstream and a ``reef serve`` in front of it, for the block: reef's process,
    its URL and the upstream's."""
    with upstream_running() as direct, reef_running(state, "--inference.upstream-url", direct) as (proc, url):
        yield proc, url, direct


HEADERS = {"x-reef-scenario": "bench", "content-type": "application/json"}


class Client:
    """The load generator's HTTP client, one connection per caller (``fork`` one per worker).

    ``lean``: reef's own keep-alive client (reef_core.upstream.lean), about a quarter of
    aiohttp's CPU per request.  The upstream, reef and this client share the machine's cores,
    so a client that costs as much as the upstream (aiohttp's: ~300 us per stream here)
    takes that much CPU from both paths; a harness in real use is waiting on its model.
    ``aiohttp``: aiohttp's client, for comparison."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._lean: dict[str, LeanHTTP] = {}
        self._session: aiohttp.ClientSession | None = None

    def fork(self) -> Client:
        return Client(self.kind)

    async def close(self) -> None:
        for lean in self._lean.values():
            await lean.close()
        if self._session is not None:
            await self._session.close()

    async def one(self, url: str, stream: bool, body: bytes | None = None) -> tuple[float, float]:
        """(seconds to the first body byte, seconds to the end) for one chat completion."""
        data = body if body is not None else json.dumps({**BODY, "stream": stream}).encode()
        started = time.perf_counter()
        first = None
        if self.kind == "lean":
            lean = self._lean.get(url)
            if lean is None:
                host, port = url.removeprefix("http://").split(":")
                lean = self._lean[url] = LeanHTTP(
                    host, int(port), authority=f"{host}:{port}", connect_timeout_s=10, read_timeout_s=60
                )
            answer = await lean.stream("/v1/chat/completions", HEADERS, data)
            try:
                async for _ in answer.chunks():
                    if first is None:
                        first = time.perf_counter() - started
            finally:
                answer.close()
            status = answer.status
        else:
            if self._session is None:
                self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
            async with self._session.post(f"{url}/v1/chat/completions", data=data, headers=HEADERS) as r:
                async for _ in r.content.iter_any():
                    if first is None:
                        first = time.perf_counter() - started
                status = r.status
        if status != 200:
            raise RuntimeError(f"{url} answered {status}")
        return first or 0.0, time.perf_counter() - started


def bench_parser(doc: str, *, quick: str | None = None) -> argparse.ArgumentParser:
    """A bench's command line: its docstring as the help, and ``--quick`` (described by ``quick``)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=quick)
    return parser


def parsed(parser: argparse.ArgumentParser, **quick: Any) -> argparse.Namespace:
    """The command line read, with ``--quick``'s smaller sizes (``quick``) laid over it."""
    args = parser.parse_args()
    if args.quick:
        for name, value in quick.items():
            setattr(args, name, value)
    return args


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def added_ms(direct: list[float], reef: list[float], q: float) -> float:
    """Milliseconds reef adds at quantile ``q``: its ``pct`` less the direct one's."""
    return (pct(reef, q) - pct(direct, q)) * 1000.0


async def sequential(
    client: Client, direct: str, reef: str, n: int, stream: bool, body: bytes | None = None
) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {"direct": [], "reef": []}
    for i in range(n):
        order = [("direct", direct), ("reef", reef)] if i % 2 == 0 else [("reef", reef), ("direct", direct)]
        for name, url in order:
            out[name].append(await client.one(url, stream, body))
    return out


async def concurrent(clients: list[Client], url: str, n: int, stream: bool) -> float:
    """Requests per second for ``n`` requests, one worker per client."""
    todo = iter(range(n))

    async def worker(client: Client) -> None:
        for _ in todo:
            await client.one(url, stream)

    started = time.perf_counter()
    await asyncio.gather(*(worker(client) for client in clients))
    return n / (time.perf_counter() - started)


def cpu_ns(pid: int) -> int | None:
    """Nanoseconds process ``pid`` has run on a CPU, all its threads together (Linux)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        total = 0
        for task in tasks:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        return total
    except (OSError, ValueError, IndexError):
        return None


def children_cpu_ns(pid: int) -> int | None:
    """Nanoseconds the children ``pid`` has waited for ran (its git repacks), user + system."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class CPU:
    """reef's CPU time over a stretch of the run: its own threads, and its finished repacks."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.own = cpu_ns(pid)
        self.git = children_cpu_ns(pid)

    def per_request(self, requests: int) -> str:
        own, git = cpu_ns(self.pid), children_cpu_ns(self.pid)
        if None in (own, git, self.own, self.git):
            return "reef CPU unknown"
        own_us = (own - self.own) / requests / 1000
        git_us = (git - self.git) / requests / 1000
        return f"reef CPU {own_us:5.0f} us per recorded request (all its threads) + git repacks {git_us:4.0f}"


def compared(
    label: str,
    timed: dict[str, list[tuple[float, float]]],
    *,
    first: bool = False,
    spread: bool = False,
    added_p99: bool = True,
) -> str:
    """One line of :func:`sequential`'s timings, direct beside reef: the whole answers' (or with
    ``first``, the first bytes'), p50 (and p99 with ``spread``), and what reef added."""
    d, r = ([pair[0 if first else 1] for pair in timed[side]] for side in ("direct", "reef"))

    def side(values: list[float]) -> str:
        text = f"p50 {pct(values, 0.5) * 1000:6.2f} ms"
        return text + (f"  p99 {pct(values, 0.99) * 1000:6.2f} ms" if spread else "")

    text = f"{label}  direct {side(d)} | reef {side(r)} | added p50 {added_ms(d, r, 0.5):5.2f} ms"
    return text + (f"  p99 {added_ms(d, r, 0.99):5.2f} ms" if added_p99 else "")


async def run(args: argparse.Namespace, direct: str, reef: str, reef_pid: int, plain: str) -> None:
    session = Client(args.client)
    workers = [session.fork() for _ in range(64)]
    try:
        await sequential(session, direct, reef, 30, False)  # warm both paths
        ms = 1000.0
        cpu = CPU(reef_pid)
        lat = await sequential(session, direct, reef, args.requests, False)
        used = cpu.per_request(args.requests)
        print(compared("c=1 non-stream ", lat, spread=True))
        # what the machine's speed swings move less than latency: reef's own work
        print(f"c=1 non-stream   {used}")
        st = await sequential(session, direct, reef, max(100, args.requests // 2), True)
        dt = [t for _, t in st["direct"]]
        rt = [t for _, t in st["reef"]]
        print(
            compared("c=1 stream TTFB", st, first=True) + ";  whole stream added p50 "
            f"{(statistics.median(rt) - statistics.median(dt)) * ms:5.2f} ms"
        )
        large = json.dumps(large_body()).encode()
        big = await sequential(session, direct, reef, max(50, args.requests // 2), False, large)
        print(compared(f"c=1 {len(large) // 1024} KB req", big, added_p99=False))
        n = args.requests * 6
        for stream in (False, True):
            mine = cpu_ns(os.getpid()) or 0
            direct_rate = await concurrent(workers, direct, n, stream)
            mine_direct = (cpu_ns(os.getpid()) or 0) - mine
            cpu = CPU(reef_pid)
            reef_rate = await concurrent(workers, reef, n, stream)
            used = cpu.per_request(n)
            kind = "stream    " if stream else "non-stream"
            print(
                f"c=64 {kind}  direct {direct_rate:7.0f} req/s | reef {reef_rate:7.0f} req/s recorded | "
                f"ratio {reef_rate / direct_rate:4.2f}"
            )
            print(f"c=64 {kind}  {used}; this client {mine_direct / n / 1000:4.0f} us per request")
        await metrics_cost(session, direct, reef, plain, args.requests * 8)
    finally:
        for client in (session, *workers):
            await client.close()


class Scraper:
    """``GET /metrics`` every ``every`` seconds on a thread of its own, while it runs."""

    def __init__(self, url: str, every: float = 1.0) -> None:
        import threading

        self.url, self.every, self.scrapes = url, every, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self._stop.wait(self.every):
                client.get(f"{self.url}/metrics").raise_for_status()
                self.scrapes += 1

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def metrics_cost(client: Client, direct: str, on: str, off: str, n: int) -> None:
    """Added p50 with /metrics on and scraped every second, and with it off, in one interleaving."""
    out: dict[str, list[float]] = {"direct": [], "on": [], "off": []}
    paths = [("direct", direct), ("on", on), ("off", off)]
    with Scraper(on) as scraper:
        for i in range(n):
            for name, url in paths[i % 3 :] + paths[: i % 3]:
                out[name].append((await client.one(url, False))[1])
    with_metrics, without = added_ms(out["direct"], out["on"], 0.5), added_ms(out["direct"], out["off"], 0.5)
    print(
        f"c=1 /metrics     added p50 {with_metrics:5.2f} ms with metrics ({scraper.scrapes} scrapes, one a "
        f"second) | {without:5.2f} ms without (--ops.metrics false) | cost {with_metrics - without:+5.3f} ms"
    )


def records(state: Path) -> int:
    repo = state / "scenarios" / "bench.git"
    if not repo.exists():
        return 0
    command = ["git", "-C", str(repo), "rev-list", "--count", "data"]
    return int(subprocess.run(command, capture_output=True, text=True).stdout.strip() or 0)


def measure(args: argparse.Namespace, state: Path) -> None:
    before = records(state)
    with (
        reef_on_upstream(str(state)) as (reef_proc, reef, direct),
        tempfile.TemporaryDirectory(prefix="reef-proxy-plain-") as plain_state,
        reef_running(plain_state, "--inference.upstream-url", direct, "--ops.metrics", "false") as (_, plain),
    ):
        # the loop reef serve runs on, for the load generator too
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(run(args, direct, reef, reef_proc.pid, plain))
    print(
        f"records committed: {records(state) - before} ({records(state)} in the scenario); "
        f"cpu: {os.cpu_count()} cores (upstream, reef and this client share them)"
    )


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--fresh", action="store_true", help="a new state directory, removed after")
    parser.add_argument(
        "--client", choices=["lean", "aiohttp"], default="lean", help="the load generator's HTTP client"
    )
    args = parsed(parser, requests=100)
    if args.fresh:
        with tempfile.TemporaryDirectory(prefix="reef-proxy-bench-") as state:
            measure(args, Path(state))
        return
    # Kept between runs, as a user's state directory is: removing one deletes thousands of
    # files, and on ext4 without a journal that slows making files for the next minutes, so
    # a run right after a removal measures the removal (see README, "Storage").
    state = CACHE
    if records(state) > _RESET_AT:
        shutil.rmtree(state)
    state.mkdir(parents=True, exist_ok=True)
    measure(args, state)


if __name__ == "__main__":
    main()
