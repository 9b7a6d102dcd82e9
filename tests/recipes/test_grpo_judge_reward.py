"""grpo with ``recipe.config.reward judge``: the next-turn judge's verdicts train the weights.

A real daemon serves SmolLM2-135M-Instruct (``builtin:smollm2``) with grpo; a simulated user
opens sessions (the same few requests many times, so groups form), reads each answer and
reacts in its next message: thanks when the answer opens with "Sure", a correction otherwise.
The user never scores anything.  The judge is a scripted OpenAI-compatible endpoint (real HTTP,
``recipe.config.judge-url``) that accepts an answer opening with "Sure" and corrects the others.
What must hold: the verdicts are stored as judge reports, every update is a release the gate
passed, and the recipe's own held-out estimate rises above the base model's.

The simulated user and the scripted judge are ``bench/cookbook_judge.py``'s, whose curve runs
the same loop further.

Beside it, cheaper (on the embedded model, or none): ``reward = reports`` reads verdicts and
trains on none of them; without ``judge-url`` the served model is asked, and an answer that is
no verdict stores nothing; bad settings are refused naming them; and the precedence rules (a
person outweighs the judge, one answer trains once) on a real scenario repository.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.cookbook_judge import GRPO, HELD, SCENARIO, idle, judge, learning, records, round_prompts, sessions
from recipes.grpo.recipe import GrpoConfig
from recipes.grpo.rewards import Rewards
from recipes.grpo.samples import Sample, read_scored
from reef_core.config import load_settings
from reef_core.daemon import build_app
from reef_core.errors import ConfigError
from reef_core.learning import RecipeContext
from reef_core.models.tiny import prompt_ids
from reef_core.sessions import is_explicit
from reef_core.store import Scenario
from tests.conftest import git, wait_for
from tests.daemon.conftest import RunningReef
from tests.fakes.upstream import ScriptedUpstream
from tests.recipes.conftest import ROOT, TEST_PRETRAIN_SECONDS
from tests.upstream.smollm2 import model_cache, smollm2

__all__ = ["model_cache", "smollm2"]


@pytest.fixture
def judge_endpoint() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as server:
        server.responder = judge
        yield server


def reports(reef: RunningReef, name: str) -> list[dict[str, Any]]:
    return [item.data for item in reef.reader(name).data.iter_items(["report"])]


@pytest.mark.slow
def test_judge_verdicts_on_next_turns_train_smollm2_through_the_gate(
    tmp_path: Path, model_cache: Path, smollm2, judge_endpoint: ScriptedUpstream
):
    reef = RunningReef(
        tmp_path,
        "--inference.model-path", "builtin:smollm2",
        "--inference.model-cache", str(model_cache),
        *GRPO,  # reward judge, one group of 8 a step, 12 held-out answers
        "--recipe.config.judge-url", judge_endpoint.url,
        "--recipe.config.judge-model", "scripted-judge",
    ).start(timeout=300)  # fmt: skip

    async def teach() -> None:
        async with httpx.AsyncClient(
            base_url=reef.url, headers={"x-reef-scenario": SCENARIO}, timeout=120
        ) as c:
            await sessions(c, [HELD[0]] * 6 + [HELD[1]] * 6, 0)
            deadline, n = time.monotonic() + 180, 0
            while time.monotonic() < deadline:
                n += 1
                await sessions(c, round_prompts(n), n)
                await asyncio.sleep(0.5)  # the worker looks every 0.2 s
                await idle(reef)
                if any(r["verdict"] == "selected" for r in records(reef)):
                    return  # one update is enough to tell (each step costs about 15 s of CPU)

    try:
        asyncio.run(teach())
        steps = records(reef)
        stored = reports(reef, SCENARIO)
        listing = httpx.get(f"{reef.url}/reef/scenarios/{SCENARIO}/releases").json()
        judged = learning(reef)["recipe"]["judged"]
    finally:
        reef.stop()

    # the user wrote no report; every report is a verdict the judge stored on a first answer
    assert stored and not [r for r in stored if is_explicit(r)]
    assert {r["metadata"]["verdict"] for r in stored} == {"accept", "correct"}, stored[:3]
    assert all(r["metadata"]["session"] and r["score"] in (1.0, 0.25) for r in stored)
    asked = [c.body for c in judge_endpoint.requests if c.body and "messages" in c.body]
    assert asked and all(b["model"] == "scripted-judge" for b in asked)
    assert judged == len(stored)

    # every update is a release the gate passed: a tagged vN made from a step whose checks all
    # passed, that trained on the judge's rewards alone; a step the gate refused published nothing
    trained = [r for r in listing["releases"] if r["operation"] == "training"]
    assert trained, [(s["step"], s["verdict"]) for s in steps]
    by_step = {s["step"]: s for s in steps}
    assert {r["step"] for r in trained} == {s["step"] for s in steps if s["verdict"] == "selected"}
    tags = set(git("-C", reef.repo(SCENARIO), "tag", "--list").stdout.split())
    for release in trained:
        step = by_step[release["step"]]
        assert release["release"] in tags and step["verdict"] == "selected"
        assert [c["name"] for c in step["checks"]] == ["heldout_score", "no_collapse", "weights_moved"]
        assert all(c["passed"] for c in step["checks"])
        assert step["rewards"]["judge"] > 0 and step["rewards"]["person"] == 0
    # the held-out prompts were held out: every step was judged on their answers
    assert all(s["checks"][0]["metrics"]["heldout_samples"] >= 12 for s in steps)

    # the held-out estimate after learning is above the base model's, as the gate measured them
    first = steps[0]["checks"][0]["metrics"]["heldout_current"]
    last = by_step[trained[0]["step"]]["checks"][0]["metrics"]["heldout_candidate"]
    print(f"held-out estimate: base {first:.3f} -> {trained[0]['release']} {last:.3f}")
    assert last > first


def _split(prompts: list[str], every: int) -> tuple[str, str]:
    """A prompt the embedded model's grpo trains on and one it holds out (``heldout-every``)."""
    groups = {
        p: Sample("", "", tuple(prompt_ids([{"role": "user", "content": p}], 128)), (), (), 0.0, 0)
        for p in prompts
    }
    trained = next(p for p, s in groups.items() if int(s.group, 16) % every)
    held = next(p for p, s in groups.items() if int(s.group, 16) % every == 0)
    return trained, held


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., RunningReef]]:
    """grpo on the embedded model (what is trained on does not depend on the model), pretrained
    once in the repository's model cache as ``tiny_reef`` does (``model_cache`` here is SmolLM2's)."""
    monkeypatch.setenv("REEF_TINY_PRETRAIN_SECONDS", TEST_PRETRAIN_SECONDS)
    started: list[RunningReef] = []

    def make(*flags: str) -> RunningReef:
        reef = RunningReef(
            tmp_path / f"reef{len(started)}",
            "--inference.model-path", "builtin:tiny",
            "--inference.model-cache", str(ROOT / ".cache" / "models"),
            "--recipe", "grpo",
            "--recipe.config.poll-seconds", "0.2",
            *flags,
        )  # fmt: skip
        started.append(reef.start(timeout=600))
        return reef

    yield make
    for reef in started:
        reef.stop()


