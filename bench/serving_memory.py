"""Serving memory: the resident size of a ``reef serve`` on SmolLM2, idle and serving, for this
tree and (``--before DIR``) another checkout of reef, one after the other in the same run.

    python bench/serving_memory.py [--before DIR] [--concurrent 8] [--max-tokens 48]

Each daemon loads ``builtin:smollm2`` from the same converted cache (``.cache/bench-models``),
answers one warm-up request, and its ``VmRSS`` is read from /proc (idle); then ``--concurrent``
sampled requests are sent at once, twice, and its ``VmHWM`` (the peak since it started, the
model's loading included) and ``VmRSS`` are read again.  ``--before`` runs the other checkout's
code through ``PYTHONPATH`` with this tree's interpreter and packages.  Linux only; figures are
printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.serving import PROMPTS, body, serving_reef  # noqa: E402

MB = 1e6


def _status(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024 / MB
    return fields


def measure(tree: Path | None, concurrent: int, max_tokens: int) -> dict[str, float]:
    """``{idle, serving, peak}`` in MB for a daemon running ``tree``'s code (this one: None)."""
    saved = os.environ.get("PYTHONPATH")
    if tree is not None:
        os.environ["PYTHONPATH"] = str(tree)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="reef-bench-memory-") as state,
            serving_reef(state) as (proc, url),
        ):

            async def ask(count: int) -> None:
                async with httpx.AsyncClient(timeout=600, headers={"x-reef-scenario": "bench"}) as client:
                    replies = await asyncio.gather(
                        *(
                            client.post(f"{url}/v1/chat/completions", json=body(p, i, max_tokens, False))
                            for i, p in enumerate((PROMPTS * 4)[:count])
                        )
                    )
                    for reply in replies:
                        reply.raise_for_status()

            asyncio.run(ask(1))
            idle = _status(proc.pid)["VmRSS"]
            asyncio.run(ask(concurrent))
            asyncio.run(ask(concurrent))
            after = _status(proc.pid)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    return {"idle": idle, "serving": after["VmRSS"], "peak": after["VmHWM"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another checkout of reef, measured first")
    parser.add_argument("--concurrent", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    runs = [("before", args.before.resolve())] if args.before else []
    runs.append(("this tree", None))
    results = [(name, measure(tree, args.concurrent, args.max_tokens)) for name, tree in runs]
    base = results[0][1]
    print(f"reef serve on SmolLM2, {args.concurrent} concurrent requests of {args.max_tokens} tokens, twice")
    print(f"{'':12} {'idle MB':>8} {'after MB':>9} {'peak MB':>8} {'peak vs first':>14}")
    for name, r in results:
        ratio = r["peak"] / base["peak"]
        print(f"{name:12} {r['idle']:8.0f} {r['serving']:9.0f} {r['peak']:8.0f} {ratio:13.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
