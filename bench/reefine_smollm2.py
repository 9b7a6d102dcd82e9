"""reefine on SmolLM2-135M-Instruct, reef's own model: time per ask, model calls, verdicts.

    python bench/reefine_smollm2.py [--asks 3] [--max-tokens 1024]

Two real daemons in this process: the inner one serves ``builtin:smollm2`` and records every
call made to it; the outer one runs reefine (health check off) with the inner one as its model.
For each ask it prints the wall time, the model calls and the tokens they wrote, how many of the
structured answers are JSON their schema validates, and the verdict.  The baseline, in the same
run: the same asks on a reefine daemon whose model is the scripted upstream (instant answers), so
the ratio is what the local model costs over reef's own work.  Then one ask with reefine on the
daemon's in-process model (no inner daemon, nothing recorded): its time and verdict.

A 135M model's proposals are weak: this measures that the loop runs on a local model and that
its structured calls always parse, not the quality of what it proposes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.daemon.conftest import RunningReef  # noqa: E402
from tests.fakes.upstream import ScriptedUpstream, Text  # noqa: E402
from tests.upstream.schemas import violations  # noqa: E402

ASKS = [
    "answer in one short paragraph",
    "always run the tests before saying a change is done",
    "never push to the main branch",
    "add a command that writes a changelog entry",
]
RULE = {"op": "create", "kind": "rule", "name": "r{n}", "content": "Keep it short.\n"}
SCRIPTED = [
    Text(json.dumps({"design": "One rule.", "changes": [RULE]})),
    Text('{"verdict": "delivers", "missing": ""}'),
    Text('{"implements_ask": true, "unrelated_changes": false, "reason": "ok"}'),
]


def run_ask(reef: RunningReef, scenario: str, text: str) -> tuple[float, dict]:
    t0 = time.perf_counter()
    filed = httpx.post(f"{reef.url}/reef/train", json={"text": text}, headers={"x-reef-scenario": scenario})
    filed.raise_for_status()
    path = f"{reef.url}/reef/harness/requests/{filed.json()['agent_record_id']}/progress"
    while (progress := httpx.get(path, headers={"x-reef-scenario": scenario}).json())["state"] != "settled":
        time.sleep(0.05)
    return time.perf_counter() - t0, progress["result"]


def flags(max_tokens: int) -> list[str]:
    return ["--recipe.name", "reefine", "--recipe.config.health", "false",
            "--recipe.config.max-tokens", str(max_tokens)]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--asks", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=1024)
    args = parser.parse_args()
    asks = [ASKS[i % len(ASKS)] for i in range(args.asks)]
    with tempfile.TemporaryDirectory() as root:
        state, cache = Path(root), Path(root) / "model-cache"
        model = ["--inference.model-path", "builtin:smollm2", "--inference.model-cache", str(cache)]

        with ScriptedUpstream() as upstream:
            base = RunningReef(
                state / "base", *flags(args.max_tokens), "--inference.upstream-url", upstream.url
            ).start()
            baseline = []
            for n, text in enumerate(asks):
                upstream.script(*[Text(a.text.replace("{n}", str(n))) for a in SCRIPTED])
                baseline.append(run_ask(base, "base", text)[0])
            base.stop()

        inner = RunningReef(state / "inner", *model).start(timeout=600)
        outer = RunningReef(
            state / "outer", *flags(args.max_tokens), "--inference.upstream-url", f"{inner.url}/s/inner/v1"
        ).start()
        print(f"reefine on SmolLM2 through an inner reef, max-tokens {args.max_tokens}, {len(asks)} asks")
        print(f"{'ask':<52} {'seconds':>8} {'calls':>5} {'tokens':>6} {'valid':>6}  verdict")
        seen, times = 0, []
        for text in asks:
            seconds, result = run_ask(outer, "work", text)
            calls = httpx.get(f"{inner.url}/reef/scenarios/inner/records", params={"limit": 1000}).json()[
                "records"
            ]
            mine, seen = calls[: len(calls) - seen], len(calls)  # newest first
            tokens = sum(c["response"]["usage"]["completion_tokens"] for c in mine)
            valid = sum(_valid(c) for c in mine)
            times.append(seconds)
            row = f"{text[:52]:<52} {seconds:8.1f} {len(mine):5d} {tokens:6d} {valid:>3}/{len(mine):<2}"
            print(f"{row}  {result['verdict'][:90]}")
        outer.stop()
        inner.stop()
        print(
            f"median {statistics.median(times):.1f} s per ask against {statistics.median(baseline):.2f} s "
            f"with the scripted model: {statistics.median(times) / statistics.median(baseline):.0f}x"
        )

        own = RunningReef(state / "own", *model, *flags(args.max_tokens)).start(timeout=600)
        seconds, result = run_ask(own, "own", asks[0])
        own.stop()
        print(f"in-process (reefine on the daemon's own model): {seconds:.1f} s, {result['verdict'][:90]}")


def _valid(call: dict) -> bool:
    choice = call["response"]["choices"][0]
    if choice["finish_reason"] != "stop" or "response_format" not in call["request"]:
        return False
    try:
        value = json.loads(choice["message"]["content"])
    except ValueError:
        return False
    return violations(value, call["request"]["response_format"]["json_schema"]["schema"]) == []


if __name__ == "__main__":
    main()
