"""What translating a real harness's request costs, against reading it at all.

    .venv/bin/python bench/harness_requests.py [--rounds 200]

For each request of ``tests/fixtures/harness_requests/`` (what pi, Claude Code, Codex and
opencode really send), times the work every proxied request does anyway, parsing its JSON, and
the translation the daemon adds for each kind of upstream that does not speak the harness's
API: the body in the upstream's API, serialised again (for Codex's Responses requests, with
``left_out``: what is left out and why, for the record).  Prints microseconds per request and
the translation's cost as a ratio of the parse, both measured in this run.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reef_core import jsonio
from reef_core.wire import translate
from reef_core.wire.responses_api import left_out, responses_request_to_chat

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "harness_requests"


def _codex_to_chat(body: dict[str, Any]) -> bytes:
    left_out(body)
    return jsonio.dumps(responses_request_to_chat(body))


def _codex_to_anthropic(body: dict[str, Any]) -> bytes:
    left_out(body)
    return jsonio.dumps(translate.openai_request_to_anthropic(responses_request_to_chat(body)))


#: per route the harness used: each translation the daemon may make, by the upstream it is for
TRANSLATIONS: dict[str, dict[str, Callable[[dict[str, Any]], bytes]]] = {
    "chat.completions": {"anthropic": lambda b: jsonio.dumps(translate.openai_request_to_anthropic(b))},
    "messages": {"chat": lambda b: jsonio.dumps(translate.anthropic_request_to_openai(b))},
    "responses": {"chat": _codex_to_chat, "anthropic": _codex_to_anthropic},
}


def per_call_us(work: Callable[[Any], object], given: Any, rounds: int) -> float:
    """Microseconds per ``work(given)``: the best of five runs of ``rounds`` calls."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(rounds):
            work(given)
        best = min(best, (time.perf_counter() - start) / rounds)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    rounds = parser.parse_args().rounds
    print(f"{'request':<36} {'KB':>5} {'parse us':>9} {'upstream':>9} {'translate us':>13} {'ratio':>6}")
    for path in sorted(FIXTURES.glob("*/*.json")):
        fixture = json.loads(path.read_text())
        raw = json.dumps(fixture["request"]).encode()
        body = jsonio.loads(raw)
        parse = per_call_us(jsonio.loads, raw, rounds)
        name = f"{path.parent.name}/{path.stem}"
        for upstream, work in TRANSLATIONS[fixture["route"]].items():
            cost = per_call_us(work, body, rounds)
            size = len(raw) / 1024
            print(f"{name:<36} {size:5.1f} {parse:9.1f} {upstream:>9} {cost:13.1f} {cost / parse:6.2f}")


if __name__ == "__main__":
    main()
