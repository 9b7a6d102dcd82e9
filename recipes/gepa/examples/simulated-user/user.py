"""The simulated user of this example, and what a GEPA step did, read back from git.

    python user.py round 1 --url http://127.0.0.1:8902 --scenario gepa-demo
    python user.py step --state .reef/gepa --scenario gepa-demo

``round N``: twelve sessions through reef's OpenAI route, as a harness sends them.  The user
(``bench/usage_sim.py``) has two wishes no task states: the tests run before the agent says
done, and a one-line summary first.  A session is two turns: a task, then a correction when the
first answer missed a wish (else thanks and the next task); every third session also gets a
report with the person's score and feedback, and the next-turn judge scores the others.  The
system prompt holds the served release's rules, as pi's ``AGENTS.md`` would
(``bench/usage.py``'s ``system_prompt``).

``step``: the newest step's record, from the scenario's repository (read-only): its verdict,
GEPA's archive (each member's parent, the component it rewrote, its validation scores), every
mutation tried, and the strict-improvement decision.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

from bench.usage import system_prompt  # noqa: E402
from bench.usage_sim import PREFERENCES, TASKS  # noqa: E402
from reef_core.harness import HarnessTree  # noqa: E402
from reef_core.store import Store  # noqa: E402

SESSIONS = 12


def send(client: httpx.Client, session: str, messages: list[dict[str, str]]) -> tuple[str, str]:
    """One request of ``session``; the answer and its receipt."""
    response = client.post(
        "/v1/chat/completions",
        json={"model": "sim", "messages": messages},
        headers={"x-reef-tag-session": session},
    )
    response.raise_for_status()
    return response.json()["choices"][0]["message"]["content"], response.headers["x-reef-agent-record-id"]


def play_round(url: str, scenario: str, number: int) -> None:
    client = httpx.Client(base_url=url, headers={"x-reef-scenario": scenario}, timeout=300)
    served = client.get("/reef/harness")
    release = None
    tree = HarnessTree.empty()
    if served.status_code == 200:
        release = served.json()["release"]
        tree = HarnessTree.from_files({p: t.encode() for p, t in served.json()["files"].items()})
    system = system_prompt(tree, release)
    scores = []
    for i in range(SESSIONS):
        session, n = f"round{number:02d}-{i}", number * SESSIONS + i
        opening = [{"role": "system", "content": system}, {"role": "user", "content": TASKS[n % len(TASKS)]}]
        first, receipt = send(client, session, opening)
        missed = [p for p in PREFERENCES if not p.met(first)]
        following = missed[0].correction if missed else f"Thanks. Next: {TASKS[(n + 5) % len(TASKS)]}"
        turn = [*opening, {"role": "assistant", "content": first}, {"role": "user", "content": following}]
        _, second = send(client, session, turn)
        scores.append(1 - len(missed) / len(PREFERENCES))
        if i % 3 == 0:  # the person's own report; the judge scores the rest from the next message
            body: dict[str, Any] = {"score": scores[-1], "references": [receipt, second]}
            if missed:
                body["feedback"] = missed[0].feedback
            client.post("/reef/report", json={**body, "metadata": {"session": session}}).raise_for_status()
    print(
        f"round {number} on {release or 'no release yet'}: {SESSIONS} sessions, "
        f"the user's mean score {statistics.mean(scores):.2f} (1 = both wishes met)"
    )


def show_step(state: Path, scenario: str) -> None:
    chain = Store(state).reader(scenario).releases
    stored = chain.candidates()[-1]
    gepa = stored.record.get("gepa") or {}
    print(f"step {stored.step}: {stored.verdict}")
    print(
        f"  on {gepa.get('base') or 'no release'}: {len(gepa.get('training', []))} training sessions, "
        f"{len(gepa.get('validation', []))} held-out ones validate"
    )
    for m in gepa.get("mutations", []):
        scores = (
            f"{sum(m.get('parent_scores', [])):g} -> {sum(m['child_scores']):g}"
            if "child_scores" in m
            else "-"
        )
        what = f"member {m['parent']}'s {m['component']}"
        print(f"  mutation {m['iteration']}: {what}, minibatch {scores}: {m['why']}")
    for member in gepa.get("archive", []):
        print(
            f"  archive member {member['id']} (parent {member['parent']}): validation mean "
            f"{member['mean']:.2f}, best on {member['fronts']} held-out session(s)"
        )
    decision = gepa.get("decision") or {}
    if decision:
        print(
            f"  decision: member {decision['best']} at {decision['best_score']:.2f} against the release's "
            f"{decision['release_score']:.2f}: {'publish' if decision['improves'] else 'nothing to publish'}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("round", "step"))
    parser.add_argument("number", nargs="?", type=int, default=1)
    parser.add_argument("--url", default="http://127.0.0.1:8902")
    parser.add_argument("--state", type=Path, default=Path(".reef/gepa"))
    parser.add_argument("--scenario", default="gepa-demo")
    args = parser.parse_args()
    if args.what == "round":
        play_round(args.url, args.scenario, args.number)
    else:
        show_step(args.state, args.scenario)


if __name__ == "__main__":
    main()
