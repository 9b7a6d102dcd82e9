"""grpo with LoRA on ``transformers`` models: the policy step on a tiny random Llama (fast), and
the recipe through a real daemon serving one from its model directory."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from recipes.grpo.lora import LoraPolicy, LoraSettings, state_digest
from recipes.grpo.objective import group_advantages, policy_step
from recipes.grpo.samples import Sample
from reef_core.daemon.context import DAEMON
from reef_core.errors import StoreError
from reef_core.upstream.transformers_engine import TransformersEngine
from tests.conftest import LFS_CONFIG, git
from tests.daemon.conftest import RunningReef
from tests.models.tiny_hf import write_llama_dir


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> TransformersEngine:
    from reef_core.models import hf

    source = hf.resolve(str(write_llama_dir(tmp_path_factory.mktemp("llama") / "tiny")))
    model, tokenizer = hf.load(source, cache=tmp_path_factory.mktemp("cache"))
    return TransformersEngine(model, tokenizer, model_name=source.spec, identity=source.sha256)


def fingerprint(model: Any) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode() + tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def test_lora_steps_rewarding_a_token_raise_its_logprob_and_leave_the_base_alone(engine: TransformersEngine):
    base_weights = fingerprint(engine.model)
    policy = LoraPolicy(engine, LoraSettings(), seed=0)
    prompt = [
        int(t) for t in engine.tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    ]
    target = int(engine.tokenizer.encode("S")[0])
    generator = torch.Generator().manual_seed(0)
    responses = [[int(t) for t in torch.randint(0, 256, (4,), generator=generator)] for _ in range(8)]
    for response in responses[::2]:
        response[0] = target  # half the answers open with the rewarded token

    @torch.no_grad()
    def first_token_logprob(state: Any) -> float:
        logp, _ = policy.view(state).sequence_logprobs([prompt], [[target]])
        return float(logp[0, 0])

    before = first_token_logprob(None)
    assert first_token_logprob(policy.initial) == pytest.approx(before, abs=1e-6)  # B = 0: the base
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    for _ in range(4):
        with torch.no_grad():
            old, _ = policy.sequence_logprobs([prompt] * 8, responses)
        samples = [
            Sample(f"r{i}", "rep", tuple(prompt), tuple(r), tuple(old[i].tolist()), float(r[0] == target), 0)
            for i, r in enumerate(responses)
        ]
        stats = policy_step(
            policy, policy.reference(), optimizer, group_advantages([samples]), kl_coef=0.05, clip=0.2
        )
    trained = policy.state()
    assert set(trained) == set(policy.initial) and state_digest(trained) != "base"
    assert stats.kl > 0 and stats.samples == 8
    assert first_token_logprob(trained) > before + 0.1
    assert first_token_logprob(None) == pytest.approx(before, abs=1e-6)  # the base is still the base
    assert fingerprint(engine.model) == base_weights
    assert all(k.endswith(("lora_A.weight", "lora_B.weight")) for k in trained)


def scored(engine: TransformersEngine, policy: LoraPolicy, seed: int) -> list[tuple[Sample, float]]:
    """Two groups of answers of several lengths to two prompts, scored by their first token."""
    generator = torch.Generator().manual_seed(seed)
    groups = []
    for text in ("hi", "what is the time in the river town?"):
        chat = f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
        prompt = [int(t) for t in engine.tokenizer.encode(chat)]
        responses = [
            [int(t) for t in torch.randint(0, 256, (int(n),), generator=generator)]
            for n in torch.randint(1, 7, (6,), generator=generator)
        ]
        with torch.no_grad():
            old, _ = policy.sequence_logprobs([prompt] * len(responses), responses)
        groups.append(
            [
                Sample(
                    f"r{i}",
                    "rep",
                    tuple(prompt),
                    tuple(r),
                    tuple(old[i, : len(r)].tolist()),
                    float(r[0] % 2),
                    0,
                )
                for i, r in enumerate(responses)
            ]
        )
    return group_advantages(groups)


def test_a_step_in_micro_batches_makes_the_update_of_the_whole_batch(engine: TransformersEngine):
    """Gradients accumulated over micro-batches of 1, 3 or 5 answers move the adapter as one
    backward over all 12 does (up to the order of a sum), and the step reports the same stats."""
    policy = LoraPolicy(engine, LoraSettings(), seed=0)
    policy.load({k: v + 0.01 for k, v in policy.initial.items()})  # B ≠ 0: every weight has a gradient
    start = policy.state()
    weighted = scored(engine, policy, seed=1)
    assert len(weighted) == 12

    def step(micro: int) -> tuple[dict[str, torch.Tensor], Any]:
        policy.load(start)
        optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
        stats = policy_step(
            policy, policy.reference(), optimizer, weighted, kl_coef=0.05, clip=0.2, micro_batch=micro
        )
        return policy.state(), stats

    whole, whole_stats = step(12)
    moved = max(float((whole[k] - start[k]).abs().max()) for k in whole)
    assert moved > 1e-3  # the step did move the adapter
    for micro in (1, 3, 5):
        state, stats = step(micro)
        assert max(float((state[k] - whole[k]).abs().max()) for k in whole) < moved * 1e-4
        # the loss is a sum of per-answer terms that nearly cancel (a group's advantages sum to
        # zero), about 1e-4 here: float32 sums taken in another order differ by ~1e-7 of it
        # absolutely (1.04e-7 with transformers 5.25), which is no difference in the update
        assert stats.loss == pytest.approx(whole_stats.loss, rel=1e-5, abs=1e-6)
        assert stats.kl == pytest.approx(whole_stats.kl, rel=1e-5, abs=1e-9)
        assert stats.clipped == pytest.approx(whole_stats.clipped, abs=1e-9)
        assert stats.samples == 12


def test_answer_log_probs_are_those_of_the_models_full_logits(engine: TransformersEngine):
    """The score reads the vocabulary's logits only where an answer token is predicted; each
    answer token's log-prob is the one the model's whole output gives, at each row's temperature,
    for rows of different prompt and answer lengths (an empty answer included)."""
    from recipes.grpo.policy import causal_logprobs

    model = engine.model
    prompts = [[5, 6, 7, 8, 9], [5, 6], [11, 12, 13], [4, 4, 4, 4]]
    responses = [[20, 21, 22], [30], [40, 41, 42, 43, 44], []]
    temperatures = [1.0, 0.7, 1.3, 1.0]
    with torch.no_grad():
        logp, mask = causal_logprobs(model, int(engine.pad), prompts, responses, temperatures)
        for i, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
            row = torch.tensor([[*prompt, *response]])
            full = torch.log_softmax(model(input_ids=row).logits[0].float() / temperatures[i], dim=-1)
            expected = [float(full[len(prompt) - 1 + j, t]) for j, t in enumerate(response)]
            assert logp[i, : len(response)].tolist() == pytest.approx(expected, abs=1e-5)
            assert mask[i].tolist() == [1.0] * len(response) + [0.0] * (logp.shape[1] - len(response))


@pytest.mark.slow
@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full-weights"])
def test_grpo_trains_an_adapter_releases_it_in_lfs_serves_it_and_rolls_back(tmp_path: Path, lora: bool):
    """A tiny random Llama served from its model directory through a real daemon: two steps from
    scored answers, each a release holding its adapter (or, with ``lora false``, every weight)
    in LFS and naming its base; served after the swap; a rollback to v1 (the base) restores its
    log-probs exactly."""
    model_dir = write_llama_dir(tmp_path / "tiny")
    reef = RunningReef(
        tmp_path / "reef",
        "--inference.model-path",
        str(model_dir),
        "--inference.model-cache",
        str(tmp_path / "cache"),
        "--recipe",
        "grpo",
        *("--recipe.config.group-size", "4", "--recipe.config.groups-per-step", "1"),
        *("--recipe.config.heldout-every", "2", "--recipe.config.heldout-min", "4"),
        *("--recipe.config.heldout-tolerance", "1.0", "--recipe.config.min-distinct-bytes", "2"),
        *("--recipe.config.lr", "0.001", "--recipe.config.lora", str(lora).lower()),
    ).start(timeout=120)
    try:
        httpx.post(f"{reef.url}/reef/scenarios", json={"name": "lora"}).raise_for_status()
        client = httpx.Client(base_url=reef.url, headers={"x-reef-scenario": "lora"}, timeout=60)
        probe = {
            "model": "tiny",
            "messages": [{"role": "user", "content": "probe"}],
            "max_tokens": 6,
            "temperature": 0,
        }

        def served() -> tuple[list[float], int]:
            reply = client.post("/v1/chat/completions", json=probe)
            reply.raise_for_status()
            tokens = reef.reader("lora").data.get(reply.headers["x-reef-agent-record-id"]).data["tokens"]
            return tokens["logprobs"], tokens["weight_version"]

        def releases() -> list[dict[str, Any]]:
            return client.get("/reef/scenarios/lora/releases").json()["releases"]

        base = served()
        deadline, n = time.monotonic() + 120, 0
        while (
            time.monotonic() < deadline and len([r for r in releases() if r["operation"] == "training"]) < 2
        ):
            n += 1
            ask = {
                "model": "tiny",
                "messages": [{"role": "user", "content": f"question {n}"}],
                "max_tokens": 6,
            }
            for i in range(4):
                answer = client.post("/v1/chat/completions", json=ask)
                receipt = answer.headers["x-reef-agent-record-id"]
                client.post(
                    "/reef/report", json={"score": float(i % 2), "references": [receipt]}
                ).raise_for_status()
            time.sleep(0.2)
        rows, settled = releases(), 0
        while settled < 3 and time.monotonic() < deadline + 30:  # the groups reported last may still train
            time.sleep(0.5)
            settled, rows = (settled + 1 if len(releases()) == len(rows) else 0), releases()
        trained = [r for r in rows if r["operation"] == "training"]
        assert len(trained) >= 2 and rows[-1]["operation"] == "creation", rows
        # each step says the daemon's peak memory while it ran: at least the served weights,
        # at most the process's peak virtual size
        status = Path("/proc/self/status").read_text()
        virtual_peak = int(status.split("VmPeak:")[1].split()[0]) * 1024
        weights = sum(p.numel() * p.element_size() for p in reef.app[DAEMON].engine.model.parameters())
        steps = client.get("/reef/scenarios/lora/releases").json()["steps"]
        assert steps and all(weights < s["peak_rss_bytes"] <= virtual_peak for s in steps), steps
        now = served()
        assert now[1] == rows[0]["number"] and now[0] != base[0]

        engine = reef.app[DAEMON].engine
        repo = reef.repo("lora")
        git("-C", repo, *LFS_CONFIG, "lfs", "fsck")
        listed = git("-C", repo, *LFS_CONFIG, "lfs", "ls-files", "--all").stdout
        manifest = json.loads(git("-C", repo, "show", "release:reef-release.json").stdout)
        assert manifest["base"] == {"spec": engine.model_name, "sha256": engine.identity}
        if lora:
            assert listed.count("weights/adapter_model.safetensors") >= 2
            adapter_config = json.loads(git("-C", repo, "show", "release:weights/adapter_config.json").stdout)
            assert adapter_config["r"] == 16 and adapter_config["peft_type"] == "LORA"
        else:
            assert listed.count("weights/model.safetensors") >= 2 and "adapter" not in listed
            assert manifest["weights"] == "full"
            # every weight of the model, and the served base never changed
            weights = git("-C", repo, *LFS_CONFIG, "lfs", "ls-files", "--name-only", "release").stdout
            assert weights.split() == ["weights/model.safetensors"]

        rolled = client.post("/reef/scenarios/lora/rollback", json={"release": "v1"})
        assert rolled.status_code == 200, rolled.text
        logprobs, version = served()
        assert logprobs == base[0] and version > now[1]  # the base again, exactly
        rolled = client.post("/reef/scenarios/lora/rollback", json={"release": f"v{now[1]}"})
        assert rolled.status_code == 200, rolled.text
        assert served()[0] == now[0]  # the trained adapter again

        worker = reef.app[DAEMON].learners.workers["lora"]
        identity, engine.identity = engine.identity, "f" * 64
        try:
            with pytest.raises(StoreError, match=f"{identity}.*{'f' * 64}"):
                worker.recipe.deliver(worker.scenario, worker.scenario.releases.tip())
        finally:
            engine.identity = identity
        client.close()
    finally:
        reef.stop()


def test_lora_is_a_switch_of_the_recipe(engine: TransformersEngine, tmp_path: Path):
    from recipes.grpo.recipe import GrpoConfig, GrpoRecipe
    from reef_core.errors import ConfigError
    from reef_core.learning import RecipeContext

    assert (
        GrpoConfig.from_config({"lora": "true"}).lora and not GrpoConfig.from_config({"lora": "false"}).lora
    )
    with pytest.raises(ConfigError, match="true or false"):
        GrpoConfig.from_config({"lora": "maybe"})
    full = GrpoRecipe(RecipeContext(cache_dir=tmp_path, engine=engine, config={"lora": "false"}))
    assert full.adapters and full.full
    assert not GrpoRecipe(RecipeContext(cache_dir=tmp_path, engine=engine)).full


def test_full_weight_steps_raise_a_rewarded_tokens_logprob_and_leave_the_base_alone(
    engine: TransformersEngine,
):
    from recipes.grpo.full import FullPolicy, weights_digest

    base_weights = fingerprint(engine.model)
    policy = FullPolicy(engine)
    prompt = [
        int(t) for t in engine.tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    ]
    target = int(engine.tokenizer.encode("S")[0])
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    responses = [[target, 70], [71, 72], [target, 73], [74, 75]]
    samples = []
    for i, response in enumerate(responses):
        logp, _ = policy.sequence_logprobs([prompt], [response])
        reward = 1.0 if response[0] == target else 0.0
        logprobs = tuple(logp[0].tolist())
        samples.append(Sample(f"r{i}", "p", tuple(prompt), tuple(response), logprobs, reward, 1))

    def first(state):
        with torch.no_grad():
            logp, _ = policy.view(state).sequence_logprobs([prompt], [[target]])
        return float(logp[0, 0])

    before = first(None)
    for _ in range(3):
        weighted = group_advantages([samples])
        policy_step(policy, policy.reference(), optimizer, weighted, kl_coef=0.05, clip=0.2)
    trained = policy.state()
    assert first(trained) > before + 0.1
    assert first(None) == pytest.approx(before, abs=1e-6)  # the base is still the base
    assert fingerprint(engine.model) == base_weights
    assert set(trained) == set(engine.model.state_dict())
    assert weights_digest(trained) != weights_digest(None) == "base"
