"""The sao recipe on SmolLM2 with LoRA (``builtin:smollm2``), through one real daemon.

Each report with a finite score on one rollout is one step: its candidate goes through the
checks and becomes the next tagged release, holding the adapter and the critic in LFS.  A report
with no score, one on two rollouts, and a rollout answered by a release older than the one
serving are not steps; a score that is not finite is refused at the door.  ``reef rollback``
serves the earlier adapter again, exactly.  The objective itself (GAE of the score, a step that
moves a rollout the way of its score, the DIS mask) on a tiny random Llama.  Sampled text is
never asserted.
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
import pytest
import safetensors.torch
import torch

from recipes.grpo.lora import LoraPolicy, LoraSettings, state_digest
from recipes.grpo.samples import Sample
from recipes.sao.critic import ValueHead, answer_features
from recipes.sao.objective import adaptive_lambda, advantages, sao_step
from recipes.sao.recipe import SAORecipe
from reef_core.daemon.context import DAEMON
from reef_core.errors import ConfigError
from reef_core.store import parse_pointer, read_lfs
from reef_core.upstream.transformers_engine import TransformersEngine
from tests.cli.support import reef as reef_cli
from tests.conftest import LFS_CONFIG, git
from tests.daemon.conftest import RunningReef
from tests.fakes.upstream import ScriptedUpstream
from tests.models.tiny_hf import write_llama_dir
from tests.upstream.smollm2 import model_cache, smollm2

__all__ = ["model_cache", "smollm2"]

S = "sao"
SAO = "recipes.sao.recipe:SAORecipe"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, model_cache: Path, smollm2) -> Iterator[RunningReef]:
    served = RunningReef(
        tmp_path_factory.mktemp("sao-reef"),
        "--inference.model-path", "builtin:smollm2",
        "--inference.model-cache", str(model_cache),
        "--recipe.implementation", SAO,
        "--recipe.config.lora-rank", "4",
        "--recipe.config.poll-seconds", "0.2",
    ).start(timeout=300)  # fmt: skip
    yield served
    served.stop()


def _ask(daemon: RunningReef, text: str, **options: Any) -> tuple[str, dict]:
    """One answer of the served model: its receipt and its record's tokens."""
    body = {"model": "builtin:smollm2", "messages": [{"role": "user", "content": text}], "max_tokens": 6}
    answer = httpx.post(
        f"{daemon.url}/v1/chat/completions",
        json={**body, **options},
        headers={"x-reef-scenario": S},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    receipt = answer.headers["x-reef-agent-record-id"]
    return receipt, daemon.reader(S).data.get(receipt).data["tokens"]


def _report(daemon: RunningReef, body: dict) -> httpx.Response:
    return httpx.post(f"{daemon.url}/reef/report", json=body, headers={"x-reef-scenario": S}, timeout=30)


def _releases(daemon: RunningReef) -> list[dict]:
    return httpx.get(f"{daemon.url}/reef/scenarios/{S}/releases", timeout=30).json()["releases"]


def _wait_for_release(daemon: RunningReef, number: int, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(r["number"] == number for r in _releases(daemon)):
            return
        time.sleep(0.2)
    steps = httpx.get(f"{daemon.url}/reef/scenarios/{S}/releases", timeout=30).json()["steps"]
    pytest.fail(f"no v{number} after {timeout} s; steps: {steps}")


def _adapter(repo: str, release: str) -> dict:
    pointer = parse_pointer(
        git("-C", repo, "show", f"{release}:weights/adapter_model.safetensors").stdout.encode()
    )
    assert pointer is not None
    return safetensors.torch.load_file(str(read_lfs(Path(repo), pointer)))


@pytest.mark.slow
def test_each_scored_rollout_is_one_gated_release_stale_ones_are_not_and_rollback_reserves(
    daemon: RunningReef,
):
    httpx.post(f"{daemon.url}/reef/scenarios", json={"name": S}, timeout=30).raise_for_status()
    _wait_for_release(daemon, 1)
    first, first_tokens = _ask(daemon, "Can you recommend a book about history?", temperature=1.0, seed=1)
    stale, stale_tokens = _ask(daemon, "Could you suggest a recipe for bread?", temperature=1.0, seed=2)
    assert first_tokens["weight_version"] == stale_tokens["weight_version"] == 1

    # not steps: words with no score, one score on two rollouts; a score that is no number is refused
    assert _report(daemon, {"feedback": "too short", "references": [first]}).status_code == 200
    assert _report(daemon, {"score": 1.0, "references": [first, stale]}).status_code == 200
    nan = httpx.post(
        f"{daemon.url}/reef/report",
        content=b'{"score": NaN, "references": ["' + first.encode() + b'"]}',
        headers={"x-reef-scenario": S, "content-type": "application/json"},
        timeout=30,
    )
    assert nan.status_code == 400, nan.text
    reported = reef_cli("report", S, first, "--score", "1", "--url", daemon.url)
    assert reported.exit_code == 0, reported.output
    # answered by v1: by the time it is read v2 serves (the step on `first`), so it never trains
    assert _report(daemon, {"score": 0.5, "references": [stale]}).status_code == 200
    _wait_for_release(daemon, 2)

    probe = {"temperature": 0, "max_tokens": 6}
    _receipt, at_v2 = _ask(daemon, "probe", **probe)
    assert at_v2["weight_version"] == 2
    second, second_tokens = _ask(daemon, "Can you give me a name for my dog?", temperature=1.0, seed=3)
    assert second_tokens["weight_version"] == 2
    assert _report(daemon, {"score": 0.0, "references": [second]}).status_code == 200
    _wait_for_release(daemon, 3)

    # two steps, each a candidate whose checks all passed, each published and tagged
    reader = daemon.reader(S)
    candidates = reader.releases.candidates()
    assert [c.verdict for c in candidates] == ["selected", "selected"]
    assert [c.record["rollout"]["record"] for c in candidates] == [first, second]
    assert [c.record["batch"]["items"] for c in candidates] == [[first], [second]]
    assert [c.record["trained_from_version"] for c in candidates] == [1, 2]
    for c in candidates:
        assert {check["name"]: check["passed"] for check in c.record["checks"]} == {
            "no_collapse": True,
            "weights_moved": True,
        }
    repo = daemon.repo(S)
    assert git("-C", repo, "tag", "--list").stdout.split() == ["v1", "v2", "v3"]
    manifest = json.loads(git("-C", repo, "show", "v3:reef-release.json").stdout)
    assert manifest["recipe"] == "sao" and manifest["trained_from_version"] == 2
    git("-C", repo, *LFS_CONFIG, "lfs", "fsck")
    stored = git("-C", repo, *LFS_CONFIG, "lfs", "ls-files", "--name-only", "v3").stdout.split()
    assert sorted(stored) == ["weights/adapter_model.safetensors", "weights/critic.safetensors"]
    v2, v3 = _adapter(repo, "v2"), _adapter(repo, "v3")
    assert state_digest(v2) not in ("base", state_digest(v3))

    # roll back to v2: the daemon serves v2's adapter again, exactly
    rolled = reef_cli("rollback", S, "v2", "--url", daemon.url)
    assert rolled.exit_code == 0, rolled.output
    served, version = daemon.app[DAEMON].engine.adapter_state(S)
    assert version == 4 and state_digest(served) == state_digest(v2)
    _receipt, after = _ask(daemon, "probe", **probe)
    assert after["weight_version"] == 4
    assert after["response_ids"] == at_v2["response_ids"] and after["logprobs"] == at_v2["logprobs"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TransformersEngine:
    """A tiny random Llama (fast): the objective's behaviour, not the model's."""
    from reef_core.models import hf

    source = hf.resolve(str(write_llama_dir(tmp_path_factory.mktemp("llama") / "tiny")))
    model, tokenizer = hf.load(source, cache=tmp_path_factory.mktemp("cache"))
    return TransformersEngine(model, tokenizer, model_name=source.spec, identity=source.sha256)


def _rollout(engine: TransformersEngine, policy: LoraPolicy, score: float, shift: float = 0.0) -> Sample:
    """One answer of six tokens with the log-probs the policy gives it (less ``shift``: what an
    engine recorded for a policy that has since moved)."""
    chat = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    prompt = tuple(int(t) for t in engine.tokenizer.encode(chat))
    response = (83, 117, 114, 101, 33, 32)
    with torch.no_grad():
        logp, _ = policy.sequence_logprobs([list(prompt)], [list(response)])
    return Sample("r", "p", prompt, response, tuple(float(x) - shift for x in logp[0]), score, 1)


def _logprob(policy: LoraPolicy, sample: Sample) -> float:
    with torch.no_grad():
        logp, _ = policy.sequence_logprobs([list(sample.prompt_ids)], [list(sample.response_ids)])
    return float(logp.sum())


def test_advantages_are_gae_of_the_score_at_the_end():
    values = torch.tensor([0.2, 0.5, 0.4])
    # lambda 1: the Monte-Carlo return less each value; lambda 0: each one-step difference
    assert advantages(values, 1.0, 1.0).tolist() == pytest.approx([0.8, 0.5, 0.6])
    assert advantages(values, 1.0, 0.0).tolist() == pytest.approx([0.3, -0.1, 0.6])
    assert advantages(torch.zeros(3), 1.0, 0.5).tolist() == pytest.approx([0.25, 0.5, 1.0])
    assert adaptive_lambda(2, 1.5) == pytest.approx(1 - 1 / 3) and adaptive_lambda(40, 1.5) > 0.98


@pytest.mark.parametrize("score", [1.0, -1.0])
def test_a_step_moves_a_rollout_the_way_of_its_score_and_the_critic_towards_it(tiny, score: float):
    policy = LoraPolicy(tiny, LoraSettings(rank=4), seed=0)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    sample = _rollout(tiny, policy, score)
    critic = ValueHead(int(tiny.model.config.hidden_size), lr=0.05)
    features = answer_features(policy, sample.prompt_ids, sample.response_ids)
    values = critic.values(features)
    assert values.tolist() == [0.0] * 6  # an untrained critic: the score is the whole advantage
    before = _logprob(policy, sample)
    stats = sao_step(
        policy,
        policy.reference(),
        optimizer,
        sample,
        advantages(values, score, 0.9),
        clip_low=0.3,
        clip_high=5.0,
    )
    assert stats.clipped == 0.0 and stats.samples == 1
    assert (_logprob(policy, sample) - before) * score > 0.05
    returns = torch.full((6,), score)
    first = critic.fit(features, returns, 2)
    assert float(((critic.values(features) - returns) ** 2).mean()) < first


def test_tokens_the_policy_moved_too_far_from_give_no_gradient(tiny):
    """The DIS mask: every token's ratio to the rollout's log-prob is e^3 (above 1 + 5.0), so the
    step leaves the adapter as it was, whatever the advantage; a fresh rollout moves it."""
    policy = LoraPolicy(tiny, LoraSettings(rank=4), seed=0)
    policy.load({k: v + 0.01 for k, v in policy.initial.items()})  # B != 0: every weight has a gradient
    start = policy.state()
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
    far = _rollout(tiny, policy, 1.0, shift=3.0)
    stats = sao_step(policy, policy.reference(), optimizer, far, torch.ones(6), clip_low=0.3, clip_high=5.0)
    assert stats.clipped == 1.0
    assert state_digest(policy.state()) == state_digest(start)
    near = _rollout(tiny, policy, 1.0)
    stats = sao_step(policy, policy.reference(), optimizer, near, torch.ones(6), clip_low=0.3, clip_high=5.0)
    assert stats.clipped == 0.0 and state_digest(policy.state()) != state_digest(start)


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"clip_low": "1.5"}, "recipe.config.clip-low"),
        ({"clip_high": "0"}, "recipe.config.clip-high"),
        ({"critic_steps": "0"}, "recipe.config.critic-steps"),
        ({"lambda_alpha": "-1"}, "recipe.config.lambda-alpha"),
        ({"heldout_every": "1"}, "recipe.config.heldout-every"),
        ({"lora": "false"}, "recipe.config.lora"),
        ({"group_size": "8"}, "recipe.config.group-size is a grpo setting"),
        ({"critic_lr": "fast"}, "recipe.config.critic_lr must be a float"),
        ({"critic_rate": "0.1"}, "unknown sao setting recipe.config.critic-rate"),
    ],
)
def test_a_bad_setting_is_refused_naming_it(config: dict, named: str):
    with pytest.raises(ConfigError) as refused:
        SAORecipe.check_config(config)
    assert named in refused.value.message


def test_reef_serve_with_a_bad_sao_setting_exits_2_naming_it_and_makes_nothing(tmp_path: Path):
    with ScriptedUpstream() as upstream:
        run = subprocess.run(
            [
                sys.executable, "-m", "reef_cli", "serve",
                "--storage.state-dir", str(tmp_path / "state"),
                "--inference.upstream-url", upstream.url,
                "--reef.port", "0",
                "--recipe.implementation", SAO,
                "--recipe.config.clip-high", "0",
            ],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert run.returncode == 2, run.stdout + run.stderr
    assert "recipe.config.clip-high must be above 0" in run.stderr and "Traceback" not in run.stderr
    assert not any((tmp_path / "state").rglob("*.git"))
