"""Store benchmark: what recording costs as a scenario grows, and what a daemon costs at that size.

    python bench/store.py [--sizes 1000,10000,100000,1000000] [--quick] [--fresh] [--gap-ms 1]

Each size gets a scenario of its own (``s<size>``) in a state directory kept between runs
(``.cache/bench/store-state``), so 10^6 records are filled once, not at every run; a scenario
is filled again once the runs' own records took it 10% past its size.  ``--fresh`` uses a new
directory, removed after.  Filling uses the store's own group commit (``Scenario.append``),
the commits the daemon writes under load (one commit per record, one pack and one ref update
per batch), with batches of 1,024 instead of the daemon's 256, and the packer's own steps
(compress what the branch gained, keep git's packs a geometric progression) run after each
100,000 records while the next are written (:func:`fill`).  From an empty state directory the
whole run took 6.6 minutes on 2 cores, 5.6 of them filling 10^6 records (git's compression
most of it).

At each size, in this process, with the daemon's store options:

* ``lone``: what a request alone in flight pays before its receipt.  Each commit comes
  ``--gap-ms`` after the last one returned, as a daemon's next request comes an upstream
  round trip after the last; ``inline`` writes in the caller's thread (``now=True``, what the
  daemon does then), ``thread`` hands the item to the writer thread.  Printed: the median
  latency, and (inline) the caller's CPU per commit, which other load on the machine moves
  less than it moves latency.
* ``group``: group commit, 2,000 callers at once (one ref update per batch), the fastest of
  three rounds, per record.
* ``naive``: the baseline, the shape a store without a writer would have: one commit and one
  ref update per item through libgit2, in the caller's thread, on top of the data branch's tip
  (so it rewrites the scenario's trees, as the store does).  Run last, since its loose
  objects are freed by the next repack (see below).

Then, as separate processes: ``reef serve`` on the state directory against the scripted
upstream (``tests/fakes/upstream.py``): its cold start (exec to a 200 from ``/healthz``; and to
the answer of the first recorded request, which opens the scenario), the median latency it
adds at concurrency 1 over 200 requests against the upstream called directly, interleaved, and
its resident memory (VmRSS) after them; and ``reef log`` and ``reef export`` reading the
repository directly (no daemon at ``--url``): exec to their first line on stdout.  The filled
records have no reports; ``reef export`` reads every report after its cursor before its first
line (a record's reports come after it), so with reports its first line waits for that pass.

Ratios are against the smallest size; the targets are checked at the largest.

Why ``lone`` commits are spaced: written back to back, with no gap, a 1-item commit takes two
spare files (``scratch.py``) every 0.2 ms, faster than the writer thread can make them beside
it; the stock runs out and the caller makes its own files, which on ext4 without a journal cost
0.1-1.2 ms each for minutes after files were freed (a fill's repacks free hundreds, the naive
baseline's loose objects thousands).  That state, which no daemon at concurrency 1 is ever in
(between two requests the writer thread has the upstream's round trip to make files), is what
the old back-to-back ``inline`` row measured: its mean (200, 391, 738 us at 10^3, 10^4, 10^5)
was carried by a few 5-30 ms commits that made files, and moved with the file system's state
and the machine's other load, not with the history; its median stayed at 150-240 us.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.proxy import free_port, start_upstream  # noqa: E402  (one copy of each, shared)
from reef_core.store import Scenario, Store, StoreOptions  # noqa: E402

CACHE = ROOT / ".cache" / "bench" / "store-state"
REEF = Path(sys.executable).with_name("reef")

BODY = {
    "route": "chat.completions",
    "request": {"model": "m", "messages": [{"role": "user", "content": "fix the failing test in parser.py"}]},
    "response": {"choices": [{"message": {"role": "assistant", "content": "x" * 400}}]},
    "status": 200,
    "timings": {"total_ms": 812},
}
SUMMARY = "chat.completions model=m 200 812ms"
# filling: bigger batches and rarer repacks than the daemon's (the same commits)
FILL_OPTIONS = StoreOptions(max_batch=1024, pack_every=0)  # repacked by fill(), not the thread
_FILL_CHUNK = 100_000
MEASURE_OPTIONS = StoreOptions()  # the daemon's defaults
_REFILL_SLACK = 0.1  # a kept scenario this far past its size is filled afresh


@dataclass
class Row:
    size: int
    disk_per_record: float = 0.0
    inline_us: float = 0.0  # median latency
    inline_cpu_us: float = 0.0  # mean CPU of the caller
    thread_us: float = 0.0
    group_us: float = 0.0  # per record
    naive_us: float = 0.0
    health_s: float = 0.0
    first_request_s: float = 0.0
    added_ms: float = 0.0
    rss_mb: float = 0.0
    log_s: float = 0.0
    export_s: float = 0.0
    notes: list[str] = field(default_factory=list)


# -- filling ---------------------------------------------------------------------------------


def records(scenario: Scenario) -> int:
    return scenario.data.counts()["record"]


def prepare(state: Path, size: int) -> str:
    """The scenario for ``size``, filled to it (kept from an earlier run when it still fits)."""
    name = f"s{size}"
    store = Store(state, FILL_OPTIONS)
    if store.exists(name):
        have = store.reader(name).data.counts()["record"]
        if not size <= have <= size * (1 + _REFILL_SLACK):
            shutil.rmtree(store.path_of(name))
    with store.open(name, create=True) as scenario:
        have = records(scenario)
        if have < size:
            started = time.perf_counter()
            fill(scenario, size - have)
            print(
                f"  filled {name} to {size:,} records in {time.perf_counter() - started:.0f}s "
                f"(git repacks {scenario.packer.seconds:.0f}s of it)",
                flush=True,
            )
        else:
            scenario.packer.pack_now()  # what an earlier run's measurements left
    return name


def fill(scenario: Scenario, n: int) -> None:
    """Append ``n`` records by group commit, repacking each chunk while the next is written.

    The packer is driven here, not by its own thread: that one starts a repack only once three
    times its threshold piled up without a pause, and a fill never pauses, so repacks fell
    ever further behind, each compressing hundreds of thousands of records found in hundreds
    of the writer's packs (10^6 records took 10 minutes that way, 7 of them repacking after
    the last record)."""
    chunk = _FILL_CHUNK
    repack: Future[None] | None = None
    with ThreadPoolExecutor(1) as packing:
        while n > 0:
            pending = []
            for _ in range(min(chunk, n)):
                pending.append(scenario.append("record", BODY, summary=SUMMARY))
                if len(pending) >= 20_000:
                    wait(pending)
                    pending.clear()
            wait(pending)
            n -= min(chunk, n)
            if repack is not None:
                repack.result()  # at most one chunk waits for its repack
            repack = packing.submit(scenario.packer.pack_now)
        if repack is not None:
            repack.result()
    scenario.packer.pack_now()  # measurements start with the packer caught up


# -- in-process measurements ------------------------------------------------------------------


def measure_lone(scenario: Scenario, n: int, gap: float, *, inline: bool) -> tuple[float, float]:
    """Median latency and mean caller CPU, in us, of ``n`` commits each ``gap`` s after the last."""
    latencies, cpu = [], []
    for _ in range(n):
        time.sleep(gap)
        c0, t0 = time.thread_time(), time.perf_counter()
        scenario.append("record", BODY, summary=SUMMARY, now=inline).result()
        latencies.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    return statistics.median(latencies) * 1e6, statistics.mean(cpu) * 1e6


def measure_group(scenario: Scenario, n: int, rounds: int = 3) -> float:
    """us per record, the fastest of ``rounds``."""
    best = float("inf")
    for _ in range(rounds):
        time.sleep(0.1)  # the writer tops its spare files up in the pause, as between bursts
        start = time.perf_counter()
        futures = [scenario.append("record", BODY, summary=SUMMARY) for _ in range(n)]
        for f in futures:
            f.result()
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def measure_naive(scenario: Scenario, n: int) -> float:
    """Baseline, us per item: one commit and one ref update per item, no writer thread."""
    import pygit2

    from reef_core.ids import IdGenerator
    from reef_core.store.repo import signature
    from reef_core.store.trees import insert_blob

    repo = pygit2.Repository(str(scenario.path))
    ids = IdGenerator()
    start = time.perf_counter()
    for _ in range(n):
        ref = repo.references["refs/heads/naive"] if "refs/heads/naive" in repo.references else None
        parent = repo[ref.target] if ref else repo.revparse_single("refs/heads/data")
        item = ids.new("record")
        blob = repo.create_blob(json.dumps({"id": str(item), **BODY}).encode())
        tree = insert_blob(repo, parent.tree, item.path.split("/"), blob)
        sig = signature()
        commit = repo.create_commit(None, sig, sig, f"record {item}", tree, [parent.id])
        if ref is None:
            repo.references.create("refs/heads/naive", commit)
        else:
            ref.set_target(commit)
    per_item = (time.perf_counter() - start) / n
    repo.references.delete("refs/heads/naive")
    return per_item * 1e6


def disk_bytes(path: Path) -> int:
    """Bytes git's objects take (each file once, however many names it has)."""
    seen: dict[int, int] = {}
    for f in (path / "objects").rglob("*"):
        if f.is_file():
            info = f.stat()
            seen[info.st_ino] = info.st_size
    return sum(seen.values())


