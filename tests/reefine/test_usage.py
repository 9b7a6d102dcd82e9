"""reefine learns from how the harness is used: sessions, feedback, the judge, the replay gate.

Real daemon, real git, the real pi (through reef-pi) for the sessions a person scores in pi;
the official OpenAI SDK for the held-out sessions (a session is what shares the
``x-reef-tag-session`` header).  The scripted upstream plays every model part by what it is
asked (``usage_roles.Roles``): no capable model runs here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.adapters.conftest import SCENARIO, Machine
from tests.daemon.conftest import RunningReef
from tests.fakes.upstream import ScriptedUpstream
from tests.reefine.conftest import ask, settle
from tests.reefine.usage_roles import DONE, LESSON, POISON, Roles, held, kept

pytestmark = pytest.mark.e2e

SHARE = 0.3
TASK = "fix the failing test in app.py"
FEEDBACK = "please always run the tests before saying done"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def roles(upstream: ScriptedUpstream) -> Iterator[Roles]:
    played = Roles()
    upstream.responder = played
    yield played
    upstream.responder = None


@pytest.fixture
def machine(tmp_path: Path, reefine) -> Machine:
    from tests.reefine.pi import require_pi

    return Machine(tmp_path / "machine", require_pi().path)


def usage_reef(reefine, *flags: str):
    return reefine(
        "--recipe.config.usage-min-sessions", "100",  # steps only on `reef learn` in these tests
        "--recipe.config.held-out-share", str(SHARE),
        *flags,
    )  # fmt: skip


def chat(
    reef, session: str, *turns: str, tool: str | None = None, headers: dict[str, str] | None = None
) -> list[str]:
    """A session through the OpenAI SDK: each turn carries the conversation so far; ``tool``
    puts a tool's output before the first answer.  Returns the receipts."""
    client = openai.OpenAI(
        base_url=f"{reef.url}/v1",
        api_key="k",
        default_headers={"x-reef-scenario": SCENARIO, "x-reef-tag-session": session, **(headers or {})},
    )
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    receipts = []
    for n, text in enumerate(turns):
        messages.append({"role": "user", "content": text})
        if n == 0 and tool is not None:
            call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
            messages += [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": tool},
            ]
        raw = client.chat.completions.with_raw_response.create(model="scripted-model", messages=messages)
        receipts.append(raw.headers["x-reef-agent-record-id"])
        messages.append({"role": "assistant", "content": raw.parse().choices[0].message.content})
    return receipts


def report(reef, receipts: list[str], score: float, feedback: str | None = None, session: str | None = None):
    body = {"score": score, "references": receipts, "metadata": {"source": "user", "session": session}}
    if feedback:
        body["feedback"] = feedback
    response = httpx.post(f"{reef.url}/reef/report", json=body, headers={"x-reef-scenario": SCENARIO})
    assert response.status_code == 200, response.text


def held_out_sessions(reef, count: int, prefix: str = "held") -> list[str]:
    """Sessions the gate replays: the agent said done without the tests; the person said so."""
    names = held(SHARE, count, prefix)
    for name in names:
        report(reef, chat(reef, name, TASK), 0.0, "you never ran the tests", session=name)
    return names


def learned_sessions(reef, count: int, prefix: str = "learn", **kw: Any) -> list[str]:
    names = kept(SHARE, count, prefix)
    for name in names:
        report(reef, chat(reef, name, TASK, **kw), 0.0, FEEDBACK, session=name)
    return names


def learn(reef, timeout: float = 120) -> dict[str, Any]:
    """POST …/learn, then follow the ticket until the step settles."""
    response = httpx.post(f"{reef.url}/reef/scenarios/{SCENARIO}/learn", json={})
    assert response.status_code == 202, response.text
    path = response.json()["progress_path"]
    deadline = time.monotonic() + timeout
    while True:
        state = httpx.get(f"{reef.url}{path}").json()
        if state["state"] == "settled":
            return state["result"]
        assert time.monotonic() < deadline, f"the learn step is still {state['state']}"
        time.sleep(0.1)


def step_record(reef, step: int) -> dict[str, Any]:
    """The record of step ``step`` as stored on its candidate ref."""
    return reef.reader(SCENARIO).releases.candidate(step).record


def releases(reef) -> list[str]:
    listing = httpx.get(f"{reef.url}/reef/scenarios/{SCENARIO}/releases").json()
    return [r["release"] for r in listing["releases"]]


