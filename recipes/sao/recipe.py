"""The sao recipe: Single-rollout Asynchronous Optimization (arXiv 2607.07508) on grpo's trainer.

One report with a finite score on one rollout of the served model is one step: no group of
answers to one prompt, no waiting for siblings; the step's candidate goes through the checks and
becomes the next release, which serves the next rollout.  A rollout answered by an older release
than the one serving is not trained on (``max-staleness`` 0, the original's default).

What is grpo's, reused (:class:`~recipes.grpo.recipe.GrpoRecipe`): the LoRA policy and its
optimizer, the release tree (the adapter in LFS, naming its base), serving, rollback, canaries,
and the checks.  What is SAO's (:mod:`recipes.sao.objective`, :mod:`recipes.sao.critic`): the
batching, the loss (the DIS mask on the ratio to the rollout's own log-probs) and the critic
whose values give the advantages.  A release also holds the critic's value head
(``weights/critic.safetensors``), so a rollback, a restart or a promoted canary go on with the
critic that was trained beside the policy they serve.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, fields, replace
from typing import Any

import safetensors.torch
import torch

from recipes.grpo.lora import LoraPolicy
from recipes.grpo.objective import Policy, Scorer, StepStats
from recipes.grpo.recipe import GrpoConfig, GrpoRecipe
from recipes.grpo.samples import Sample, read_scored
from recipes.sao.critic import ValueHead, answer_features
from recipes.sao.objective import adaptive_lambda, advantages, sao_step
from reef_core import memory
from reef_core.errors import ConfigError, StoreError
from reef_core.learning import Batch, Candidate, RecipeContext
from reef_core.learning.worker import WORKER_SETTINGS
from reef_core.store import Release, Scenario, build_tree, parse_pointer, read_lfs, store_lfs

__all__ = ["SAORecipe", "SaoConfig"]

CRITIC = "weights/critic.safetensors"
#: grpo's settings that mean nothing to a step of one rollout
_GRPO_ONLY = {
    "group_size": "one rollout is one step",
    "groups_per_step": "one rollout is one step",
    "micro_batch": "one rollout is one step",
    "clip": "sao masks the ratio on both sides: clip-low and clip-high",
    # grpo's judge (recipes/grpo/rewards.py): sao trains on a person's report on one rollout
    **dict.fromkeys(("reward", "judge_url", "judge_model", "judge_api_key_env"), "sao trains on reports"),
}


@dataclass(frozen=True)
class SaoConfig(GrpoConfig):
    """grpo's settings where they still apply (``lr``, ``kl``, ``epochs``, ``max-staleness``, the
    held-out check's, ``min-distinct-bytes``, ``seed``, ``lora-rank``, ``lora-alpha``), and SAO's."""

    lr: float = 1e-3  # LoRA on a small model: the paper's 1e-6 is for every weight of a 30B one
    kl: float = 0.0  # the paper uses no KL term
    max_staleness: int = 0
    heldout_every: int = 0  # 0: every rollout trains (the paper); N: one prompt in N is held out
    clip_low: float = 0.3  # the DIS mask keeps tokens whose ratio is inside (1 - low, 1 + high)
    clip_high: float = 5.0  # the paper's reasoning-domain bounds: 0.3 and 5.0
    critic_lr: float = 0.01
    critic_steps: int = 2  # value-head updates per step (the paper: two critic steps per actor step)
    lambda_alpha: float = 1.5  # the policy's GAE lambda is 1 - 1 / (alpha * answer length)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> SaoConfig:
        known = {f.name for f in fields(cls)} - set(_GRPO_ONLY)
        for key in config:
            name, shown = key.replace("-", "_"), key.replace("_", "-")
            if name in WORKER_SETTINGS:
                continue
            if name in _GRPO_ONLY:
                raise ConfigError(
                    f"recipe.config.{shown} is a grpo setting; sao has none: {_GRPO_ONLY[name]}",
                    field=f"recipe.config.{shown}",
                )
            if name not in known:
                listed = ", ".join(sorted(k.replace("_", "-") for k in known))
                raise ConfigError(
                    f"unknown sao setting recipe.config.{shown} (known: {listed})",
                    field=f"recipe.config.{shown}",
                )
        made = super().from_config(config)
        assert isinstance(made, SaoConfig)  # grpo's reader makes the class it is called on
        rules = [
            ("lora", made.lora, "must be true: sao trains a LoRA adapter"),
            ("lr", made.lr != 0, "must not be 0"),
            ("clip_low", 0 <= made.clip_low < 1, "must be at least 0 and below 1"),
            ("clip_high", made.clip_high > 0, "must be above 0"),
            ("critic_lr", made.critic_lr > 0, "must be above 0"),
            ("critic_steps", made.critic_steps >= 1, "must be 1 or more"),
            ("lambda_alpha", made.lambda_alpha > 0, "must be above 0"),
            ("kl", made.kl >= 0, "must be 0 or more"),
            ("max_staleness", made.max_staleness >= 0, "must be 0 or more"),
            (
                "heldout_every",
                made.heldout_every == 0 or made.heldout_every >= 2,
                "must be 0 (none) or 2 or more",
            ),
        ]
        for key, holds, why in rules:
            if not holds:
                shown = key.replace("_", "-")
                raise ConfigError(f"recipe.config.{shown} {why}", field=f"recipe.config.{shown}")
        return made


class SAORecipe(GrpoRecipe):
    name = "sao"
    config_type = SaoConfig
    config: SaoConfig

    def __init__(self, context: RecipeContext) -> None:
        super().__init__(context)
        if not self.adapters:
            raise ConfigError(
                "the sao recipe trains a LoRA adapter on a transformers model: "
                "--inference.model-path builtin:smollm2 or another transformers model",
                field="inference.model-path",
            )
        self._queue: list[Sample] = []  # scored rollouts not yet trained on, oldest first
        self._taken: dict[str, None] = {}  # rollouts already taken (one report trains a rollout once)
        self._critic: ValueHead | None = None
        self._served_critic: dict[str, torch.Tensor] | None = None  # the serving release's critic
        self._trained_critic: dict[str, torch.Tensor] | None = None  # the step's, for its release
        self.stats.update(not_single=0, no_signal=0)

    # -- serving: grpo's, and the critic that came with the release ---------------------------

    def deliver(self, scenario: Scenario, release: Release) -> None:
        super().deliver(scenario, release)
        files = scenario.releases.files(release)
        pointer = parse_pointer(files.get(CRITIC, b""))
        if CRITIC in files and pointer is None:
            raise StoreError(f"{release.name} of {scenario.name}: {CRITIC} is not in LFS")
        self._served_critic = (
            None if pointer is None else safetensors.torch.load_file(str(read_lfs(scenario.path, pointer)))
        )

    def _adapter_tree(
        self, scenario: Scenario, state: dict[str, torch.Tensor] | None, manifest: dict[str, Any]
    ) -> str:
        """grpo's release tree, with the critic the step just trained (:meth:`_step`)."""
        tree = super()._adapter_tree(scenario, state, manifest)
        if state is None or self._trained_critic is None:
            return tree
        repo = scenario.handle.repo
        blob, _pointer = store_lfs(repo, scenario.path, safetensors.torch.save(self._trained_critic))
        files: dict[str, Any] = {**scenario.releases.tree_files(tree), CRITIC: blob}
        return str(build_tree(repo, files))

    @staticmethod
    def _manifest(version: int, stats: StepStats, metrics: dict[str, float]) -> dict[str, Any]:
        return {**GrpoRecipe._manifest(version, stats, metrics), "recipe": "sao", "critic": CRITIC}

    # -- batches: one scored rollout ------------------------------------------------------------

    def next_batch(self, scenario: Scenario) -> Batch | None:
        for report_id, samples in read_scored(scenario, self._cursor):
            self._cursor = report_id
            self._take(samples)
        if self.config.heldout_every and len(self._heldout) < self.config.heldout_min:
            return None  # no step before there are held-out rollouts to judge it by
        current = self.engine.version(scenario.name)
        while self._queue:
            sample = self._queue.pop(0)
            if current - sample.version > self.config.max_staleness:
                self.stats["dropped_stale"] += 1
                continue
            if sample.reward == 0 and self._critic_untrained():
                # every value is 0 and so is the score: each token's advantage is 0, and the
                # critic has nothing to learn either (grpo drops a group scored alike, as well)
                self.stats["no_signal"] += 1
                continue
            summary = f"one rollout of v{sample.version}, scored {sample.reward:g}"
            return Batch((sample.record_id,), payload=sample, summary=summary)
        return None

    def _take(self, samples: list[Sample]) -> None:
        """A report's rollouts: one with a finite score is trained on (or held out); a report on
        several, or on a rollout already taken, is not."""
        if (
            len(samples) != 1
            or not math.isfinite(samples[0].reward)
            or samples[0].record_id in self._taken
            or getattr(samples[0], "source", "person") != "person"  # grpo's judge's verdicts
        ):
            if samples:
                self.stats["not_single"] += 1
            return
        sample = samples[0]
        self._taken[sample.record_id] = None
        if len(self._taken) > 4096:
            self._taken.pop(next(iter(self._taken)))
        if self.config.heldout_every and int(sample.group, 16) % self.config.heldout_every == 0:
            self._heldout = [*self._heldout[-255:], sample]
        else:
            self._queue = [*self._queue[-255:], sample]

    def _critic_untrained(self) -> bool:
        return self._served_critic is None or not any(bool(v.any()) for v in self._served_critic.values())

    # -- the step ------------------------------------------------------------------------------

    def propose(self, scenario: Scenario, batch: Batch) -> Candidate:
        sample: Sample = batch.payload
        serving = self.engine.version(scenario.name)
        if serving - sample.version > self.config.max_staleness:  # a rollback since the batch
            raise ValueError(f"stale: the rollout was answered by v{sample.version}; v{serving} serves")
        self._trained_critic = None
        candidate = self._propose_adapter(scenario, [(sample, sample.reward)])
        rollout = {"record": sample.record_id, "report": sample.report_id, "version": sample.version}
        return replace(candidate, record={**candidate.record, "rollout": {**rollout, "score": sample.reward}})

    def _step(
        self, policy: Policy, reference: Scorer, weighted: list[tuple[Sample, float]]
    ) -> tuple[StepStats, dict[str, float]]:
        """SAO's step in place of grpo's: the critic's values give each token's advantage, the
        policy takes the DIS-masked step, then the critic learns the rollout's return."""
        assert isinstance(policy, LoraPolicy) and self._optimizer is not None  # made by the caller
        ((sample, _reward),) = weighted
        started = time.perf_counter()
        features = answer_features(policy, sample.prompt_ids, sample.response_ids)
        if self._critic is None:
            self._critic = ValueHead(features.shape[1], lr=self.config.critic_lr)
        self._critic.load(self._served_critic)
        values = self._critic.values(features)
        lam = adaptive_lambda(len(sample.response_ids), self.config.lambda_alpha)
        token_advantages = advantages(values, sample.reward, lam)
        if self.config.lr < 0:  # trains away from the score: only to watch the checks refuse it
            token_advantages = -token_advantages
        stats = sao_step(
            policy,
            reference,
            self._optimizer,
            sample,
            token_advantages,
            clip_low=self.config.clip_low,
            clip_high=self.config.clip_high,
            kl_coef=self.config.kl,
            epochs=self.config.epochs,
        )
        returns = torch.full_like(values, sample.reward)  # Monte-Carlo: the score, at every token
        critic_loss = self._critic.fit(features, returns, self.config.critic_steps)
        self._trained_critic = self._critic.state()
        memory.give_back()
        train_seconds = round(time.perf_counter() - started, 4)
        self.stats["train_seconds"].append(train_seconds)
        metrics = {
            "loss": stats.loss,
            "kl": stats.kl,
            "masked": stats.clipped,  # the share of tokens outside the DIS band
            "value_first": float(values[0]),
            "advantage_mean": float(token_advantages.mean()),
            "lambda": lam,
            "critic_loss": critic_loss,
            "train_reward_mean": sample.reward,
            "train_seconds": train_seconds,
        }
        return stats, metrics

    def checks(self, scenario: Scenario, candidate: Candidate) -> list:
        """grpo's: no collapse, the weights moved, and, with ``heldout-every``, the held-out
        score; with no rollout held out (the default) there is nothing to estimate it on."""
        kept = super().checks(scenario, candidate)
        if self.config.heldout_every:
            return kept
        return [check for check in kept if check.__name__ != "heldout_score"]
