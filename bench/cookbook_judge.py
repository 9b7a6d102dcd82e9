"""Cookbook: grpo trained by the next-turn judge on SmolLM2, against the base model in one run.

    python bench/cookbook_judge.py [--seconds 210]

A real daemon serves ``builtin:smollm2`` with grpo and ``recipe.config.reward judge`` (LoRA, on
the CPU); the judge is a scripted OpenAI-compatible endpoint (``tests/fakes/upstream.py``, real
HTTP, ``recipe.config.judge-url``) that accepts an answer opening with "Sure" and corrects the
others.  A simulated user opens sessions and never scores anything: each session is one request
(sampled at temperature 1, 4 tokens) and then the user's next message, which reacts to the
answer ("Thanks!" when it opens with "Sure", a correction otherwise); reef judges the first
answer by it.  After 12 sessions on the two requests the recipe holds out, rounds of 10 (8 on
one training request, 2 held out) until the budget ends or every held-out answer opens with
"Sure"; the user waits while a step runs.

After each new release, the held-out score: the share of answers to 6 requests no session
trains on, 4 sampled answers each with the same seeds for every release (unrecorded), that open
with "Sure".  The baseline is the same measure on v1, the base model before any step, in the same
run.  Also printed: the recipe's own held-out estimate per step (the gate's), and how many reports
the user wrote (none: every report is a verdict the judge stored).  :func:`run` returns the lines.

The simulated user and the scripted judge live here; ``tests/recipes/test_grpo_judge_reward.py``
uses them too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reef_core.sessions import is_explicit  # noqa: E402
from tests.daemon.conftest import RunningReef  # noqa: E402
from tests.fakes.upstream import ScriptedUpstream, Text  # noqa: E402

# With this system message SmolLM2 opens about four answers in ten to these requests with "Sure"
# (temperature 1); the prompt is 26 tokens (the default system message makes it 39).  With
# heldout-every 2, grpo trains on TRAIN's answers and holds HELD's out (a prompt's group is a
# hash of its token ids).
SYSTEM = "Be brief."
TRAIN = "Can you give me a recipe for soup?"
HELD = ("Can you give me a recipe for bread?", "Can you give me a recipe for pasta?")
#: what the held-out score asks: HELD, and four more requests no session asks
MEASURE = (
    *HELD,
    *(f"Can you give me {t}?" for t in ("a recipe for rice", "a list of fruits", "a cake", "pancakes")),
)
THANKS = "Thanks!"
CORRECTION = "No. Start with Sure."
SCENARIO = "judged"
#: grpo with the judge's rewards: one group of 8 answers a step, in one forward and backward
GRPO = (
    "--recipe", "grpo",
    "--recipe.config.reward", "judge",
    "--recipe.config.group-size", "8",
    "--recipe.config.groups-per-step", "1",
    "--recipe.config.heldout-every", "2",
    "--recipe.config.heldout-min", "12",
    "--recipe.config.lr", "2e-3",
    "--recipe.config.micro-batch", "8",
    "--recipe.config.poll-seconds", "0.2",
)  # fmt: skip


def round_prompts(n: int) -> list[str]:
    """Round ``n``'s requests: the training request 8 times, a held-out one twice (an empty
    answer opens no turn to judge, so the held-out set must not hang on exactly 12 verdicts)."""
    return [TRAIN] * 8 + [HELD[n % 2]] * 2


def opens_with_sure(text: str) -> bool:
    return text.strip().startswith("Sure")


def judge(route: str, body: dict[str, Any]) -> Text:
    """The scripted judge (a ``ScriptedUpstream`` responder): accept an answer that opens with
    "Sure", correct the others; the answer is read where the judge's prompt quotes it."""
    prompt = body["messages"][-1]["content"]
    quoted = prompt.split("The agent's answer:\n", 1)[1].split("\n\nThe person's next message:", 1)[0]
    verdict = "accept" if opens_with_sure(json.loads(quoted)) else "correct"
    return Text(json.dumps({"verdict": verdict, "reason": f"the person's reaction: {verdict}"}))


async def session(client: httpx.AsyncClient, name: str, prompt: str, seed: int) -> str:
    """One session: the request (sampled with ``seed``, so a run repeats), then the user's
    reaction to the answer in their next message; the first answer's receipt."""
    headers = {"x-reef-tag-session": name}
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
    body = {"model": "smollm2", "messages": messages, "max_tokens": 4, "temperature": 1.0, "seed": seed}
    first = await client.post("/v1/chat/completions", json=body, headers=headers)
    first.raise_for_status()
    answer = first.json()["choices"][0]["message"]["content"] or ""
    messages += [
        {"role": "assistant", "content": answer},
        {"role": "user", "content": THANKS if opens_with_sure(answer) else CORRECTION},
    ]
    second = await client.post(
        "/v1/chat/completions",
        json={"model": "smollm2", "messages": messages, "max_tokens": 1},
        headers=headers,
    )
    second.raise_for_status()
    return str(first.headers["x-reef-agent-record-id"])


async def sessions(client: httpx.AsyncClient, prompts: list[str], round: int) -> None:
    """One round: a session for each of ``prompts``, at once (the engine batches them)."""
    await asyncio.gather(
        *(session(client, f"r{round}-{i}", p, 100 * round + i) for i, p in enumerate(prompts))
    )


