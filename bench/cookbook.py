"""Cookbook: each cookbook recipe's curve against its own baseline, measured in the same run.

    python bench/cookbook.py [--only gepa,sao,judge] [--seconds 210]

One section a recipe, one after the other (never two at once: they share two cores):

- ``gepa`` (``bench/cookbook_gepa.py``): the simulated user's mean score per round with GEPA
  learning the harness's rules from their sessions, beside no learning and beside reefine's
  usage learning on the same sessions (the scripted rule-following model: a simulation);
- ``sao`` (``bench/cookbook_sao.py``): SmolLM2 with LoRA, one scored rollout a step; the
  held-out share of greedy answers that open with "Sure", per release, against v1 (the base);
- ``judge`` (``bench/cookbook_judge.py``): grpo with ``recipe.config.reward judge`` on SmolLM2;
  a simulated user who only ever writes their next message, judged by a scripted judge; the
  held-out curve against the base model, and how many reports the user wrote (none).

``--seconds`` is each section's budget; each prints what it measured and its baseline.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import cookbook_gepa, cookbook_judge, cookbook_sao  # noqa: E402
from bench.proxy import bench_parser  # noqa: E402  (one copy of each, shared)

SECTIONS: dict[str, Callable[[int], list[str]]] = {
    "gepa": cookbook_gepa.run,
    "sao": cookbook_sao.run,
    "judge": cookbook_judge.run,
}


def main() -> None:
    parser = bench_parser(__doc__, quick="60 seconds a section")
    parser.add_argument("--only", default=",".join(SECTIONS), help="the sections, comma-separated")
    parser.add_argument("--seconds", type=int, default=210, help="each section's budget")
    args = parser.parse_args()
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in SECTIONS]
    if unknown:
        parser.error(f"no section {', '.join(unknown)}: choose from {', '.join(SECTIONS)}")
    seconds = 60 if args.quick else args.seconds
    for name in chosen:
        started = time.monotonic()
        print(f"== {name} ==", flush=True)
        for line in SECTIONS[name](seconds):
            print(line, flush=True)
        print(f"({name}: {time.monotonic() - started:.0f} s)\n", flush=True)


if __name__ == "__main__":
    main()