def measure_store(state: Path, name: str, row: Row, args: argparse.Namespace) -> None:
    store = Store(state, MEASURE_OPTIONS)
    with store.open(name) as scenario:
        row.disk_per_record = disk_bytes(scenario.path) / records(scenario)
        time.sleep(0.5)  # the writer makes its first spare files while idle, as after a start
        measure_lone(scenario, 50, args.gap_ms / 1e3, inline=True)  # warm-up, not counted
        row.inline_us, row.inline_cpu_us = measure_lone(scenario, args.lone, args.gap_ms / 1e3, inline=True)
        row.thread_us, _ = measure_lone(scenario, args.lone, args.gap_ms / 1e3, inline=False)
        row.group_us = measure_group(scenario, args.group)
        row.naive_us = measure_naive(scenario, args.naive)


# -- processes: the daemon, the CLI -----------------------------------------------------------


def request(
    conn: http.client.HTTPConnection,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> int:
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    response.read()
    return response.status


CHAT = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "Say hello."}]}).encode()


def measure_daemon(state: Path, name: str, upstream_port: int, row: Row, requests: int) -> None:
    port = free_port()
    command = [
        str(REEF), "serve",
        "--inference.upstream-url", f"http://127.0.0.1:{upstream_port}",
        "--reef.port", str(port),
        "--storage.state-dir", str(state),
    ]  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"reef serve exited with {proc.returncode}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                if request(conn, "GET", "/healthz") == 200:
                    break
            except OSError:
                time.sleep(0.005)
        row.health_s = time.perf_counter() - started
        headers = {"content-type": "application/json", "x-reef-scenario": name}
        status = request(conn, "POST", "/v1/chat/completions", CHAT, headers)
        row.first_request_s = time.perf_counter() - started
        if status != 200:
            raise RuntimeError(f"the first request through reef answered {status}")
        direct = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=30)
        through, plain = [], []
        for n in range(requests + 20):  # the first 20: warm-up, not counted
            if n == 20:
                through.clear()
                plain.clear()
            for target, times in ((conn, through), (direct, plain)):
                t0 = time.perf_counter()
                request(target, "POST", "/v1/chat/completions", CHAT, headers)
                times.append(time.perf_counter() - t0)
        row.added_ms = (statistics.median(through) - statistics.median(plain)) * 1e3
        status_text = Path(f"/proc/{proc.pid}/status").read_text()
        row.rss_mb = int(status_text.split("VmRSS:")[1].split()[0]) / 1024
        conn.close()
        direct.close()
    finally:
        proc.terminate()
        proc.wait(60)