@pytest.mark.slow
def test_reward_reports_reads_the_judges_verdicts_and_trains_on_none(tiny: Callable[..., RunningReef]):
    """The judge's verdicts on a full group are not trained on; the same scores from a person are."""
    reef = tiny(
        "--recipe.config.group-size", "4",
        "--recipe.config.groups-per-step", "1",
        "--recipe.config.heldout-every", "2",
        "--recipe.config.heldout-min", "2",
    )  # fmt: skip
    trained, held = _split([f"What about the river, {name}?" for name in ("Ada", "Bo", "Cy", "Di", "Ed")], 2)
    headers = {"x-reef-scenario": "plain"}
    receipts = []
    for i, prompt in enumerate([trained] * 4 + [held] * 2):
        body = {
            "model": "builtin:tiny",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 8,
        }
        answer = httpx.post(
            f"{reef.url}/v1/chat/completions",
            json=body,
            headers={**headers, "x-reef-tag-session": f"p{i}"},
        )
        receipts.append(answer.raise_for_status().headers["x-reef-agent-record-id"])

    def score(**metadata: Any) -> None:
        for i, receipt in enumerate(receipts):
            body = {"score": 1.0 if i % 2 else 0.25, "references": [receipt], "metadata": metadata}
            httpx.post(f"{reef.url}/reef/report", json=body, headers=headers).raise_for_status()

    score(source="judge", verdict="accept", session="p")
    # the worker looks every 0.2 s, in its own time on a busy machine: a group and the held-out
    # answers, all the judge's, are read and none is trained on
    wait_for(lambda: (learning(reef).get("recipe") or {}).get("judge_not_trained") == 6, timeout=60)
    now = learning(reef)
    assert (now["steps"], now["state"], now["recipe"]["judge_not_trained"]) == (0, "idle", 6)
    score()  # the same scores, a person's
    deadline = time.monotonic() + 60
    while not records(reef, "plain") and time.monotonic() < deadline:
        time.sleep(0.2)
    steps = records(reef, "plain")
    assert steps and steps[0]["rewards"] == {"judge": 0, "person": 4}


@pytest.mark.slow
def test_without_a_judge_endpoint_the_served_model_judges_and_a_failure_stores_nothing(
    tiny: Callable[..., RunningReef],
):
    """No ``judge-url``: the turn goes to the served model.  The embedded model writes no JSON, so
    its answer is no verdict: nothing is stored, the failure is counted, the worker goes on."""
    reef = tiny("--recipe.config.reward", "judge")
    headers = {"x-reef-scenario": "self", "x-reef-tag-session": "s1"}
    messages = [{"role": "user", "content": "How is the river?"}]
    first = httpx.post(
        f"{reef.url}/v1/chat/completions",
        json={"model": "m", "messages": messages, "max_tokens": 8, "seed": 1},
        headers=headers,
    )
    answer = first.raise_for_status().json()["choices"][0]["message"]["content"]
    assert answer.strip()  # an empty answer opens no turn to judge
    messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "Thanks!"}]
    body = {"model": "m", "messages": messages, "max_tokens": 1}
    httpx.post(f"{reef.url}/v1/chat/completions", json=body, headers=headers).raise_for_status()
    deadline = time.monotonic() + 60
    while learning(reef)["recipe"]["judge_failures"] == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    now = learning(reef)
    assert (now["recipe"]["judge_failures"], now["recipe"]["judged"], now["state"]) == (1, 0, "idle")
    assert reports(reef, "self") == []


