"""Constrained-decoding benchmark: tokens per second of SmolLM2 on reef's ``transformers`` engine
with a ``response_format`` JSON schema, against the same requests without one, in the same run.

    python bench/constrained.py [--max-tokens 48] [--quick]

SmolLM2-135M-Instruct (``builtin:smollm2``; ``scripts/setup.sh --dev`` installs it, the model
cache in ``.cache/bench-models`` as for ``bench/serving.py``) in a :class:`TransformersEngine` in
this process, asked through the engine's own request and stream calls (the ones the daemon
makes), so what differs between the two runs is the constraint alone:

* **1 client**: the prompts one after another, streamed;
* **16 concurrent**: the prompts sent at once (the engine decodes them as one batch).

Each is run unconstrained (the baseline) and then with a JSON schema (a title and at least eight
steps), on the same prompts, seeds and sampling settings (temperature 0.8, top-p 0.95).  The
prompts ask for lists and the schema for eight steps, so both kinds of answer usually run to
``--max-tokens``: the count of answers that did is printed beside each row, so the two are
compared like for like (a batch decodes until its longest row ends).  Timings are printed, never
asserted; the ratio is constrained over unconstrained at the same concurrency.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import serving  # noqa: E402

CACHE = ROOT / ".cache" / "bench-models"
CHAT = "/v1/chat/completions"
PROMPTS = [
    "List the steps to make a cup of tea.",
    "List the steps to plant a tree.",
    "List the steps to change a bicycle tyre.",
    "List the steps to bake bread.",
    "List the steps to write a good commit message.",
    "List the steps to learn a new language.",
    "List the steps to paint a room.",
    "List the steps to set up a fish tank.",
    "List the steps to plan a birthday party.",
    "List the steps to cook rice.",
    "List the steps to start running.",
    "List the steps to clean a laptop keyboard.",
    "List the steps to prepare for an interview.",
    "List the steps to build a birdhouse.",
    "List the steps to make a paper plane.",
    "List the steps to fix a leaking tap.",
]
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 60},
        "steps": {"type": "array", "items": {"type": "string", "maxLength": 120}, "minItems": 8},
        "minutes": {"type": "number", "minimum": 0},
        "difficulty": {"enum": ["easy", "medium", "hard"]},
    },
    "required": ["title", "steps", "minutes", "difficulty"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "howto", "schema": SCHEMA, "strict": True}}


def body(prompt: str, seed: int, max_tokens: int, constrained: bool, stream: bool) -> bytes:
    """bench/serving.py's request, with the schema when ``constrained``."""
    request = serving.body(prompt, seed, max_tokens, stream)
    del request["model"]  # the engine is called directly
    if constrained:
        request["response_format"] = FORMAT
    return json.dumps(request).encode()


#: (tokens, seconds, answers that ran to max_tokens, constrained answers that are valid JSON)
Run = tuple[int, float, int, int]


async def one_client(engine: Any, prompts: list[str], max_tokens: int, constrained: bool) -> Run:
    tokens = cut = valid = 0
    started = time.perf_counter()
    for i, prompt in enumerate(prompts):
        opened = await engine.stream(CHAT, headers={}, body=body(prompt, i, max_tokens, constrained, True))
        text, finish = "", None
        async for event in opened.chunks():
            if event == b"data: [DONE]\n\n":
                break
            chunk = json.loads(event[6:])
            if chunk.get("usage"):
                tokens += chunk["usage"]["completion_tokens"]
            for choice in chunk["choices"]:
                text += choice["delta"].get("content", "")
                finish = choice["finish_reason"] or finish
        cut += finish == "length"
        valid += constrained and finish == "stop" and _is_json(text)
    return tokens, time.perf_counter() - started, cut, valid


async def concurrent(engine: Any, prompts: list[str], max_tokens: int, constrained: bool) -> Run:
    started = time.perf_counter()
    replies = await asyncio.gather(
        *(
            engine.request("POST", CHAT, headers={}, body=body(p, i, max_tokens, constrained, False))
            for i, p in enumerate(prompts)
        )
    )
    seconds = time.perf_counter() - started
    answers = [json.loads(r.body) for r in replies]
    tokens = sum(a["usage"]["completion_tokens"] for a in answers)
    choices = [a["choices"][0] for a in answers]
    cut = sum(c["finish_reason"] == "length" for c in choices)
    valid = sum(
        constrained and c["finish_reason"] == "stop" and _is_json(c["message"]["content"]) for c in choices
    )
    return tokens, seconds, cut, valid


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def main() -> int:
    from bench.serving import prompts_and_tokens

    prompts, max_tokens = prompts_and_tokens(__doc__ or "", PROMPTS)

    from reef_core.models import hf
    from reef_core.upstream.transformers_engine import TransformersEngine

    source = hf.resolve(hf.BUILTIN_SMOLLM2, cache=CACHE)
    model, tokenizer = hf.load(source, cache=CACHE)
    engine = TransformersEngine(model, tokenizer, model_name=source.spec, identity=source.sha256)
    load = os.getloadavg()[0]

    async def run() -> list[tuple[str, Run, Run]]:
        # warm up both paths (the first constrained request builds the vocabulary, ~0.3 s)
        await concurrent(engine, prompts[:2], 4, False)
        await concurrent(engine, prompts[:2], 4, True)
        rows = []
        for name, measure in (("1 client", one_client), (f"{len(prompts)} concurrent", concurrent)):
            plain = await measure(engine, prompts, max_tokens, False)
            constrained = await measure(engine, prompts, max_tokens, True)
            rows.append((name, plain, constrained))
        return rows

    rows = asyncio.run(run())
    asyncio.run(engine.close())
    print(
        f"SmolLM2-135M-Instruct, transformers engine in-process, {len(prompts)} prompts, "
        f"up to {max_tokens} new tokens each, sampled"
    )
    print(f"{'':34} {'tokens':>7} {'seconds':>8} {'tokens/s':>9} {'at max':>7} {'valid':>6} {'vs plain':>9}")
    for name, plain, constrained in rows:
        base = plain[0] / plain[1]
        for kind, (tokens, seconds, cut, valid) in (("unconstrained", plain), ("json_schema", constrained)):
            rate = tokens / seconds
            shown = f"{valid:6d}" if kind == "json_schema" else f"{'':6}"
            label = f"{name}, {kind}"
            print(f"{label:34} {tokens:7d} {seconds:8.2f} {rate:9.1f} {cut:7d} {shown} {rate / base:8.2f}x")
    print("at max: answers cut by max_tokens (finish length); valid: constrained answers ended as JSON")
    print(f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after; cpu: {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