def first_line_s(arguments: list[str]) -> float:
    """Seconds from exec to the first line on stdout; the command is then stopped."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [str(REEF), *arguments], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    took = time.perf_counter() - started
    proc.kill()
    proc.wait()
    if not line:
        raise RuntimeError(f"reef {' '.join(arguments)} printed nothing")
    return took


def measure_cli(state: Path, name: str, row: Row) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"  # no daemon there: the repository is read directly
    common = [name, "--state-dir", str(state), "--url", nobody]
    row.log_s = first_line_s(["log", *common])
    row.export_s = first_line_s(["export", *common])


# -- report -----------------------------------------------------------------------------------

COLUMNS = [
    # (header, attribute, format, per-record cost under the 1.3x target)
    ("inline us", "inline_us", "{:.0f}", True),
    ("cpu us", "inline_cpu_us", "{:.0f}", True),
    ("thread us", "thread_us", "{:.0f}", True),
    ("group us", "group_us", "{:.0f}", True),
    ("naive us", "naive_us", "{:.0f}", False),
    ("disk B", "disk_per_record", "{:.0f}", False),
    ("start s", "health_s", "{:.2f}", False),
    ("1st req s", "first_request_s", "{:.2f}", False),
    ("added ms", "added_ms", "{:.2f}", False),
    ("RSS MB", "rss_mb", "{:.0f}", False),
    ("log s", "log_s", "{:.2f}", False),
    ("export s", "export_s", "{:.2f}", False),
]


def print_table(rows: list[Row]) -> None:
    widths = [max(len(h), 7) for h, *_ in COLUMNS]
    print()
    print(f"{'records':>10}  " + "  ".join(f"{h:>{w}}" for (h, *_), w in zip(COLUMNS, widths, strict=True)))
    for row in rows:
        cells = [fmt.format(getattr(row, attr)) for _, attr, fmt, _ in COLUMNS]
        print(f"{row.size:>10,}  " + "  ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)))
    base = rows[0]
    if len(rows) > 1:
        print(f"{'ratio to the first row:':>10}")
    for row in rows[1:]:
        cells = []
        for _, attr, _, _ in COLUMNS:
            ref = getattr(base, attr)
            cells.append(f"{getattr(row, attr) / ref:.2f}x" if ref > 0 else "-")
        label = f"{row.size:,}"
        print(f"{label:>10}  " + "  ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)))


def print_targets(rows: list[Row]) -> None:
    base, last = rows[0], rows[-1]
    checks = []
    for header, attr, _, per_record in COLUMNS:
        if per_record:
            ratio = getattr(last, attr) / getattr(base, attr)
            checks.append(
                (
                    f"{header.split()[0]} per record at {last.size:,} / at {base.size:,}: {ratio:.2f}x",
                    ratio <= 1.3,
                    "<= 1.3x",
                )
            )
    checks += [
        (f"daemon RSS at {last.size:,}: {last.rss_mb:.0f} MB", last.rss_mb <= 200, "<= 200 MB"),
        (f"cold start (exec to /healthz 200): {last.health_s:.2f} s", last.health_s <= 2, "<= 2 s"),
        (f"reef log, first line: {last.log_s:.2f} s", last.log_s <= 1, "<= 1 s"),
        (f"reef export, first line: {last.export_s:.2f} s", last.export_s <= 1, "<= 1 s"),
    ]
    print()
    for text, ok, target in checks:
        print(f"  {'met   ' if ok else 'MISSED'} {text} (target {target})")


def reads(state: Path, name: str) -> str:
    reader = Store(state).reader(name)
    start = time.perf_counter()
    ids = [item.id for item in reader.data.iter_items(limit=2000)]
    iterate = len(ids) / (time.perf_counter() - start)
    start = time.perf_counter()
    for item_id in ids[:500]:
        reader.data.get(item_id)
    get_us = (time.perf_counter() - start) / 500 * 1e6
    return f"reads at {name[1:]}: get by id {get_us:.0f} us; iterate {iterate:,.0f} items/s"


def sized_parser(doc: str, *, sizes: str, quick: str, cache: Path) -> argparse.ArgumentParser:
    """The options of a bench over scenario sizes in a kept state directory (this one and
    ``bench/sync.py``): ``--sizes``, ``--quick``, ``--fresh`` and ``--state``."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=sizes)
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--fresh", action="store_true", help="a new state directory, removed after")
    parser.add_argument("--state", type=Path, default=cache, help="the kept state directory")
    return parser


