"""What reefine's risk screen costs, on ordinary lessons and on text an attacker chose.

    python bench/risks.py [--size 60000]

``recipes/reefine/risks.py`` runs its regexes over every edit a usage step would publish, and
the text comes from sessions anyone could have written, so a pattern that backtracks
quadratically would let one tool output stall the learner.  Printed, per input: the screen's
time, and its ratio to one ``str.lower()`` plus one ``re.findall(r"[a-z0-9]+")`` over the same
text (a linear scan measured in the same run, the baseline), at ``--size`` characters and at a
tenth of it.  A ratio that stays flat from the tenth to the whole size is linear; one that grows
tenfold is quadratic.  Exits 1 when a hostile input's ratio grows more than 3x from the tenth
to the whole (a quadratic pattern).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from recipes.reefine.risks import risks  # noqa: E402

_WORD = re.compile(r"[a-z0-9]+")
UNITS = {
    "dots": "a.",
    "digits": "1.",
    "ats": "a@",
    "backticks": "`",
    "finds": "find ",
    "git-pushes": "git push ",
    "lesson": "Run the tests before saying done. ",
}


def best(run: Callable[[], object], rounds: int = 3) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def baseline(text: str) -> None:
    _WORD.findall(text.lower())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=60_000, help="characters of each input")
    args = parser.parse_args()
    print(f"{'input':<12} {'chars':>7} {'screen ms':>10} {'baseline ms':>12} {'ratio':>7}  growth")
    failed = []
    for name, unit in UNITS.items():
        ratios = []
        for size in (args.size // 10, args.size):
            text = unit * max(1, size // len(unit))
            screen, base = best(lambda t=text: risks(t)), best(lambda t=text: baseline(t))
            ratios.append(screen / base)
            growth = f"{ratios[-1] / ratios[0]:.1f}x" if len(ratios) == 2 else ""
            row = f"{name:<12} {len(text):>7} {screen * 1000:>10.2f} {base * 1000:>12.3f}"
            print(f"{row} {ratios[-1]:>7.1f}  {growth}")
        if name != "lesson" and ratios[1] / ratios[0] > 3:
            failed.append(name)
    if failed:
        print(f"quadratic: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