def test_a_bad_reward_setting_is_refused_naming_it_and_nothing_is_made(tmp_path: Path):
    settings = load_settings(
        overrides=[
            "--storage.state-dir", str(tmp_path / "state"),
            "--inference.model-path", "builtin:smollm2",
            "--recipe", "grpo",
            "--recipe.config.reward", "crowd",
        ],
        env={},
        cwd=tmp_path,
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"recipe\.config\.reward must be reports, judge or both") as raised:
        build_app(settings)
    assert raised.value.field == "recipe.config.reward"
    assert not (tmp_path / "state" / "scenarios").exists() or not list(
        (tmp_path / "state" / "scenarios").iterdir()
    )


@pytest.mark.parametrize(
    ("config", "setting"),
    [
        ({"reward": "judge", "judge_url": "ftp://judge"}, "judge-url"),
        ({"judge_url": "http://127.0.0.1:9"}, "judge-url"),  # the default reward asks no judge
        ({"reward": "both", "judge_model": "m"}, "judge-model"),  # no endpoint to name a model of
        (
            {"reward": "judge", "judge_url": "http://h", "judge_api_key_env": "REEF_NO_SUCH_KEY"},
            "judge-api-key-env",
        ),
    ],
)
def test_judge_endpoint_settings_are_checked(config: dict[str, str], setting: str):
    with pytest.raises(ConfigError, match=f"recipe.config.{setting}") as raised:
        GrpoConfig.from_config(config)
    assert raised.value.field == f"recipe.config.{setting}"


# -- who outweighs whom, on a real scenario repository ------------------------------------------


def _record(scenario: Scenario, session: str) -> str:
    tokens = {"prompt_ids": [1, 2], "response_ids": [3], "logprobs": [-1.0], "weight_version": 0}
    return scenario.append("record", {"tags": {"session": session}, "tokens": tokens}).result()


def _report(scenario: Scenario, receipt: str, score: float, session: str | None = None) -> None:
    metadata = {"source": "judge", "session": session} if session else {"source": "user"}
    scenario.append("report", {"score": score, "references": [receipt], "metadata": metadata}).result()


def _admitted(
    rewards: Rewards, scenario: Scenario, after: str | None
) -> tuple[list[tuple[str, str]], str | None]:
    rewards.follow(scenario)
    taken = []
    for report_id, samples in read_scored(scenario, after):
        after = report_id
        taken += [(s.record_id, s.source) for s in rewards.admit(samples)]
    return taken, after


@pytest.mark.parametrize("mode", ["reports", "judge", "both"])
def test_a_person_outweighs_the_judge_and_an_answer_trains_once(
    scenario: Scenario, tmp_path: Path, mode: str
):
    rewards = Rewards(GrpoConfig(reward=mode), RecipeContext(cache_dir=tmp_path), {})
    a, b = _record(scenario, "s1"), _record(scenario, "s2")
    _report(scenario, a, 1.0, session="s1")  # the judge alone scored s1
    _report(scenario, b, 0.25, session="s2")
    _report(scenario, b, 1.0)  # a person scored s2's answer too
    taken, cursor = _admitted(rewards, scenario, None)
    expected = {
        "reports": [(b, "person")],
        "judge": [(a, "judge")],  # s2's verdict is outweighed, and the person's is not the judge's
        "both": [(a, "judge"), (b, "person")],
    }[mode]
    assert taken == expected

    # a verdict waiting for its step is dropped once a person scores its session
    c = _record(scenario, "s3")
    _report(scenario, c, 0.25, session="s3")
    waiting, cursor = _admitted(rewards, scenario, cursor)
    assert waiting == ([] if mode == "reports" else [(c, "judge")])
    pending = [s for _, samples in read_scored(scenario, None) for s in samples if s.record_id == c]
    later = _record(scenario, "s3")
    _report(scenario, later, 1.0)  # the person, on a later answer of s3
    rewards.follow(scenario)
    assert rewards.kept(pending) == ([] if mode in ("judge", "both") else pending)

    if mode == "both":  # the verdict on ``a`` trained; a person's later report on it trains nothing
        rewards.trained(s for _, samples in read_scored(scenario, None) for s in samples if s.record_id == a)
        d = _record(scenario, "s4")
        _report(scenario, a, 0.0)
        _report(scenario, d, 0.0)
        late, _ = _admitted(rewards, scenario, cursor)
        assert late == [(later, "person"), (d, "person")]
