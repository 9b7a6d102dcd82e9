"""The grpo recipe: scored answers of the served model → a better model, release by release.

On the embedded model (``builtin:tiny``) a step trains all the weights and a release holds them
(``weights/model.safetensors``).  On a ``transformers`` model a step trains a LoRA adapter
(:mod:`recipes.grpo.lora`) and a release holds the adapter (``weights/adapter_model.safetensors``
and ``weights/adapter_config.json``), or, with ``recipe.config.lora false``, every weight
(:mod:`recipes.grpo.full`; ``weights/model.safetensors``); either names the base model it was
trained on (spec and sha256); the first release is the base itself, with no weights.  A release
is never served on another base.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

import safetensors.torch
import torch

from recipes.grpo.full import FullPolicy, weights_digest
from recipes.grpo.lora import LoraPolicy, LoraSettings, state_digest
from recipes.grpo.objective import (
    Policy,
    Scorer,
    StepStats,
    difference_error,
    estimate_reward,
    group_advantages,
    policy_step,
)
from recipes.grpo.rewards import Rewards
from recipes.grpo.rewards import check_settings as check_rewards
from recipes.grpo.samples import Sample, read_scored, recent
from reef_core import memory
from reef_core.errors import ConfigError, StoreError
from reef_core.learning import Batch, Candidate, CheckResult, Recipe, RecipeContext
from reef_core.learning.canary import canary_key
from reef_core.learning.worker import WORKER_SETTINGS
from reef_core.models.tiny import TinyLM, checkpoint, corpus, prompt_ids
from reef_core.store import GITATTRIBUTES, Release, Scenario, build_tree, parse_pointer, read_lfs, store_lfs
from reef_core.upstream.transformers_engine import TransformersEngine

__all__ = ["GrpoConfig", "GrpoRecipe"]

WEIGHTS = "weights/model.safetensors"
CONFIG = "weights/config.json"
ADAPTER = "weights/adapter_model.safetensors"
ADAPTER_CONFIG = "weights/adapter_config.json"
MANIFEST = "reef-release.json"
_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


@dataclass(frozen=True)
class GrpoConfig:
    group_size: int = 8  # scored answers to one prompt that make a group
    groups_per_step: int = 2
    lr: float = 3e-4  # below zero trains *away* from the reward: only to watch the checks refuse it
    kl: float = 0.05  # k3 KL to the pretrained model keeps the text readable
    clip: float = 0.2
    epochs: int = 1  # passes over each batch of scored answers
    max_staleness: int = 4  # samples from weights more than this many releases old are dropped
    heldout_every: int = 5  # one prompt in this many is held out: scored, never trained on
    heldout_min: int = 16  # held-out answers needed before the score check can judge
    heldout_tolerance: float = 0.02  # the least dip of the held-out estimate taken for noise
    # the share of held-out answers the candidate's estimate must rest on (effective sample size)
    # to be judged at all; below it the candidate has moved too far from them to tell
    heldout_effective: float = 0.1
    min_distinct_bytes: int = (
        12  # below this across sample answers, the text has collapsed (tokens, on transformers)
    )
    seed: int = 0
    lora: bool = True  # transformers models: train a LoRA adapter (all weights is not built)
    lora_rank: int = 16
    lora_alpha: float = 32.0
    # answers in one forward with grad on a transformers model, gradients accumulated over the
    # batch (the update is the batch's): the step's memory is that of a few answers, not the group
    micro_batch: int = 1  # on SmolLM2 a step holds ~160 MB over the daemon's resident, ~310 with 2
    # whose scores train (recipes/grpo/rewards.py): "reports" (people's), "judge" (the next-turn
    # judge's verdicts) or "both"; the judge is the served model unless judge_url names an
    # OpenAI-compatible endpoint (judge_model, its key in the variable judge_api_key_env)
    reward: str = "reports"
    judge_url: str = ""
    judge_model: str = "default"
    judge_api_key_env: str = ""

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> GrpoConfig:
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in config.items():
            if key.replace("-", "_") in WORKER_SETTINGS:
                continue  # the worker's budgets and canary
            if key not in known:
                shown = key.replace("_", "-")
                listed = ", ".join(sorted(k.replace("_", "-") for k in known))
                raise ConfigError(
                    f"unknown grpo setting recipe.config.{shown} (known: {listed})",
                    field=f"recipe.config.{shown}",
                )
            kind: type[Any] = type(known[key].default)
            if kind is bool and isinstance(value, str):
                if value.lower() not in _TRUE | _FALSE:
                    raise ConfigError(f"recipe.config.{key} must be true or false", field=key)
                values[key] = value.lower() in _TRUE
                continue
            try:
                values[key] = kind(value)
            except (TypeError, ValueError):
                raise ConfigError(f"recipe.config.{key} must be a {kind.__name__}", field=key) from None
        for key in ("group_size", "groups_per_step", "epochs", "heldout_min", "lora_rank", "micro_batch"):
            if key in values and values[key] < 1:
                raise ConfigError(f"recipe.config.{key} must be 1 or more", field=f"recipe.config.{key}")
        check_rewards(values)
        return cls(**values)


class GrpoRecipe(Recipe):
    name = "grpo"
    consumes = frozenset({"record", "report"})
    detachable = False  # the scored samples waiting for a step are held in memory
    canary_kind = "weights"  # a canary's weights are served by the daemon to its sessions
    #: the settings class: a recipe built on this trainer (sao) brings its own
    config_type: ClassVar[type[GrpoConfig]] = GrpoConfig

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> None:
        cls.config_type.from_config(config)

    def __init__(self, context: RecipeContext) -> None:
        super().__init__(context)
        if context.engine is None or not getattr(context.engine, "trainable", True):
            raise ConfigError(
                "the grpo recipe trains a model reef serves: --inference.model-path builtin:tiny, "
                "builtin:smollm2 or another transformers model"
            )
        self.engine = context.engine
        self.config = self.config_type.from_config(context.config)
        #: a transformers model: steps train a LoRA adapter (or all the weights), releases hold it
        self.adapters = isinstance(self.engine, TransformersEngine)
        self.full = self.adapters and not self.config.lora
        self._policy: LoraPolicy | FullPolicy | None = None
        self._cursor: str | None = None
        self._groups: dict[str, list[Sample]] = {}
        self._heldout: list[Sample] = []
        self._reference: TinyLM | None = None
        self._trainer: TinyLM | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self.stats: dict[str, Any] = {"dropped_stale": 0, "train_seconds": [], "swap_seconds": []}
        self.rewards = Rewards(self.config, context, self.stats)  # whose scores train; the judge

    # -- releases and serving ----------------------------------------------------------------

    def attach(self, scenario: Scenario) -> None:
        """A new scenario starts at v1, the pretrained model; an old one is served its tip."""
        tip = scenario.releases.tip()
        if tip is None and self.adapters:
            manifest = {"recipe": self.name, "origin": f"base {self.engine.model_name}", "base": self._base()}
            tree = self._adapter_tree(scenario, None, manifest)
            tip = scenario.releases.publish(tree, expected=None, operation="creation", verdict="base model")
        elif tip is None:
            model = self.engine.base_model()
            tree = self._tree(scenario, model, {"recipe": "grpo", "origin": "pretrained builtin:tiny"})
            tip = scenario.releases.publish(tree, expected=None, operation="creation", verdict="pretrained")
        self.deliver(scenario, tip)

    def deliver(self, scenario: Scenario, release: Release) -> None:
        files = scenario.releases.files(release)
        seconds = self._serve(scenario, scenario.name, release.name, files, release.number)
        self.stats["swap_seconds"].append(round(seconds, 4))
        self.stats["serving"] = release.name

    def serve_canary(self, scenario: Scenario, canary: dict[str, Any]) -> None:
        """The canary's weights, served under its own engine key to the sessions it is given;
        their weight version is the release number it would be published as."""
        files = scenario.releases.tree_files(canary["tree"])
        number = int(canary["base"][1:]) + 1
        self._serve(scenario, canary_key(scenario.name), canary["name"], files, number)

    def drop_canary(self, scenario: Scenario, canary: dict[str, Any]) -> None:
        self.engine.forget(canary_key(scenario.name))

    def _serve(self, scenario: Scenario, key: str, name: str, files: dict[str, bytes], number: int) -> float:
        """Serve ``files`` (release or candidate ``name``) under engine key ``key``; the swap's seconds."""
        if self.adapters:
            return self._deliver_transformers(scenario, key, name, files, number)
        if ADAPTER in files:
            raise StoreError(
                f"{name} of {scenario.name} holds a LoRA adapter for a transformers model; "
                f"{self.engine.model_name} is served"
            )
        pointer = parse_pointer(files.get(WEIGHTS, b""))
        if pointer is None:
            raise StoreError(f"{name} of {scenario.name} holds no {WEIGHTS}")
        state = checkpoint.load_state(read_lfs(scenario.path, pointer))
        return self.engine.swap(key, state, number)

    def _base(self) -> dict[str, str]:
        return {"spec": self.engine.model_name, "sha256": self.engine.identity}

    def _deliver_transformers(
        self, scenario: Scenario, key: str, name: str, files: dict[str, bytes], number: int
    ) -> float:
        """Serve a transformers release (the base, an adapter or every weight); the swap's seconds."""
        try:
            manifest = json.loads(files.get(MANIFEST, b"{}"))
        except ValueError as exc:
            raise StoreError(f"{name} of {scenario.name} has an unreadable {MANIFEST}") from exc
        base = manifest.get("base") if isinstance(manifest, dict) else None
        sha256 = base.get("sha256") if isinstance(base, dict) else None
        if sha256 != self.engine.identity:
            raise StoreError(
                f"{name} of {scenario.name} was trained on base model sha256 {sha256 or '(none)'}; "
                f"the served {self.engine.model_name} is sha256 {self.engine.identity}: "
                "a release is never served on another base"
            )

        def tensors(path: str) -> dict[str, torch.Tensor]:
            pointer = parse_pointer(files[path])
            if pointer is None:
                raise StoreError(f"{name} of {scenario.name}: {path} is not in LFS")
            return safetensors.torch.load_file(str(read_lfs(scenario.path, pointer)))

        if WEIGHTS in files:  # every weight (recipe.config.lora false)
            return self.engine.swap_weights(key, tensors(WEIGHTS), number)
        if ADAPTER in files:
            config = json.loads(files.get(ADAPTER_CONFIG, b"null"))
            return self.engine.swap(key, tensors(ADAPTER), number, config=config)
        return self.engine.swap(key, None, number)

    def _adapter_tree(
        self, scenario: Scenario, state: dict[str, torch.Tensor] | None, manifest: dict[str, Any]
    ) -> str:
        repo = scenario.handle.repo
        files: dict[str, Any] = {
            ".gitattributes": GITATTRIBUTES,
            MANIFEST: json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n",
        }
        if state is not None and self.full:
            with tempfile.TemporaryDirectory(prefix="reef-grpo-") as tmp:
                path = Path(tmp) / "model.safetensors"
                safetensors.torch.save_file(state, str(path))
                files[WEIGHTS], _pointer = store_lfs(repo, scenario.path, path, link=True)
        elif state is not None:
            blob, _pointer = store_lfs(repo, scenario.path, safetensors.torch.save(state))
            config = self._lora().adapter_config(self.engine.model_name)
            files[ADAPTER] = blob
            files[ADAPTER_CONFIG] = json.dumps(config, indent=2, sort_keys=True).encode() + b"\n"
        return str(build_tree(repo, files))

    def _lora(self) -> LoraSettings:
        return LoraSettings(rank=self.config.lora_rank, alpha=self.config.lora_alpha)

    def _tree(self, scenario: Scenario, model: TinyLM, manifest: dict[str, Any]) -> str:
        repo = scenario.handle.repo
        with tempfile.TemporaryDirectory(prefix="reef-grpo-") as tmp:
            weights, config = checkpoint.save(model, Path(tmp))
            blob, _pointer = store_lfs(repo, scenario.path, weights, link=True)
            return str(
                build_tree(
                    repo,
                    {
                        ".gitattributes": GITATTRIBUTES,
                        WEIGHTS: blob,
                        CONFIG: config.read_bytes(),
                        "reef-release.json": json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n",
                    },
                )
            )

    # -- batches ---------------------------------------------------------------------------

    def next_batch(self, scenario: Scenario) -> Batch | None:
        current = self.engine.version(scenario.name)
        self.rewards.follow(scenario)  # with reward judge or both: new turns judged, verdicts stored
        for report_id, samples in read_scored(scenario, self._cursor):
            self._cursor = report_id
            for sample in self.rewards.admit(samples):
                if current - sample.version > self.config.max_staleness:
                    self.stats["dropped_stale"] += 1
                elif int(sample.group, 16) % self.config.heldout_every == 0:
                    self._heldout = [*self._heldout[-255:], sample]
                else:
                    self._groups.setdefault(sample.group, []).append(sample)
        self._heldout = self.rewards.kept(self._heldout)  # a person's score came in: it outweighs
        self._groups = {k: g for k, g in ((k, self.rewards.kept(g)) for k, g in self._groups.items()) if g}
        if len(self._heldout) < self.config.heldout_min:
            return None  # no step before there are held-out answers to judge it by
        ready = []
        for key, group in list(self._groups.items()):
            if len(group) < self.config.group_size:
                continue
            if len({s.reward for s in group}) == 1:  # every answer scored alike: nothing to learn
                self._groups.pop(key)
                self.stats["no_signal_groups"] = self.stats.get("no_signal_groups", 0) + 1
                continue
            ready.append(key)
        if len(ready) < self.config.groups_per_step:
            return None
        groups = []
        for key in ready[: self.config.groups_per_step]:
            group = self._groups.pop(key)
            fresh = [s for s in group if current - s.version <= self.config.max_staleness]
            self.stats["dropped_stale"] += len(group) - len(fresh)
            groups.append(fresh)
        items = tuple(s.record_id for g in groups for s in g)
        return Batch(items, payload=groups, summary=f"{len(groups)} groups, {len(items)} scored answers")

    # -- the step ----------------------------------------------------------------------------

    def propose(self, scenario: Scenario, batch: Batch) -> Candidate:
        weighted = group_advantages(batch.payload)
        if not weighted:
            raise ValueError("no signal: every answer in each group scored the same")
        if self.adapters:
            return self._propose_adapter(scenario, weighted)
        if self._trainer is None or self._optimizer is None or self._reference is None:
            torch.manual_seed(self.config.seed)
            trainer = self.engine.base_model()
            self._optimizer = torch.optim.Adam(trainer.parameters(), lr=abs(self.config.lr))
            self._trainer, self._reference = trainer, self.engine.base_model()
        served, version = self.engine.snapshot(scenario.name)
        self._trainer.load_state_dict(served.state_dict())
        stats, metrics = self._step(self._trainer, self._reference, weighted)
        candidate_model = self.engine.base_model()
        candidate_model.load_state_dict(self._trainer.state_dict())
        manifest = self._manifest(version, stats, metrics)
        tree = self._tree(scenario, candidate_model, manifest)
        return Candidate(
            tree=tree,
            operation="training",
            record=self._record(version, stats, metrics, weighted),
            payload=(served, candidate_model),
        )

    def _record(
        self, version: int, stats: StepStats, metrics: dict[str, float], weighted: list[tuple[Sample, float]]
    ) -> dict[str, Any]:
        """The step's account of itself, kept with its candidate."""
        return {
            "metrics": metrics,
            "trained_from_version": version,
            "samples": stats.samples,
            "rewards": self.rewards.trained(s for s, _ in weighted),  # the judge's, people's
        }

    def _propose_adapter(self, scenario: Scenario, weighted: list[tuple[Sample, float]]) -> Candidate:
        if self._policy is None or self._optimizer is None:
            if self.full:
                self._policy = FullPolicy(self.engine)
            else:
                self._policy = LoraPolicy(self.engine, self._lora(), seed=self.config.seed)
            self._optimizer = torch.optim.AdamW(self._policy.parameters(), lr=abs(self.config.lr))
        policy = self._policy
        if self.full:
            served, version = self.engine.weights_state(scenario.name)
        else:
            served, version = self.engine.adapter_state(scenario.name)
        policy.load(served)
        stats, metrics = self._step(policy, policy.reference(), weighted)
        state = policy.state()
        base = self._base()
        manifest = {
            **self._manifest(version, stats, metrics),
            "base": base,
            **(
                {"weights": "full"}
                if self.full
                else {"adapter": {"r": self.config.lora_rank, "lora_alpha": self.config.lora_alpha}}
            ),
        }
        tree = self._adapter_tree(scenario, state, manifest)
        return Candidate(
            tree=tree,
            operation="training",
            record={**self._record(version, stats, metrics, weighted), "base": base},
            payload=(policy.view(served), policy.view(state), served, state),
        )

    def _step(
        self, policy: Policy, reference: Scorer, weighted: list[tuple[Sample, float]]
    ) -> tuple[StepStats, dict[str, float]]:
        """One policy-gradient step of either kind of model (away from the reward when the
        learning rate is below zero): its stats and the metrics a release records."""
        assert self._optimizer is not None  # made with the policy
        if self.config.lr < 0:
            weighted = [(s, -a) for s, a in weighted]
        started = time.perf_counter()
        stats = policy_step(
            policy,
            reference,
            self._optimizer,
            weighted,
            kl_coef=self.config.kl,
            clip=self.config.clip,
            epochs=self.config.epochs,
            # the embedded model's activations are small: its batch goes in one forward
            micro_batch=self.config.micro_batch if self.adapters else len(weighted),
        )
        memory.give_back()  # the activations the step freed, before the checks run on top
        train_seconds = round(time.perf_counter() - started, 4)
        self.stats["train_seconds"].append(train_seconds)
        metrics = {
            "loss": stats.loss,
            "kl": stats.kl,
            "clipped": stats.clipped,
            "train_reward_mean": stats.reward_mean,
            "train_seconds": train_seconds,
        }
        return stats, metrics

    @staticmethod
    def _manifest(version: int, stats: StepStats, metrics: dict[str, float]) -> dict[str, Any]:
        """What ``reef-release.json`` says of a trained release (a transformers one adds its base)."""
        return {
            "recipe": "grpo",
            "trained_from_version": version,
            "samples": stats.samples,
            "metrics": metrics,
        }

    def _heldout_check(self, served: Scorer, model: Scorer, version: int) -> CheckResult:
        samples = recent(self._heldout, version, self.config.max_staleness, self.config.heldout_min)
        if len(samples) < self.config.heldout_min:  # never asked for: next_batch waits for these
            return CheckResult("heldout_score", False, f"only {len(samples)} held-out answers")
        now = estimate_reward(served, samples)
        new = estimate_reward(model, samples)
        judged = new.effective_samples >= max(4.0, self.config.heldout_effective * len(samples))
        # a dip is a drop only beyond the noise of the two estimates' difference (one-sided 95%)
        margin = max(self.config.heldout_tolerance, 1.645 * difference_error(now, new, samples))
        passed = judged and new.reward >= now.reward - margin
        detail = (
            f"held-out estimate {now.reward:.3f} → {new.reward:.3f} on {len(samples)} answers "
            f"(a drop beyond {margin:.3f} fails)"
        )
        if not judged:
            detail += f" (too far from the scored answers to judge: {new.effective_samples:.1f} effective)"
        metrics = {
            "heldout_current": now.reward,
            "heldout_candidate": new.reward,
            "heldout_margin": margin,
            "heldout_effective": new.effective_samples,
            "heldout_samples": float(len(samples)),
        }
        return CheckResult("heldout_score", passed, detail, metrics)

    def checks(self, scenario: Scenario, candidate: Candidate) -> list:
        """One set for both kinds of model: the held-out score must not drop, the text must not
        collapse, the weights must have moved.  What differs is how each kind scores, answers
        and fingerprints (:meth:`_parts`)."""
        served, model, answer, fingerprints = self._parts(candidate)
        version = candidate.record["trained_from_version"]

        def heldout_score() -> CheckResult:
            try:
                with torch.no_grad():
                    return self._heldout_check(served, model, version)
            finally:
                memory.give_back()

        def no_collapse() -> CheckResult:
            answers = answer(corpus.heldout_prompts(n=8))
            distinct = len({t for a in answers for t in a})
            mean_len = sum(len(a) for a in answers) / len(answers)
            passed = distinct >= self.config.min_distinct_bytes and mean_len >= 2
            unit = "tokens" if self.adapters else "bytes"
            return CheckResult(
                "no_collapse",
                passed,
                f"{distinct} distinct {unit}, mean length {mean_len:.1f}",
                {f"distinct_{unit}": float(distinct), "mean_length": mean_len},
            )

        def weights_moved() -> CheckResult:
            before, after = fingerprints()
            return CheckResult("weights_moved", before != after, f"{before} → {after}")

        return [heldout_score, no_collapse, weights_moved]

    def _parts(
        self, candidate: Candidate
    ) -> tuple[Scorer, Scorer, Callable[[list[str]], list[list[int]]], Callable[[], tuple[str, str]]]:
        """The served and candidate scorers, the candidate's greedy-ish answers to prompts (token
        ids; bytes on tiny) and the fingerprints of the served and candidate weights."""
        if self.adapters:
            served_view, candidate_view, served_state, state = candidate.payload
            policy = self._policy
            assert policy is not None  # a candidate was proposed
            digest = weights_digest if self.full else state_digest
            tokenizer = self.engine.tokenizer

            def adapter_answers(prompts: list[str]) -> list[list[int]]:
                ids = [
                    list(
                        tokenizer.apply_chat_template(
                            [{"role": "user", "content": p}],
                            add_generation_prompt=True,
                            tokenize=True,
                            return_dict=False,
                        )
                    )
                    for p in prompts
                ]
                policy.load(state)
                return policy.greedy(ids, max_new_tokens=24)

            return (
                served_view,
                candidate_view,
                adapter_answers,
                lambda: (digest(served_state), digest(state)),
            )
        served, model = candidate.payload

        def tiny_answers(prompts: list[str]) -> list[list[int]]:
            ids = [prompt_ids([{"role": "user", "content": p}], 160) for p in prompts]
            generator = torch.Generator().manual_seed(self.config.seed)
            answers = model.generate(ids, max_new_tokens=48, generator=generator)
            return [[t for t in a.tokens if t < 256] for a in answers]

        return (
            served,
            model,
            tiny_answers,
            lambda: (checkpoint.state_fingerprint(served), checkpoint.state_fingerprint(model)),
        )
