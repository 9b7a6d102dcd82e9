"""Store benchmark: recording throughput as a scenario grows, and its size on disk.

    python bench/store.py [--sizes 1000,10000,100000] [--quick]

At each size the data branch is filled to, it measures

* ``single``: one item per batch (each caller waits for its commit before the next), handed
  to the writer thread;
* ``inline``: the same, written in the caller's thread (``now=True``: what the daemon does
  for a request that is the only one in flight);
* ``group``:  group commit (many callers at once; one ref update per batch);

and, as a baseline in the same run, the naive shape a store without a writer would have
(one commit and one ref update per item, in the caller's thread).  It prints records per
second, the per-record cost at the largest size divided by the cost at the smallest (growth
ratio; target <= 1.3), and bytes on disk per record after background packing.

Each measurement starts with the background packer caught up (a repack of everything written
while filling would otherwise land inside it); the packer's own time is reported separately,
amortised per record, since it runs beside the writer on the other core.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import wait
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reef_core.store import Store, StoreOptions
from reef_core.store.scratch import SCRATCH_DIR

BODY = {
    "route": "chat.completions",
    "request": {"model": "m", "messages": [{"role": "user", "content": "fix the failing test in parser.py"}]},
    "response": {"choices": [{"message": {"role": "assistant", "content": "x" * 400}}]},
    "status": 200,
    "timings": {"total_ms": 812},
}


def fill(scenario, target: int) -> None:
    have = scenario.data.counts()["record"]
    pending = []
    for _ in range(target - have):
        pending.append(scenario.append("record", BODY, summary="chat.completions model=m 200 812ms"))
        if len(pending) >= 2000:
            wait(pending)
            pending.clear()
    wait(pending)


def measure_single(scenario, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        scenario.append_sync("record", BODY, summary="chat.completions model=m 200 812ms")
    return n / (time.perf_counter() - start)


def measure_inline(scenario, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        scenario.append("record", BODY, summary="chat.completions model=m 200 812ms", now=True).result()
    return n / (time.perf_counter() - start)


def measure_group(scenario, n: int) -> float:
    start = time.perf_counter()
    futures = [
        scenario.append("record", BODY, summary="chat.completions model=m 200 812ms") for _ in range(n)
    ]
    for f in futures:
        f.result()
    return n / (time.perf_counter() - start)


def measure_naive(scenario, n: int) -> float:
    """Baseline: one commit and one ref update per item, no writer thread."""
    import json

    import pygit2

    from reef_core.ids import IdGenerator
    from reef_core.store.repo import signature
    from reef_core.store.trees import insert_blob

    repo = pygit2.Repository(str(scenario.path))
    ids = IdGenerator()
    start = time.perf_counter()
    for _ in range(n):
        ref = repo.references["refs/heads/naive"] if "refs/heads/naive" in repo.references else None
        parent = repo[ref.target] if ref else None
        item = ids.new("record")
        blob = repo.create_blob(json.dumps({"id": str(item), **BODY}).encode())
        tree = insert_blob(repo, parent.tree if parent else None, item.path.split("/"), blob)
        sig = signature()
        commit = repo.create_commit(None, sig, sig, f"record {item}", tree, [parent.id] if parent else [])
        if ref is None:
            repo.references.create("refs/heads/naive", commit)
        else:
            ref.set_target(commit)
    rate = n / (time.perf_counter() - start)
    repo.references.delete("refs/heads/naive")
    return rate


def disk_bytes(path: Path, *, under: str | None = None) -> int:
    """Bytes in the files under ``path`` (or only those under ``path / under``), each file
    counted once however many names it has."""
    seen: dict[int, int] = {}
    for f in (path / under if under else path).rglob("*"):
        if f.is_file() and (under or SCRATCH_DIR not in f.relative_to(path).parts):
            info = f.stat()
            seen[info.st_ino] = info.st_size
    return sum(seen.values())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--quick", action="store_true", help="sizes 1000,5000 and short runs")
    args = parser.parse_args()
    sizes = [1000, 5000] if args.quick else [int(s) for s in args.sizes.split(",")]
    n_single, n_group = (200, 1000) if args.quick else (500, 5000)

    with tempfile.TemporaryDirectory(prefix="reef-bench-") as tmp:
        store = Store(Path(tmp), StoreOptions(pack_every=5000))
        scenario = store.open("bench", create=True)
        rows = []
        for size in sizes:
            fill(scenario, size)
            scenario.packer.pack_now()  # start each measurement with the packer caught up
            naive = measure_naive(scenario, n_single)
            single = measure_single(scenario, n_single)
            inline = measure_inline(scenario, n_single)
            group = measure_group(scenario, n_group)
            rows.append((size, naive, single, group))
            print(
                f"at {size:>7,} records: naive {naive:7.0f}/s   single {single:7.0f}/s   "
                f"inline {inline:7.0f}/s ({1e6 / inline:4.0f} us each)   "
                f"group {group:7.0f}/s   group/naive {group / naive:5.1f}x",
                flush=True,
            )
        scenario.packer.pack_now()
        repack_s, repacks = scenario.packer.seconds, scenario.packer.runs
        total = scenario.data.counts()["record"]
        start = time.perf_counter()
        ids = [item.id for item in scenario.data.iter_items(limit=2000)]
        iter_rate = len(ids) / (time.perf_counter() - start)
        start = time.perf_counter()
        for item_id in ids[:500]:
            scenario.data.get(item_id)
        get_us = (time.perf_counter() - start) / 500 * 1e6
        scenario.close()
        path = store.path_of("bench")
        size_bytes = disk_bytes(path)
        scratch_bytes = disk_bytes(path, under=SCRATCH_DIR)
        fsck_start = time.perf_counter()
        fsck = subprocess.run(["git", "-C", str(path), "fsck", "--no-dangling"], capture_output=True)
        fsck_s = time.perf_counter() - fsck_start

    (s0, _, single0, group0), (s1, _, single1, group1) = rows[0], rows[-1]
    print()
    print(f"group commit at {s1:,}: {group1:,.0f} records/s (target >= 2,000)")
    print(
        f"growth ratio, per-record cost at {s1:,} / at {s0:,}: single {single0 / single1:.2f}, "
        f"group {group0 / group1:.2f} (target <= 1.3)"
    )
    print(
        f"disk: {size_bytes / total:,.0f} bytes per record at {total:,} records, packed "
        f"({size_bytes / 1e6:.1f} MB); git fsck {fsck_s:.1f}s {'clean' if fsck.returncode == 0 else 'FAILED'}"
    )
    print(f"       plus {scratch_bytes / 1e6:.1f} MB of merged packs' files kept for reuse ({SCRATCH_DIR}/)")
    print(
        f"background repacks: {repacks} runs, {repack_s:.1f}s in all, "
        f"{repack_s / total * 1e6:.0f} us per record written"
    )
    print(f"reads: get by id {get_us:.0f} us; iterate {iter_rate:,.0f} items/s")
    print(f"cpu: {os.cpu_count()} cores, python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