@contextlib.contextmanager
def state_dir(args: argparse.Namespace, prefix: str, parent: Path | None = None) -> Iterator[Path]:
    """The state directory of a :func:`sized_parser` bench: with ``--fresh`` a new one (in
    ``parent``), removed after; else ``--state``'s, kept."""
    if args.fresh:
        with tempfile.TemporaryDirectory(prefix=prefix, dir=parent) as tmp:
            yield Path(tmp)
        return
    args.state.mkdir(parents=True, exist_ok=True)
    yield args.state


def main() -> None:
    parser = sized_parser(
        __doc__, sizes="1000,10000,100000,1000000", quick="sizes 1000,5000 and short runs", cache=CACHE
    )
    parser.add_argument("--gap-ms", type=float, default=1.0, help="pause before each lone commit")
    args = parser.parse_args()
    sizes = [1000, 5000] if args.quick else [int(s) for s in args.sizes.split(",")]
    args.lone, args.group, args.naive, requests = (
        (200, 1000, 100, 50) if args.quick else (500, 2000, 300, 200)
    )
    with state_dir(args, "reef-store-bench-", CACHE.parent if CACHE.parent.is_dir() else None) as state:
        run(state, sizes, args, requests)


def run(state: Path, sizes: list[int], args: argparse.Namespace, requests: int) -> None:
    upstream, upstream_url = start_upstream()
    upstream_port = int(upstream_url.rsplit(":", 1)[1].split("/")[0])
    rows = []
    try:
        for size in sizes:
            print(f"at {size:,} records:", flush=True)
            name = prepare(state, size)
            row = Row(size)
            measure_store(state, name, row, args)
            measure_daemon(state, name, upstream_port, row, requests)
            measure_cli(state, name, row)
            rows.append(row)
            print(
                "  " + "  ".join(f"{h} {fmt.format(getattr(row, a))}" for h, a, fmt, _ in COLUMNS),
                flush=True,
            )
    finally:
        upstream.kill()
    print_table(rows)
    print_targets(rows)
    print()
    print(reads(state, f"s{sizes[-1]}"))
    print(
        f"lone commits {args.gap_ms:g} ms apart, medians of {args.lone}; group: fastest of 3 rounds of "
        f"{args.group}; daemon: {requests} requests at concurrency 1, median added over the upstream direct"
    )
    print(
        f"cpu: {os.cpu_count()} cores, python {sys.version.split()[0]}; load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
