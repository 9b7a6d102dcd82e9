"""Cookbook: the sao recipe on SmolLM2, its held-out curve against the base model's in one run.

    python bench/cookbook_sao.py [--seconds 210]

A real daemon serves ``builtin:smollm2`` with ``recipes.sao.recipe:SAORecipe`` (LoRA, on the
CPU).  A simulated user with a hidden preference (answers that open with "Sure", the demo's:
``reef_cli.demo_user``) asks one training request at a time, sampled at temperature 1 and 8
tokens long, scores it 1 or 0, reports it on its receipt and waits while the step runs: each
scored rollout is one step, and the next rollout is answered by what it published.  After each
new release it measures the held-out score: the share of the greedy answers (temperature 0,
unrecorded) to the 24 held-out requests, asked for things no training request asks for, that
open with "Sure".  The baseline is the same measure on v1, the base model before any step, in
the same run.  :func:`run` returns the lines it prints.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reef_cli.demo_user import parse_preference, requests  # noqa: E402
from tests.daemon.conftest import RunningReef  # noqa: E402

SCENARIO = "sao-cookbook"
PREFERENCE = parse_preference("starts-with:Sure")
FLAGS = ("--recipe.implementation", "recipes.sao.recipe:SAORecipe", "--recipe.config.failure-streak", "1000")


async def _heldout(url: str, prompts: list[str]) -> float:
    """The share of greedy answers to ``prompts`` the user likes (not recorded, never trained on)."""
    headers = {"x-reef-scenario": SCENARIO, "x-reef-capture": "false"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=300) as client:

        async def one(prompt: str) -> float:
            body = {
                "model": "builtin:smollm2",
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": 3,
                "temperature": 0,
            }
            answer = await client.post("/v1/chat/completions", json=body)
            answer.raise_for_status()
            return PREFERENCE.score(answer.json()["choices"][0]["message"]["content"] or "")

        scores = await asyncio.gather(*(one(p) for p in prompts))
    return sum(scores) / len(scores)


def _state(client: httpx.Client) -> str | None:
    for row in client.get("/reef/status").json()["scenarios"]:
        if row["name"] == SCENARIO:
            return (row.get("learning") or {}).get("state")
    return None


def _settle(client: httpx.Client, patience: float = 1.5) -> None:
    """Wait for the step a report starts (if it starts one within ``patience`` s) to end."""
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline and _state(client) != "stepping":
        time.sleep(0.05)
    while _state(client) == "stepping":
        time.sleep(0.1)


def run(seconds_budget: int = 210) -> list[str]:
    started = time.monotonic()
    lines: list[str] = []
    heldout = sorted(set(requests(n=200, held_out=True)))
    train = requests(seed=0, n=10_000)
    with tempfile.TemporaryDirectory(prefix="reef-cookbook-sao-") as root:
        cache = ROOT / ".cache" / "models"  # SmolLM2's conversion, kept between runs
        reef = RunningReef(
            Path(root),
            "--inference.model-path",
            "builtin:smollm2",
            "--inference.model-cache",
            str(cache),
            *FLAGS,
        ).start(timeout=600)
        client = httpx.Client(base_url=reef.url, headers={"x-reef-scenario": SCENARIO}, timeout=300)
        try:
            client.post("/reef/scenarios", json={"name": SCENARIO}).raise_for_status()
            while not client.get(f"/reef/scenarios/{SCENARIO}/releases").json()["releases"]:
                time.sleep(0.2)
            baseline = asyncio.run(_heldout(reef.url, heldout))
            curve: list[tuple[str, int, float]] = [("v1", 0, baseline)]
            reports = liked = 0
            rollout_seconds: list[float] = []
            while time.monotonic() - started < seconds_budget:
                body = {
                    "model": "builtin:smollm2",
                    "messages": [{"role": "user", "content": train[reports]}],
                    "max_tokens": 8,
                    "temperature": 1.0,
                    "seed": reports,
                }
                asked = time.perf_counter()
                answer = client.post("/v1/chat/completions", json=body)
                answer.raise_for_status()
                rollout_seconds.append(time.perf_counter() - asked)
                score = PREFERENCE.score(answer.json()["choices"][0]["message"]["content"] or "")
                report = {"score": score, "references": [answer.headers["x-reef-agent-record-id"]]}
                client.post("/reef/report", json=report).raise_for_status()
                reports, liked = reports + 1, liked + int(score)
                _settle(client)
                tip = client.get(f"/reef/scenarios/{SCENARIO}/releases").json()["releases"][0]["release"]
                if tip != curve[-1][0]:
                    curve.append((tip, reports, asyncio.run(_heldout(reef.url, heldout))))
            steps = client.get(f"/reef/scenarios/{SCENARIO}/releases").json()["steps"]
            records = [c.record for c in reef.reader(SCENARIO).releases.candidates()]
        finally:
            client.close()
            reef.stop()
    selected = sum(1 for s in steps if s["verdict"] == "selected")
    lines.append(
        f"sao on builtin:smollm2 (LoRA, CPU): {reports} scored rollouts ({liked} liked), "
        f"{len(steps)} steps, {selected} selected, {time.monotonic() - started:.0f} s"
    )
    lines.append(
        f"held-out: greedy answers to {len(heldout)} requests never trained on that open with 'Sure'"
    )
    if records:
        median = statistics.median
        step = median(r["seconds"] for r in records)
        training = median(r["metrics"]["train_seconds"] for r in records)
        checks = median(sum(c["seconds"] for c in r["checks"]) for r in records)
        lines.append(
            f"a step: {step:.1f} s median (training {training:.1f} s, checks {checks:.1f} s); "
            f"a rollout of 8 tokens: {median(rollout_seconds):.2f} s"
        )
    lines.append("release  after reports  held-out score")
    lines.extend(f"{name:<8} {after:>13}  {score:.3f}" for name, after, score in curve)
    best = max(score for _n, _a, score in curve)
    lines.append(
        f"baseline (v1, the base model, this run) {baseline:.3f}; last {curve[-1][2]:.3f} "
        f"({curve[-1][2] - baseline:+.3f}); best {best:.3f} ({best - baseline:+.3f})"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=210)
    for line in run(parser.parse_args().seconds):
        print(line)


if __name__ == "__main__":
    main()