def learning(reef: RunningReef) -> dict[str, Any]:
    """The scenario's worker as ``/reef/status`` shows it (one scenario per daemon here)."""
    rows = httpx.get(f"{reef.url}/reef/status").json()["scenarios"]
    return dict(rows[0]["learning"]) if rows else {}


async def idle(reef: RunningReef) -> None:
    """Wait while the worker steps (a person waits for the step; so does the CPU)."""
    while (await asyncio.to_thread(learning, reef)).get("state") == "stepping":
        await asyncio.sleep(0.2)


def records(reef: RunningReef, scenario: str = SCENARIO) -> list[dict[str, Any]]:
    """The step records of ``scenario``'s candidates, oldest first."""
    return [
        {**c.record, "step": c.step, "verdict": c.verdict}
        for c in reef.reader(scenario).releases.candidates()
    ]


async def heldout_score(client: httpx.AsyncClient, samples: int = 4) -> float:
    """The share of sampled answers to :data:`MEASURE` that open with "Sure" (fixed seeds,
    unrecorded: measuring never feeds training)."""
    headers = {"x-reef-capture": "false"}

    async def one(prompt: str, seed: int) -> bool:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
        body = {"model": "smollm2", "messages": messages, "max_tokens": 2, "temperature": 1.0, "seed": seed}
        answer = await client.post("/v1/chat/completions", json=body, headers=headers)
        answer.raise_for_status()
        return opens_with_sure(answer.json()["choices"][0]["message"]["content"] or "")

    liked = await asyncio.gather(*(one(p, 7000 + k) for p in MEASURE for k in range(samples)))
    return sum(liked) / len(liked)


def run(seconds_budget: int = 210) -> list[str]:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="reef-cookbook-judge-") as root, ScriptedUpstream() as endpoint:
        endpoint.responder = judge
        reef = RunningReef(
            Path(root),
            "--inference.model-path", "builtin:smollm2",
            "--inference.model-cache", str(ROOT / ".cache" / "models"),  # SmolLM2's conversion, kept
            *GRPO,
            "--recipe.config.judge-url", endpoint.url,
        ).start(timeout=600)  # fmt: skip

        async def teach() -> tuple[float, list[tuple[str, int, float]], int]:
            headers = {"x-reef-scenario": SCENARIO}
            async with httpx.AsyncClient(base_url=reef.url, headers=headers, timeout=300) as client:
                await sessions(client, [HELD[0]] * 6 + [HELD[1]] * 6, 0)
                baseline = await heldout_score(client)
                curve, n = [("v1", 0, baseline)], 0
                while time.monotonic() - started < seconds_budget:
                    n += 1
                    await sessions(client, round_prompts(n), n)
                    await asyncio.sleep(0.5)  # the worker looks every 0.2 s
                    await idle(reef)
                    tip = (await client.get(f"/reef/scenarios/{SCENARIO}/releases")).json()["releases"][0]
                    if tip["release"] != curve[-1][0]:
                        curve.append((tip["release"], 12 + 10 * n, await heldout_score(client)))
                        if curve[-1][2] == 1.0:
                            break  # every held-out answer opens with "Sure": nothing left to learn
                return baseline, curve, 12 + 10 * n

        try:
            baseline, curve, asked = asyncio.run(teach())
            steps = records(reef)
            stored = [item.data for item in reef.reader(SCENARIO).data.iter_items(["report"])]
            status = learning(reef).get("recipe") or {}
        finally:
            reef.stop()
    written = [r for r in stored if is_explicit(r)]
    accepted = sum(1 for r in stored if (r.get("metadata") or {}).get("verdict") == "accept")
    selected = [s for s in steps if s["verdict"] == "selected"]
    lines = [
        f"grpo, reward judge, on builtin:smollm2 (LoRA, CPU): {asked} sessions, "
        f"{time.monotonic() - started:.0f} s",
        f"reports the user wrote: {len(written)}; verdicts the judge stored: {len(stored)} "
        f"({accepted} accept, {len(stored) - accepted} correct; "
        f"{status.get('judge_failures', 0)} judge failures)",
        f"steps: {len(steps)}, selected {len(selected)}, rejected {len(steps) - len(selected)}",
        f"held-out: sampled answers to {len(MEASURE)} requests no session trains on (4 each, "
        "the same seeds every release) that open with 'Sure'",
        "release  after sessions  held-out score",
    ]
    lines += [f"{name:<8} {after:>14}  {score:.3f}" for name, after, score in curve]
    best = max(score for _n, _a, score in curve)
    lines.append(
        f"baseline (v1, the base model, this run) {baseline:.3f}; last {curve[-1][2]:.3f} "
        f"({curve[-1][2] - baseline:+.3f}); best {best:.3f} ({best - baseline:+.3f})"
    )
    lines.append("the gate's own held-out estimate (served -> candidate), per step:")
    for s in steps:
        metrics = s["checks"][0]["metrics"] if s.get("checks") else {}
        if "heldout_current" in metrics:
            lines.append(
                f"  step {s['step']}: {metrics['heldout_current']:.3f} -> {metrics['heldout_candidate']:.3f} "
                f"({s['verdict'][:40]}; rewards {s.get('rewards')})"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=210, help="the budget, in seconds")
    for line in run(parser.parse_args().seconds):
        print(line)


if __name__ == "__main__":
    main()
