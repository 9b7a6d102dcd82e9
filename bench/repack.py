"""Repack benchmark: git CPU and bytes per record as a scenario grows.

    python bench/repack.py [--rounds 16] [--per-round 1500] [--quick]

Two scenarios are filled with the same records, written as the daemon writes them under load
(batches of 15, one small pack each).  After every round each is repacked, with git's CPU
time (user + system, the git children only) summed per record:

* ``geometric``: the baseline, what reef did before: ``git repack -d -F --geometric=2`` over
  the writer's packs, then ``git repack -d --geometric=2`` over git's.  git lists a
  geometric repack's objects by walking from every commit in the packs it merges down
  through the whole history, so each repack cost more as the scenario grew;
* ``walk``: what the packer does now (``reef_core/store/packer.py``): ``git pack-objects``
  walks from the data tip back to where the last compression stopped, and merges name
  their objects by id, so a repack costs what it packs.

It prints both per round (the git CPU per record of that round shows the growth), then the
totals and their ratio; ``git fsck`` checks both at the end.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.proxy import bench_parser, parsed
from reef_core.store import Store, StoreOptions
from reef_core.store.packer import GIT_COMMAND, compress, merge, run_git

REQUEST = {"model": "bench", "messages": [{"role": "user", "content": "Say hello in a short sentence."}]}


def record(n: int) -> dict:
    """A streamed exchange, shaped as the daemon records one (bench/proxy.py's load)."""
    return {
        "route": "chat.completions",
        "client_format": "openai",
        "upstream_format": "openai",
        "model": "bench",
        "stream": True,
        "status": 200,
        "complete": True,
        "error": None,
        "release": None,
        "tags": {"run": str(n % 13)},
        "timings": {"total_ms": 5.1 + n % 7, "ttfb_ms": 1.2},
        "request": REQUEST,
        "response": {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 1_700_000_000 + n,
            "model": "bench",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"Hello there, this is answer {n}."},
                    "finish_reason": "stop",
                }
            ],
        },
    }


def git_cpu() -> float:
    times = os.times()
    return times.children_user + times.children_system


def _keep_packs(repo: Path, *, with_rev: bool) -> list[str]:
    pack_dir = repo / "objects" / "pack"
    return [
        f"--keep-pack={p.name}"
        for p in sorted(pack_dir.glob("pack-*.pack"))
        if p.with_suffix(".rev").exists() == with_rev
    ]


def geometric(repo: Path) -> None:
    """The baseline: reef's two git repacks before the walk."""
    git = [*GIT_COMMAND, "-C", str(repo), "repack", "-d", "-q", "-n"]
    subprocess.run([*git, "-F", "--geometric=2", *_keep_packs(repo, with_rev=True)], check=True)
    subprocess.run([*git, "--geometric=2", *_keep_packs(repo, with_rev=False)], check=True)


def walk(repo: Path) -> None:
    run = functools.partial(run_git, repo)
    compress(repo, run)
    merge(repo, run)


def pack_bytes(repo: Path) -> int:
    return sum(p.stat().st_size for p in (repo / "objects" / "pack").iterdir())


def main() -> None:
    parser = bench_parser(__doc__, quick="8 rounds of 1,000")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--per-round", type=int, default=1500)
    args = parsed(parser, rounds=8, per_round=1000)
    strategies = {"geometric": geometric, "walk": walk}
    base = Path(tempfile.mkdtemp(prefix="reef-repack-bench-"))
    try:
        scenarios = {
            name: Store(base / str(i), StoreOptions(pack_every=0)).open("s", create=True)
            for i, name in enumerate(strategies)
        }
        cpu = dict.fromkeys(strategies, 0.0)
        written = 0
        for round_ in range(args.rounds):
            for first in range(written, written + args.per_round, 15):
                batch = [record(n) for n in range(first, min(first + 15, written + args.per_round))]
                futures = [s.append("record", r) for s in scenarios.values() for r in batch]
                for future in futures:
                    future.result()
            written += args.per_round
            line = [f"round {round_ + 1:2d} ({written:6d} records)"]
            for name, repack in strategies.items():
                repo = scenarios[name].path
                before = git_cpu()
                repack(repo)
                spent = git_cpu() - before
                cpu[name] += spent
                packs = len(list((repo / "objects" / "pack").glob("*.pack")))
                line.append(
                    f"{name}: {spent * 1e6 / args.per_round:4.0f} us/record, {packs} packs, "
                    f"{pack_bytes(repo) / written:4.0f} B/record"
                )
            print(" | ".join(line), flush=True)
        for scenario in scenarios.values():
            scenario.close()
            fsck = ["git", "-C", str(scenario.path), "fsck", "--no-dangling", "--no-progress"]
            subprocess.run(fsck, check=True, capture_output=True)
        per = {name: cpu[name] / written * 1e6 for name in strategies}
        size = {name: pack_bytes(scenarios[name].path) / written for name in strategies}
        print(
            f"git CPU per record: geometric {per['geometric']:.0f} us, walk {per['walk']:.0f} us "
            f"(ratio {per['walk'] / per['geometric']:.2f}); bytes per record: "
            f"{size['geometric']:.0f} vs {size['walk']:.0f} (ratio {size['walk'] / size['geometric']:.3f})"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
