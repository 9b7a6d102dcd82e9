"""reefine benchmark: what a step costs beyond its model calls, against baselines in the same run.

    python bench/reefine.py [--asks 5]

A real ``reef serve --recipe reefine`` in front of the scripted upstream (which answers the
proposer, the self-review, pi and the reviewer instantly, so what is measured is reef's own
work).  Printed, each with its baseline:

* an ask filed (``POST /reef/train``: screen + commit) against a report filed (commit only);
* the health check (the real pi with the candidate tree, routed through reef) against the same
  pi run pointed straight at the upstream with an empty tree;
* a whole step (ask → settled) against the sum of its parts' floors (the bare pi run).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from adapters.pi.health import find_pi, run_health  # noqa: E402
from tests.fakes.upstream import ScriptedUpstream, Text  # noqa: E402

S = "bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def step_answers(n: int) -> list[Text]:
    change = {
        "op": "create",
        "kind": "rule",
        "name": f"rule-{n}",
        "content": f"Rule number {n}: keep the change small.\n",
    }
    return [
        Text(json.dumps({"design": f"Add rule {n}.", "changes": [change]})),
        Text('{"verdict": "delivers", "missing": ""}'),
        Text("READY"),
        Text('{"implements_ask": true, "unrelated_changes": false, "reason": "ok"}'),
    ]


def bare_pi(upstream: str) -> float:
    files = {
        "models.json": json.dumps(
            {
                "providers": {
                    "reef": {
                        "baseUrl": f"{upstream}/v1",
                        "api": "openai-completions",
                        "apiKey": "REEF_API_KEY",
                        "models": [{"id": "m", "name": "m", "contextWindow": 128000, "maxTokens": 4096}],
                    }
                }
            }
        ).encode(),
        "settings.json": b'{"defaultProvider": "reef", "defaultModel": "m"}',
    }
    result = run_health(files, env={"REEF_API_KEY": "k"})
    if not result.passed:
        raise SystemExit(f"bare pi failed: {result.detail}")
    return result.seconds


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--asks", type=int, default=5)
    args = parser.parse_args()
    if find_pi() is None:
        raise SystemExit("pi 0.73.1 not found: run scripts/setup.sh")
    with ScriptedUpstream() as upstream, tempfile.TemporaryDirectory() as state:
        port = free_port()
        reef = subprocess.Popen(
            [sys.executable, "-m", "reef_cli", "serve", "--recipe", "reefine",
             "--reef.port", str(port), "--storage.state-dir", state,
             "--inference.upstream-url", upstream.url, "--inference.upstream-model", "m"],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    httpx.get(f"{url}/healthz").raise_for_status()
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            client = httpx.Client(base_url=url, headers={"x-reef-scenario": S}, timeout=60)

            # a receipt to report on, so the baseline write is a real report
            receipt = client.post(
                "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            ).headers["x-reef-agent-record-id"]
            bare, train, report, steps, health = [], [], [], [], []
            for n in range(args.asks):
                bare.append(bare_pi(upstream.url))
                upstream.script(*step_answers(n))
                t0 = time.perf_counter()
                filed = client.post("/reef/train", json={"text": f"rule number {n}"}).json()
                train.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                client.post("/reef/report", json={"score": 1, "references": [receipt]}).raise_for_status()
                report.append(time.perf_counter() - t0)
                progress_path = f"/reef/harness/requests/{filed['agent_record_id']}/progress"
                while True:
                    progress = client.get(progress_path).json()
                    if progress["state"] == "settled":
                        break
                    time.sleep(0.01)
                result = progress["result"]
                if result["release"] is None:
                    raise SystemExit(f"step {n} did not publish: {result['verdict']}")
                steps.append(time.perf_counter() - t0)
                record = client.get(f"/reef/scenarios/{S}/releases").json()
                metrics = next(s for s in record["steps"] if s["step"] == result["step"])["metrics"]
                health.append(metrics["health_seconds"])
        finally:
            reef.terminate()
            reef.wait(10)

    def row(label: str, value: float, base: float, base_label: str) -> None:
        ratio = value / base
        print(f"{label:<38} {value * 1000:9.1f} ms   {base_label:<30} {base * 1000:9.1f} ms   x{ratio:6.2f}")

    print(f"reefine, {args.asks} asks, medians (scripted model answers instantly)")
    row("POST /reef/train (screen + commit)", median(train), median(report), "POST /reef/report")
    row("health check (pi via reef, candidate)", median(health), median(bare), "bare pi -> upstream")
    row("whole step (ask -> settled)", median(steps), median(bare), "bare pi -> upstream")
    print(f"step time beyond the health check: {(median(steps) - median(health)) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
