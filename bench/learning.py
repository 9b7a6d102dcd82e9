"""Learning benchmark: what one grpo update costs, against one answer of the same model.

    python bench/learning.py [--steps 20]

In one process, on the embedded model (pretrained once and cached under .cache/models):
the time to generate one 48-token answer (the baseline), one policy-gradient step on a batch
of 16 scored answers, the release checks' importance-sampling estimate, writing the
checkpoint, and swapping weights into the serving engine.  For the demo's time from start to
target, run ``reef demo``: it prints it, with the median step and swap times of the run.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from recipes.grpo.objective import estimate_reward, group_advantages, policy_step
from recipes.grpo.samples import Sample
from reef_core.models.tiny import checkpoint, corpus, default_pretrain_seconds, ensure_pretrained
from reef_core.upstream.local import LocalEngine, _parse

ROOT = Path(__file__).resolve().parents[1]


def timed(fn, n: int) -> tuple[float, object]:
    result = None
    times = []
    for _ in range(n):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def main() -> None:
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 20
    base = ensure_pretrained(ROOT / ".cache" / "models" / "tiny", seconds=default_pretrain_seconds())
    engine = LocalEngine(base)
    request = _parse(
        json.dumps(
            {"messages": [{"role": "user", "content": "how is the river?"}], "max_tokens": 48}
        ).encode()
    )

    def answer(prompt: str) -> Sample:
        body = _parse(
            json.dumps({"messages": [{"role": "user", "content": prompt}], "max_tokens": 48}).encode()
        )
        reply, extras = engine._generate(body, "bench")
        text = reply["choices"][0]["message"]["content"]
        return Sample(
            "r",
            "p",
            tuple(extras["prompt_ids"]),
            tuple(extras["response_ids"]),
            tuple(extras["logprobs"]),
            float(text.strip().startswith("Sure")),
            0,
        )

    gen_s, _ = timed(lambda: engine._generate(request, "bench"), 30)
    prompts = corpus.train_prompts(n=60)
    groups = [[answer(p) for _ in range(8)] for p in prompts[:2]]
    for p in prompts[2:]:
        if all(len({s.reward for s in g}) > 1 for g in groups):
            break
        groups.append([answer(p) for _ in range(8)])
        groups = [g for g in groups if len({s.reward for s in g}) > 1][-2:] or groups[-2:]
    weighted = group_advantages(groups) or [(s, 1.0 if i % 2 else -1.0) for i, s in enumerate(groups[0])]
    held = [answer(p) for p in corpus.heldout_prompts(n=16) for _ in range(2)]
    model, _ = engine.snapshot("bench")
    reference = engine.base_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    step_s, _ = timed(
        lambda: policy_step(model, reference, optimizer, weighted, kl_coef=0.05, clip=0.2), steps
    )
    estimate_s, _ = timed(lambda: estimate_reward(model, held), 10)
    with tempfile.TemporaryDirectory() as tmp:
        save_s, _ = timed(lambda: checkpoint.save(model, Path(tmp)), 10)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    swap_s, _ = timed(lambda: engine.swap("bench", state, 2), 20)
    print(f"one answer (48 tokens, the baseline): {gen_s * 1000:7.1f} ms")
    print(f"policy step on {len(weighted)} answers: {step_s * 1000:7.1f} ms  = {step_s / gen_s:5.1f} answers")
    print(
        f"held-out estimate, {len(held)} answers: {estimate_s * 1000:5.1f} ms  "
        f"= {estimate_s / gen_s:5.1f} answers"
    )
    print(f"checkpoint save (safetensors):  {save_s * 1000:7.1f} ms  = {save_s / gen_s:5.2f} answers")
    print(f"swap into serving:              {swap_s * 1000:7.1f} ms  = {swap_s / gen_s:5.2f} answers")


if __name__ == "__main__":
    main()
