"""Peak RSS of one LoRA grpo step on SmolLM2-135M-Instruct, phase by phase, and of cheap fixes.

    python bench/grpo_memory.py [--variants recipe,baseline,micro4,...] [--work /tmp/reef-grpo-memory]
    python bench/grpo_memory.py --list      # the variants and what each changes

SmolLM2 loads as reef loads it (``builtin:smollm2`` through ``reef_core.models.hf``, the GGUF
converted once into ``--work``/models) into a real ``TransformersEngine``.  A first process
(``prepare``) generates the scored answers through the engine's own decoding worker, with the
demo's sizes (``reef demo --model smollm2``: groups of 8 answers, 2 groups a step, 24 tokens an
answer, temperature 1, lr 1e-3, the other ``GrpoConfig`` defaults), plus 32 held-out answers (the
estimate's chunk); a reward by answer length gives every group a signal.  Then each variant runs
in a fresh process (so no variant inherits another's freed-but-resident memory) over the same
answers: the policy (``LoraPolicy``, AdamW), one step, the held-out check
(``GrpoRecipe._heldout_check``), the no-collapse check's greedy answers, the adapter written as
safetensors, and (``recipe`` only) the swap into the engine and a batch of 16 answers served on it.

Each phase's peak is the kernel's high-water mark (``VmHWM`` after writing ``5`` to
``/proc/self/clear_refs``), so it is the process's whole RSS at its highest during that phase,
the model included; ``after`` is the RSS when the phase ends.  ``recipe`` runs the recipe's own
``policy_step`` as one phase; ``baseline`` runs the same arithmetic split into its parts
(reference, forward, backward, optimizer); the others change one thing each (``--list``).

Printed: one table of peaks per phase and variant (MB), the RSS after each phase, the seconds of
the step, and, for each variant, the largest difference of its trained adapter from the one the
recipe's ``policy_step`` trained, and the step's loss and KL: a fix that changes only memory
trains the same adapter, up to float rounding (micro-batches sum the gradient in another order;
AdamW's first step divides each gradient by its own size, so in coordinates whose gradient is
near zero that rounding shows as up to a few 1e-5, against updates of about lr = 1e-3).  Seconds
are only comparable between variants run one at a time (``--jobs 1``).  Asserts nothing.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import ctypes
import gc
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GROUP_SIZE, GROUPS, MAX_TOKENS, HELDOUT = 8, 2, 24, 32  # the demo's sizes (see the docstring)
LR = 1e-3  # reef demo --model smollm2 serves --recipe.config.lr 1e-3
SCENARIO = "demo"


@dataclass(frozen=True)
class Variant:
    help: str
    micro: int = 0  # samples per forward/backward (0: the whole batch at once)
    checkpoint: bool = False  # gradient checkpointing of the decoder layers
    heldout_chunk: int = 32  # estimate_reward's chunk (32 before the fix; the recipe's default now: 8)
    trim: bool = False  # malloc_trim(0) after each phase (returns freed heap pages to the kernel)
    recipe: bool = False  # the recipe's policy_step itself, as one phase
    serve: bool = False  # also the no-collapse answers, the swap and a batch served on the adapter
    heldout: bool = False  # also the held-out check (its memory changes only with the chunk)


VARIANTS = {
    "recipe": Variant(
        "recipe's policy_step and checks, as they are", recipe=True, serve=True, heldout=True, heldout_chunk=8
    ),
    "baseline": Variant("the same step split into its phases (same arithmetic)"),
    "micro4": Variant("micro-batches of 4 answers, gradients accumulated", micro=4),
    "micro2": Variant("micro-batches of 2 answers, gradients accumulated", micro=2),
    "micro1": Variant("one answer at a time, gradients accumulated", micro=1),
    "ckpt": Variant("gradient checkpointing of the decoder layers", checkpoint=True),
    "trim": Variant("baseline + malloc_trim(0) after each phase", trim=True),
    "combined": Variant(
        "micro4 + held-out chunk 8 + malloc_trim",
        micro=4,
        heldout_chunk=8,
        trim=True,
        heldout=True,
    ),
}

STEP_PHASES = ("step (policy_step)", "reference", "forward", "backward", "forward+backward", "optimizer")
ORDER = (
    "import",
    "load",
    "generate 16",
    "generate held-out",
    "policy + AdamW",
    *STEP_PHASES,
    "held-out check",
    "no-collapse answers",
    "adapter save",
    "swap",
    "serve 16 on adapter",
)


# -- measuring ---------------------------------------------------------------------------------


def _status(field: str) -> int:
    text = Path("/proc/self/status").read_text()
    found = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    return int(found.group(1)) // 1024 if found else -1


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS


class Phases:
    """Peak RSS (MB), RSS after (MB) and seconds of each named phase."""

    def __init__(self, trim: bool = False) -> None:
        self.rows: dict[str, tuple[int, int, float]] = {}
        self.trim = trim
        self._libc = ctypes.CDLL("libc.so.6") if trim else None

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        gc.collect()
        reset_peak()
        started = time.perf_counter()
        yield
        seconds = time.perf_counter() - started
        peak = _status("VmHWM")
        gc.collect()
        if self._libc is not None:
            self._libc.malloc_trim(0)
        self.rows[name] = (peak, _status("VmRSS"), round(seconds, 2))


# -- the pieces --------------------------------------------------------------------------------


def load_engine(work: Path) -> Any:
    from reef_core.models import hf
    from reef_core.upstream.transformers_engine import TransformersEngine

    source = hf.resolve(hf.BUILTIN_SMOLLM2, cache=work / "models")
    model, tokenizer = hf.load(source, cache=work / "models")
    return TransformersEngine(model, tokenizer, model_name=source.spec, identity=source.sha256)


def generate(engine: Any, prompts: list[str], scenario: str | None) -> list[Any]:
    """Answers to ``prompts``, all submitted at once (one decoding batch of up to 16), through
    the engine's own request parsing and worker, as the demo's requests arrive."""
    futures = []
    for prompt in prompts:
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": MAX_TOKENS}
        request = engine._parse(json.dumps(body).encode())
        futures.append(engine._submit(request, scenario=scenario, emit=None))
    return [f.result() for f in futures]


def scored(answers: list[Any], group: int) -> list[dict[str, Any]]:
    """Samples as ``read_scored`` builds them; reward 1 for the answers shorter than the group's
    median (the demo's user scores a preference; any reward with a signal costs the same)."""
    lengths = sorted(len(a.text) for a in answers)
    median = lengths[len(lengths) // 2]
    rewards = [float(len(a.text) < median) for a in answers]
    if len(set(rewards)) == 1:
        rewards = [float(i % 2) for i in range(len(answers))]
    out = []
    for i, (answer, reward) in enumerate(zip(answers, rewards, strict=True)):
        t = answer.extras
        out.append(
            {
                "record_id": f"r{group}-{i}",
                "report_id": f"p{group}-{i}",
                "prompt_ids": t["prompt_ids"],
                "response_ids": t["response_ids"],
                "logprobs": t["logprobs"],
                "reward": reward,
                "version": int(t["weight_version"]),
                "temperature": float(t["temperature"]),
            }
        )
    return out


def prepare(work: Path) -> dict[str, Any]:
    """Load (converting the GGUF on the first run) and generate the scored answers."""
    from reef_cli.demo_user import requests

    phases = Phases()
    with phases("import"):
        import torch  # noqa: F401
        import transformers  # noqa: F401
    with phases("load"):
        engine = load_engine(work)
    engine.swap(SCENARIO, None, 1)  # what attach delivers first: the base, as v1
    prompts = requests(seed=0, n=GROUPS + HELDOUT // GROUP_SIZE)
    groups = []
    with phases("generate 16"):
        answers = generate(engine, [p for p in prompts[:GROUPS] for _ in range(GROUP_SIZE)], SCENARIO)
    groups += [scored(answers[g * GROUP_SIZE : (g + 1) * GROUP_SIZE], g) for g in range(GROUPS)]
    heldout: list[dict[str, Any]] = []
    with phases("generate held-out"):
        for start in range(GROUPS, len(prompts), 2):  # batches of 16, as the engine's MAX_BATCH
            asked = [p for p in prompts[start : start + 2] for _ in range(GROUP_SIZE)]
            answers = generate(engine, asked, SCENARIO)
            for g in range(len(asked) // GROUP_SIZE):
                heldout += scored(answers[g * GROUP_SIZE : (g + 1) * GROUP_SIZE], start + g)
    return {"phases": phases.rows, "groups": groups, "heldout": heldout}


def split_step(
    policy: Any,
    optimizer: Any,
    weighted: list,
    variant: Variant,
    phases: Phases,
    kl_coef: float,
    clip: float,
) -> dict[str, float]:
    """``policy_step`` (one epoch) in phases, in micro-batches of ``variant.micro`` answers: the
    loss of each micro-batch is its answers' share of the batch mean, so the accumulated
    gradient is the whole batch's."""
    import torch

    from recipes.grpo.policy import causal_logprobs as score

    samples = [s for s, _ in weighted]
    n = len(samples)
    size = variant.micro or n
    parts = [list(range(i, min(n, i + size))) for i in range(0, n, size)]

    def batch(idx: list[int]) -> tuple[list, list, list]:
        chosen = [samples[i] for i in idx]
        return (
            [list(s.prompt_ids) for s in chosen],
            [list(s.response_ids) for s in chosen],
            [s.temperature for s in chosen],
        )

    with phases("reference"), torch.no_grad(), policy.peft.disable_adapter():
        refs = []
        for idx in parts:
            prompts, responses, temps = batch(idx)
            refs.append(score(policy.lm, policy.pad, prompts, responses, temps)[0])
    optimizer.zero_grad()
    totals = {"loss": 0.0, "kl": 0.0, "clipped": 0.0, "tokens": 0.0}

    def forward(k: int, idx: list[int]) -> Any:
        prompts, responses, temps = batch(idx)
        logp, mask = score(policy.lm, policy.pad, prompts, responses, temps)
        behaviour = torch.zeros_like(logp)
        for row, i in enumerate(idx):
            behaviour[row, : len(samples[i].logprobs)] = torch.tensor(samples[i].logprobs[: logp.shape[1]])
        advantages = torch.tensor([weighted[i][1] for i in idx]).unsqueeze(1)
        ratio = torch.exp((logp - behaviour) * mask)
        per_token = -torch.minimum(ratio * advantages, torch.clamp(ratio, 1 - clip, 1 + clip) * advantages)
        log_ratio = (refs[k][:, : logp.shape[1]] - logp) * mask
        k3 = torch.exp(log_ratio) - log_ratio - 1
        lengths = mask.sum(dim=1).clamp(min=1)
        loss = ((per_token + kl_coef * k3) * mask).sum(dim=1) / lengths
        with torch.no_grad():
            totals["loss"] += float(loss.sum()) / n
            totals["kl"] += float(((k3 * mask).sum(dim=1) / lengths).sum()) / n
            totals["clipped"] += float((((ratio - 1).abs() > clip).float() * mask).sum())
            totals["tokens"] += float(mask.sum())
        return loss.sum() / n

    if variant.checkpoint:
        policy.lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        policy.lm.train()  # checkpointing acts in training mode only (SmolLM2 and the adapter: no dropout)
    if len(parts) == 1:
        with phases("forward"):
            loss = forward(0, parts[0])
        with phases("backward"):
            loss.backward()
            del loss
    else:
        with phases("forward+backward"):
            for k, idx in enumerate(parts):
                forward(k, idx).backward()
    policy.lm.eval()
    with phases("optimizer"):
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        optimizer.step()
    clipped = totals["clipped"] / max(1.0, totals["tokens"])
    return {"loss": totals["loss"], "kl": totals["kl"], "clipped": clipped}


def run_variant(name: str, work: Path) -> dict[str, Any]:
    variant = VARIANTS[name]
    phases = Phases(trim=variant.trim)
    with phases("import"):
        import safetensors.torch
        import torch

        from recipes.grpo.lora import LoraPolicy, LoraSettings, state_digest
        from recipes.grpo.objective import estimate_reward, group_advantages, policy_step
        from recipes.grpo.policy import FunctionScorer, causal_logprobs
        from recipes.grpo.recipe import GrpoConfig, GrpoRecipe
        from recipes.grpo.samples import Sample
        from reef_core import memory
        from reef_core.learning import Candidate
        from reef_core.models.tiny import corpus
    data = json.loads((work / "samples.json").read_text())

    def sample(d: dict[str, Any]) -> Sample:
        return Sample(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})

    groups = [[sample(d) for d in g] for g in data["groups"]]
    heldout = [sample(d) for d in data["heldout"]]
    config = GrpoConfig(lr=LR)
    with phases("load"):
        engine = load_engine(work)
    engine.swap(SCENARIO, None, 1)
    with phases("policy + AdamW"):  # as GrpoRecipe._propose_adapter builds them on its first step
        settings = LoraSettings(rank=config.lora_rank, alpha=config.lora_alpha)
        policy = LoraPolicy(engine, settings, seed=config.seed)
        optimizer = torch.optim.AdamW(policy.parameters(), lr=abs(config.lr))
    served, version = engine.adapter_state(SCENARIO)
    policy.load(served)
    weighted = group_advantages(groups)
    started = time.perf_counter()
    if variant.recipe:
        with phases("step (policy_step)"):
            stats = policy_step(
                policy,
                policy.reference(),
                optimizer,
                weighted,
                kl_coef=config.kl,
                clip=config.clip,
                micro_batch=config.micro_batch,
            )
            memory.give_back()  # as the recipe does after its step
        result = {"loss": stats.loss, "kl": stats.kl, "clipped": stats.clipped}
    else:
        result = split_step(policy, optimizer, weighted, variant, phases, config.kl, config.clip)
    result["step_seconds"] = round(time.perf_counter() - started, 2)
    state = policy.state()
    safetensors.torch.save_file(state, str(work / f"state-{name}.safetensors"))

    def own(p: list, r: list, t: Any) -> Any:
        return causal_logprobs(policy.lm, policy.pad, p, r, t)

    def base(p: list, r: list, t: Any) -> Any:
        with policy.peft.disable_adapter():
            return own(p, r, t)

    def trained(p: list, r: list, t: Any) -> Any:
        policy.load(state)
        return own(p, r, t)

    served_view, candidate_view = FunctionScorer(base), FunctionScorer(trained)
    fake = SimpleNamespace(config=config, _heldout=heldout)  # what _heldout_check reads of the recipe
    result["heldout"] = "(not run)"
    if variant.heldout:
        with phases("held-out check"), torch.no_grad():
            if variant.heldout_chunk == 8:  # the recipe's own check
                check = GrpoRecipe._heldout_check(fake, served_view, candidate_view, version)  # type: ignore[arg-type]
                result["heldout"] = check.detail
            else:
                now = estimate_reward(served_view, heldout, chunk=variant.heldout_chunk)
                new = estimate_reward(candidate_view, heldout, chunk=variant.heldout_chunk)
                result["heldout"] = f"held-out estimate {now.reward:.3f} → {new.reward:.3f} (chunk 8)"
    if variant.serve:
        candidate = Candidate(tree="", operation="training", record={}, payload=(None, None, served, state))
        parts = GrpoRecipe._parts(  # type: ignore[arg-type]
            SimpleNamespace(adapters=True, _policy=policy, full=False, engine=engine), candidate
        )
        with phases("no-collapse answers"):
            answers = parts[2](corpus.heldout_prompts(n=8))
        result["no_collapse_tokens"] = len({t for a in answers for t in a})
    with phases("adapter save"):
        blob = safetensors.torch.save(state)  # what _adapter_tree hands store_lfs
        result["digest"] = state_digest(state)
    result["adapter_bytes"] = len(blob)
    if variant.serve:
        adapter_config = settings.adapter_config(engine.model_name)
        with phases("swap"):  # _deliver_transformers: the release's adapter read back, swapped in
            engine.swap(SCENARIO, safetensors.torch.load(blob), 2, config=adapter_config)
        from reef_cli.demo_user import requests

        with phases("serve 16 on adapter"):
            generate(engine, [p for p in requests(seed=1, n=2) for _ in range(GROUP_SIZE)], SCENARIO)
    result["widths"] = [len(s.prompt_ids) + len(s.response_ids) for s, _ in weighted]
    return {"phases": phases.rows, "result": result}


# -- the driver --------------------------------------------------------------------------------


def child(args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    command = [sys.executable, __file__, *args]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        sys.exit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(line[len("RESULT ") :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "reef-grpo-memory")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--fresh", action="store_true", help="generate the scored answers again")
    parser.add_argument("--jobs", type=int, default=1, help="variants run at once (peaks stay per process)")
    args = parser.parse_args()
    if args.list:
        for name, variant in VARIANTS.items():
            print(f"{name:<9} {variant.help}")
        return
    args.work.mkdir(parents=True, exist_ok=True)
    if args.child == "prepare":
        out = prepare(args.work)
        (args.work / "samples.json").write_text(json.dumps({k: out[k] for k in ("groups", "heldout")}))
        print("RESULT " + json.dumps({"phases": out["phases"], "result": {}}))
        return
    if args.child:
        print("RESULT " + json.dumps(run_variant(args.child, args.work)))
        return

    names = [n for n in args.variants.split(",") if n]
    runs: dict[str, dict[str, Any]] = {}
    if args.fresh or not (args.work / "samples.json").exists():
        print("prepare: loading SmolLM2 (converting the GGUF on a first run) and generating answers …")
        runs["prepare"] = child(["--child", "prepare", "--work", str(args.work)])
    # variants in parallel (--jobs): each is its own process, so its peaks are its own
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for name in names:
            print(f"{name}: {VARIANTS[name].help}", flush=True)
        started = {n: pool.submit(child, ["--child", n, "--work", str(args.work)]) for n in names}
        runs.update({n: f.result() for n, f in started.items()})
    show(runs, args.work)


def show(runs: dict[str, dict[str, Any]], work: Path) -> None:
    import safetensors.torch

    samples = json.loads((work / "samples.json").read_text())
    train = [s for g in samples["groups"] for s in g]
    rows = [len(s["prompt_ids"]) + len(s["response_ids"]) for s in train]
    print(
        f"\nSmolLM2-135M-Instruct, LoRA r16 on q/k/v/o, {len(train)} answers a step "
        f"({GROUPS} groups of {GROUP_SIZE}; prompt + response {min(rows)}-{max(rows)} tokens, "
        f"responses ≤ {MAX_TOKENS}), {len(samples['heldout'])} held-out answers"
    )
    names = list(runs)

    def table(title: str, column: int) -> None:
        print(title)
        print(f"{'phase':<22}" + "".join(f"{n:>10}" for n in names))
        for phase in ORDER:
            cells = [runs[n]["phases"].get(phase) for n in names]
            if any(cells):
                print(f"{phase:<22}" + "".join(f"{c[column] if c else '-':>10}" for c in cells))

    table("\npeak RSS (MB) during each phase; the process's whole RSS, the model included", 0)
    step_peak = [
        max((runs[n]["phases"][p][0] for p in STEP_PHASES if p in runs[n]["phases"]), default=0)
        for n in names
    ]
    print(f"{'STEP PEAK':<22}" + "".join(f"{v or '-':>10}" for v in step_peak))
    overall = [max(v[0] for k, v in runs[n]["phases"].items() if k not in ("import",)) for n in names]
    print(f"{'PEAK AFTER LOAD':<22}" + "".join(f"{v:>10}" for v in overall))
    table("\nRSS (MB) when each phase ends", 1)
    table("\nseconds of each phase", 2)
    reference = work / "state-recipe.safetensors"
    base = safetensors.torch.load_file(str(reference)) if reference.exists() else None
    print(f"\n{'variant':<10}{'step s':>8}{'loss':>12}{'kl':>12}{'max |Δ| vs recipe':>20}  held-out check")
    for name in names:
        if name == "prepare":
            continue
        r = runs[name]["result"]
        diff = "-"
        if base is not None:
            mine = safetensors.torch.load_file(str(work / f"state-{name}.safetensors"))
            diff = f"{max(float((mine[k] - base[k]).abs().max()) for k in base):.2e}"
        print(f"{name:<10}{r['step_seconds']:>8}{r['loss']:>12.6f}{r['kl']:>12.2e}{diff:>20}  {r['heldout']}")


if __name__ == "__main__":
    main()