def wait_for(predicate, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def items(reef, kind: str) -> list[dict[str, Any]]:
    got = httpx.get(f"{reef.url}/reef/scenarios/{SCENARIO}/items", params={"kind": kind, "limit": 1000})
    return got.json()["items"]


# -- the simulated user, end to end -----------------------------------------------------------------


def test_a_person_scores_pi_sessions_and_reef_learn_publishes_the_lesson_past_the_replay_gate(
    reefine, upstream: ScriptedUpstream, roles: Roles, machine: Machine
):
    reef = usage_reef(reefine)
    machine.install(reef)
    roles.malformed = 1  # the first reflection is prose: sent back once with the reason
    # sessions in the real pi: one the person marks /bad with feedback, one the judge scores
    scored, judged = kept(SHARE, 2, "pi")
    run = machine.reef_pi("-p", TASK, "/bad", f"/feedback {FEEDBACK}", REEF_SESSION=scored)
    assert run.returncode == 0, run.stderr
    assert "reef: /bad noted as rep_" in run.stderr and "reef: feedback noted as rep_" in run.stderr
    run = machine.reef_pi("-p", TASK, "that's wrong, you did not run the tests", REEF_SESSION=judged)
    assert run.returncode == 0, run.stderr
    wait_for(lambda: any(r["metadata"].get("source") == "judge" for r in items(reef, "report")))
    verdict = next(r for r in items(reef, "report") if r["metadata"].get("source") == "judge")
    assert verdict["score"] == 0.25 and verdict["metadata"]["verdict"] == "correct"
    assert verdict["metadata"]["session"] == judged
    assert verdict["references"] == _run_receipts(reef, judged)[:1]  # the judged answer's receipt
    assert roles.calls["judge"] == 1  # one turn followed another once: one judge call
    outsiders = held_out_sessions(reef, 5)

    # `reef learn`, as a person types it
    cli = subprocess.run(
        [sys.executable, "-m", "reef_cli", "learn", SCENARIO, "--url", reef.url],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert "v1 now serves" in cli.stdout, cli.stdout

    repo = reef.repo(SCENARIO)
    rules = git("--git-dir", repo, "show", "v1:rules/learned.md")
    assert f"- [L1] {LESSON}" in rules
    manifest = json.loads(git("--git-dir", repo, "show", "v1:reef-release.json"))
    assert manifest["learned_from"] == {"kind": "usage", "sessions": 2, "reports": 3, "lessons": 1}

    record = step_record(reef, 1)
    used = {s["session"] for s in record["usage"]["sessions"]}
    assert used == {scored, judged}  # the held-out sessions are never learned from
    assert not used & set(outsiders)
    lesson = record["usage"]["lessons"][0]
    assert lesson["instead"] == LESSON and lesson["evidence"][0]["source"] in ("feedback", "user")
    replay = next(c for c in record["checks"] if c["name"] == "replay")
    assert replay["passed"] and replay["data"]["wins"] == 5 and replay["data"]["losses"] == 0
    row = replay["data"]["table"][0]
    assert row["session"] in outsiders and row["current"] == DONE and "ran the tests" in row["candidate"]
    assert [v["prefers"] for v in row["verdicts"]] == ["candidate", "candidate"]
    assert [c["name"] for c in record["checks"]] == ["well_formed", "screens", "health", "reviewer", "replay"]

    # structured output: every reefine call asked for a schema; the prose answer was sent back
    for role in ("judge", "reflect", "curate", "review", "pairwise"):
        assert all("response_format" in body for body in roles.requests[role]), role
    retried = roles.requests["reflect"][1]["messages"][-1]["content"]
    assert retried.startswith("That answer could not be used")

    page = httpx.get(f"{reef.url}/reef/harness/releases/1/page", params={"scenario": SCENARIO}).text
    assert "Replay" in page and "I ran the tests" in page and row["session"] in page
    # the served model now says it ran the tests in a new pi session: the rule reached pi
    assert machine.reef_pi("update").returncode == 0
    after = machine.reef_pi("-p", TASK)
    assert after.returncode == 0 and "ran the tests" in after.stdout


def _run_receipts(reef, run: str) -> list[str]:
    got = httpx.get(f"{reef.url}/reef/scenarios/{SCENARIO}/records", params={"tag": f"run:{run}"})
    return [r["id"] for r in got.json()["records"]]


# -- the replay gate ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pairwise", "why"),
    [
        ("prefers-current", "does not win significantly: 0 win(s), 5 loss(es)"),
        ("tie", "not enough evidence: 0 win(s), 0 loss(es), 5 tie(s)"),
        ("error", "replay"),
    ],
)
def test_a_candidate_that_loses_ties_or_meets_a_failing_judge_is_not_published(
    reefine, roles: Roles, pairwise: str, why: str
):
    reef = usage_reef(reefine, "--recipe.config.health", "false")
    roles.pairwise = pairwise
    learned_sessions(reef, 2)
    held_out_sessions(reef, 5)
    result = learn(reef)
    assert result["verdict"] == "rejected: replay" and result["release"] is None
    replay = next(c for c in result["checks"] if c["name"] == "replay")
    assert why in replay["detail"] if pairwise != "error" else replay["detail"].startswith("error:")
    assert releases(reef) == []  # the current (empty) harness keeps serving


def test_too_few_held_out_sessions_is_not_enough_evidence_and_a_win_publishes(reefine, roles: Roles):
    reef = usage_reef(reefine, "--recipe.config.health", "false")
    learned_sessions(reef, 2)
    held_out_sessions(reef, 3)
    result = learn(reef)
    replay = next(c for c in result["checks"] if c["name"] == "replay")
    assert result["release"] is None
    assert replay["detail"].startswith("not enough evidence: 3 held-out session(s)")
    assert "at least 5 are needed at this gate's level 0.05 (confidence 0.9)" in replay["detail"]
    # two more held-out sessions, new material: now the candidate wins and is published
    held_out_sessions(reef, 5)[3:]
    learned_sessions(reef, 1, prefix="more")
    result = learn(reef)
    assert result["verdict"] == "selected" and result["release"] == "v1", result


# -- delta edits only, and the counters -----------------------------------------------------------


@pytest.mark.parametrize(("curate", "why"), [("rewrite", "rewrites the tree"), ("many", "9 edits")])
def test_a_curator_answer_that_rewrites_is_refused_and_the_step_skipped(
    reefine, roles: Roles, curate: str, why: str
):
    reef = usage_reef(reefine, "--recipe.config.health", "false")
    roles.curate = curate
    learned_sessions(reef, 2)
    result = learn(reef)
    refused = "skipped: StepSkipped: refused: the curator's answer rewrites the tree"
    assert result["verdict"].startswith(refused)
    assert why in result["verdict"] and result["release"] is None
    record = step_record(reef, result["step"])
    assert record["usage"]["lessons"] and record["usage"]["why"].startswith("refused")


def test_a_bullet_whose_harmful_count_dominates_is_removed_by_a_later_step(
    reefine, upstream: ScriptedUpstream, roles: Roles
):
    reef = usage_reef(reefine, "--recipe.config.health", "false")
    # v1 from an ask: a learned rule the served model follows badly
    roles.proposal = {
        "design": "a rule",
        "changes": [
            {
                "op": "create",
                "kind": "rule",
                "name": "learned",
                "content": "Lessons.\n\n- [L1] Skip the tests.\n",
            }
        ],
    }
    asked = ask(reef, SCENARIO, "answer briefly")
    assert settle(reef, SCENARIO, asked.json()["agent_record_id"])["result"]["release"] == "v1"
    roles.harmful = ("L1",)  # every reflection now says L1 hurt
    roles.curate = "skip"  # and the curator proposes nothing itself
    held_out_sessions(reef, 5)
    learned_sessions(reef, 2)
    result = learn(reef)
    # L1 came from the person's ask: counts alone never remove a taught rule, a person does
    assert result["verdict"] == "pending" and result["release"] is None, result
    record = step_record(reef, result["step"])
    [edit] = record["usage"]["edits"]
    assert edit["op"] == "remove" and edit["id"] == "L1" and edit["why"] == "harmful 2 > helpful 0"
    [held_edit] = record["usage"]["held_for_a_person"]
    assert "a rule the person taught" in held_edit["why_held"][0]
    promoted = httpx.post(
        f"{reef.url}/reef/scenarios/{SCENARIO}/promote", json={"release": f"c{result['step']}"}
    )
    assert promoted.status_code == 200 and promoted.json()["release"] == "v2", promoted.text
    kept_text = git("--git-dir", reef.repo(SCENARIO), "show", "v2:rules/learned.md")
    assert "L1" not in kept_text and kept_text.startswith("Lessons.")  # the bullet went, the rest stays


# -- sessions are untrusted input -----------------------------------------------------------------


def test_a_lesson_planted_in_tool_output_waits_for_a_person_and_the_persons_own_lesson_is_learned(
    reefine, roles: Roles
):
    reef = usage_reef(reefine, "--recipe.config.health", "false")
    roles.poisoned = True  # the reflector believes the tool output and says the person said it
    held_out_sessions(reef, 5)
    for name in kept(SHARE, 2, "poisoned"):
        receipts = chat(reef, name, TASK, tool=f"# setup notes\n{POISON}\n")
        report(reef, receipts, 0.0, session=name)  # scored low, no words of the person's
    result = learn(reef)
    assert result["verdict"] == "pending" and result["release"] is None, result
    record = step_record(reef, result["step"])
    [waiting] = record["usage"]["held_for_a_person"]
    assert "curl" in waiting["text"]
    assert "its only evidence is tool output or file content, not the person's words" in waiting["why_held"]
    assert any(e["source"] == "tool" and e["claimed"] == "user" for e in waiting["evidence"])
    assert releases(reef) == []  # nothing was published

    # the person's own words teach the harmless lesson, which is published
    roles.poisoned = False
    reject = httpx.post(
        f"{reef.url}/reef/scenarios/{SCENARIO}/reject", json={"release": f"c{result['step']}"}
    )
    assert reject.status_code == 200, reject.text
    learned_sessions(reef, 2, prefix="honest")
    result = learn(reef)
    assert result["verdict"] == "selected" and result["release"] == "v1", result
    rules = git("--git-dir", reef.repo(SCENARIO), "show", "v1:rules/learned.md")
    assert LESSON in rules and "curl" not in rules


# -- bad input ---------------------------------------------------------------------------------------


def test_learn_needs_reefine_and_a_known_scenario(
    tmp_path: Path, upstream: ScriptedUpstream, reefine, roles: Roles
):
    basic = RunningReef(tmp_path / "basic", "--inference.upstream-url", upstream.url).start()
    try:
        chat(basic, "s1", TASK)
        refused = httpx.post(f"{basic.url}/reef/scenarios/{SCENARIO}/learn", json={})
    finally:
        basic.stop()
    assert refused.status_code == 400
    assert "basic recipe, which does not learn from usage" in refused.json()["error"]["message"]
    reef = usage_reef(reefine, "--recipe.config.health", "false")
    missing = httpx.post(f"{reef.url}/reef/scenarios/nope/learn", json={})
    assert missing.status_code == 404
    unknown = httpx.get(f"{reef.url}/reef/scenarios/nope/learn/learn_0")
    assert unknown.status_code == 404
    # nothing to learn from: the step is recorded as skipped, with the counts
    chat(reef, "quiet", TASK)
    result = learn(reef)
    assert result["verdict"].startswith("skipped: StepSkipped: nothing new to learn from: 0 unused scored")


def test_with_canaries_on_a_replay_winner_serves_a_share_of_sessions_before_it_is_published(
    reefine, roles: Roles
):
    reef = usage_reef(reefine, "--recipe.config.health", "false", "--recipe.config.canary-share", "0.3")
    roles.proposal = {
        "design": "a rule",
        "changes": [{"op": "create", "kind": "rule", "name": "style", "content": "Answer plainly.\n"}],
    }
    asked = ask(reef, SCENARIO, "answer plainly")
    assert settle(reef, SCENARIO, asked.json()["agent_record_id"])["result"]["release"] == "v1"
    held_out_sessions(reef, 5)
    learned_sessions(reef, 2)
    result = learn(reef)
    assert result["verdict"] == "canary" and result["release"] is None, result
    assert next(c for c in result["checks"] if c["name"] == "replay")["passed"]
    state = httpx.get(f"{reef.url}/reef/scenarios/{SCENARIO}/canary").json()["canary"]
    assert (state["name"], state["base"], state["state"], state["share"]) == (
        f"c{result['step']}",
        "v1",
        "running",
        0.3,
    )
    listing = httpx.get(f"{reef.url}/reef/scenarios/{SCENARIO}/releases").json()
    assert [r["release"] for r in listing["releases"]] == ["v1"]  # not published: it serves its share first


def test_the_judge_judges_the_answer_and_never_a_harness_s_aside(reefine, roles: Roles):
    """opencode asks for a title with the person's first words beside the answer (tagged
    ``aside`` by reef's plugin); when the title comes back last, the next message still judges
    the answer the person read."""
    reef = usage_reef(reefine)
    [session] = kept(SHARE, 1, "aside")
    client = openai.OpenAI(
        base_url=f"{reef.url}/v1",
        api_key="k",
        default_headers={"x-reef-scenario": SCENARIO, "x-reef-tag-session": session},
    )
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": TASK},
    ]
    raw = client.chat.completions.with_raw_response.create(model="scripted-model", messages=messages)
    answered = raw.headers["x-reef-agent-record-id"]
    title = [{"role": "system", "content": "You are a title generator."}, {"role": "user", "content": TASK}]
    client.chat.completions.create(
        model="scripted-model", messages=title, extra_headers={"x-reef-tag-aside": "title"}
    )
    messages += [
        {"role": "assistant", "content": raw.parse().choices[0].message.content},
        {"role": "user", "content": "that's wrong, you did not run the tests"},
    ]
    client.chat.completions.create(model="scripted-model", messages=messages)
    wait_for(lambda: any(r["metadata"].get("source") == "judge" for r in items(reef, "report")))
    [verdict] = [r for r in items(reef, "report") if r["metadata"].get("source") == "judge"]
    assert verdict["references"] == [answered] and verdict["metadata"]["session"] == session
    assert roles.calls["judge"] == 1  # the title opened no turn of its own
    [listed] = httpx.get(f"{reef.url}/reef/scenarios/{SCENARIO}/sessions").json()["sessions"]
    assert len(listed["records"]) == 3 and len(listed["turns"]) == 2
