"""Backend benchmark: how much slower the demo's embedded model would be as a ``transformers`` model.

    python bench/tiny_backend.py [--reps 9]

``builtin:tiny`` is a hand-written plain-torch GPT (:class:`reef_core.models.tiny.model.TinyLM`).
This asks what writing it by hand buys: in one process, on CPU (torch's default thread count),
it builds TinyLM with the default ``TinyConfig`` and ``transformers`` models of the same shape
(vocabulary, width, depth, heads, context, tied head): ``GPT2LMHeadModel``, the same
architecture (learned positions, LayerNorm, tanh-GELU MLP), and ``LlamaForCausalLM`` (RoPE,
RMSNorm, a SwiGLU MLP of 8/3 the width, so about the same parameters), all randomly
initialised (weights do not change the speed).  It times the median of ``--reps`` runs after
one warm-up, the paths taking turns so that other load on the machine slows them alike:

* **sampling**: 16 prompts of 40 random tokens decoded together for 48 new tokens with a KV
  cache.  TinyLM through its own ``generate``; a ``transformers`` model through the loop reef's
  transformers engine runs (prefill, then one forward per token on the last token with the
  cache, each row sampled with ``torch.multinomial`` from the softmax of its logits), and
  through ``model.generate(do_sample=True)`` for comparison;
* **train step**: forward and backward of the per-token log-probs of 16 sequences (40 prompt +
  48 response tokens) and an Adam step: ``TinyLM.sequence_logprobs``, or logits → log_softmax →
  gather;
* **held-out forward**: the same log-probs for 64 sequences without grad (what the release
  gate's held-out estimate costs).

Each ``transformers`` row is also given as a ratio to TinyLM's time in the same run.  The last
lines weigh the three into one update cycle of ``reef demo`` (16 answers, two training passes,
one held-out forward) for a compute-only estimate of the demo's slowdown; HTTP, scoring and the
simulated user cost the same on both backends, so the real slowdown is smaller.  Timings are
printed, never asserted.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import transformers  # noqa: E402

from reef_core.models.tiny.model import TinyConfig, TinyLM  # noqa: E402
from reef_core.models.tiny.tokenizer import BOS, EOS, PAD  # noqa: E402

BATCH = 16
PROMPT = 40
NEW = 48
HELDOUT = 64


def timed(paths: list[tuple[str, str, Callable[[], Any]]], reps: int) -> list[tuple[str, str, float]]:
    """Median seconds of ``reps`` calls of each path, after one warm-up call each.

    The paths take turns (one call of each per round), so that a burst of load from something
    else on the machine slows every path alike instead of one path's whole series.
    """
    for _, _, fn in paths:
        fn()
    times: list[list[float]] = [[] for _ in paths]
    for _ in range(reps):
        for (_, _, fn), series in zip(paths, times, strict=True):
            started = time.perf_counter()
            fn()
            series.append(time.perf_counter() - started)
    return [(m, p, statistics.median(t)) for (m, p, _), t in zip(paths, times, strict=True)]


def gpt2(cfg: TinyConfig) -> Any:
    config = transformers.GPT2Config(
        vocab_size=cfg.vocab_size,
        n_positions=cfg.max_len,
        n_embd=cfg.d_model,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        activation_function="gelu_new",  # the tanh GELU, as TinyLM's
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=True,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    return transformers.GPT2LMHeadModel(config)


def llama(cfg: TinyConfig) -> Any:
    config = transformers.LlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=8 * cfg.d_model // 3,  # SwiGLU's three matrices ≈ GELU's two of 4x
        num_hidden_layers=cfg.n_layer,
        num_attention_heads=cfg.n_head,
        num_key_value_heads=cfg.n_head,
        max_position_embeddings=cfg.max_len,
        tie_word_embeddings=True,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    return transformers.LlamaForCausalLM(config)


def reef_loop(model: Any, ids: torch.Tensor) -> list[list[int]]:
    """The decode loop of ``TransformersEngine._decode``, at temperature 1 and top-p 1."""
    cache = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    n, width = ids.shape
    mask = torch.ones((n, width), dtype=torch.long)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    tokens: list[list[int]] = [[] for _ in range(n)]
    past = None
    with torch.inference_mode():
        for _ in range(NEW):
            out = model(
                input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **{cache: past}
            )
            past = getattr(out, cache)
            logits = out.logits[:, -1, :].float()
            for i in range(n):  # reef samples each row with its own settings
                logp = torch.log_softmax(logits[i], dim=-1)
                token = int(torch.multinomial(logp.exp(), 1))
                tokens[i].append(token)
                float(logp[token])  # the behaviour log-prob reef records
            ids = torch.tensor([row[-1] for row in tokens]).unsqueeze(1)
            mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype)], dim=1)
            positions = positions[:, -1:] + 1
    return tokens


def hf_generate(model: Any, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            top_k=0,
            top_p=1.0,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            pad_token_id=PAD,
        )


def hf_logprobs(model: Any, ids: torch.Tensor) -> torch.Tensor:
    """Log-probs of the response tokens (after the first PROMPT) given the tokens before them."""
    logits = model(input_ids=ids).logits[:, PROMPT - 1 : -1]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, PROMPT:, None])[..., 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    reps = parser.parse_args().reps
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = TinyConfig()
    models: dict[str, Any] = {"TinyLM": TinyLM(cfg), "GPT2": gpt2(cfg), "Llama": llama(cfg)}
    for model in models.values():
        model.eval()

    prompts = torch.randint(0, 256, (BATCH, PROMPT))  # bytes: never BOS, EOS or PAD
    rows = torch.randint(0, 256, (BATCH, PROMPT + NEW))
    held = torch.randint(0, 256, (HELDOUT, PROMPT + NEW))

    def split(t: torch.Tensor) -> tuple[list[list[int]], list[list[int]]]:
        return t[:, :PROMPT].tolist(), t[:, PROMPT:].tolist()

    tiny = models["TinyLM"]
    prompt_lists = prompts.tolist()
    train_lists, held_lists = split(rows), split(held)

    def tiny_sample() -> None:
        tiny.generate(prompt_lists, max_new_tokens=NEW, temperature=1.0)

    def train_step(model: Any, optimizer: torch.optim.Optimizer) -> Callable[[], None]:
        def step() -> None:
            model.train()
            if model is tiny:
                logp, mask = tiny.sequence_logprobs(*train_lists)
                loss = -(logp * mask).sum() / mask.sum()
            else:
                loss = -hf_logprobs(model, rows).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            model.eval()

        return step

    def heldout(model: Any) -> Callable[[], None]:
        def forward() -> None:
            with torch.no_grad():
                if model is tiny:
                    tiny.sequence_logprobs(*held_lists)
                else:
                    hf_logprobs(model, held)

        return forward

    paths: list[tuple[str, str, Callable[[], Any]]] = [("sampling", "TinyLM.generate", tiny_sample)]
    for name in ("GPT2", "Llama"):
        model = models[name]
        paths.append(("sampling", f"{name} reef loop", lambda m=model: reef_loop(m, prompts)))
        paths.append(("sampling", f"{name} generate", lambda m=model: hf_generate(m, prompts)))
    for name, model in models.items():
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
        paths.append(("train step", name, train_step(model, optimizer)))
    for name, model in models.items():
        paths.append(("held-out fwd", name, heldout(model)))
    results = timed(paths, reps)  # (measurement, path, seconds)

    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    for name, model in models.items():
        print(f"{name:7s} {sum(p.numel() for p in model.parameters()) / 1e6:.3f}M parameters")
    print(
        f"sampling: {BATCH} prompts x {PROMPT} tokens, {NEW} new; train step: {BATCH} x {PROMPT}+{NEW}; "
        f"held-out fwd: {HELDOUT} x {PROMPT}+{NEW}; median of {reps}"
    )
    print()
    print(f"{'measurement':13s} {'path':17s} {'ms':>8s} {'x TinyLM':>9s}")
    baseline = {m: s for m, p, s in results if p.startswith("TinyLM")}
    for measurement, path, seconds in results:
        ratio = seconds / baseline[measurement]
        print(f"{measurement:13s} {path:17s} {seconds * 1000:8.1f} {ratio:8.2f}x")

    print()
    by = {(m, p): s for m, p, s in results}

    def cycle(sample: str, name: str) -> float:
        return by[("sampling", sample)] + 2 * by[("train step", name)] + by[("held-out fwd", name)]

    base = cycle("TinyLM.generate", "TinyLM")
    print(
        f"demo update cycle (16 answers + 2 train passes + 1 held-out forward): TinyLM {base * 1000:.0f} ms"
    )
    for name in ("GPT2", "Llama"):
        ours = cycle(f"{name} reef loop", name)
        print(
            f"demo slowdown on the transformers backend, {name}: {ours / base:.2f}x "
            f"({ours * 1000:.0f} ms per cycle; compute only, an upper bound)"
        )


if __name__ == "__main__":
    main()
