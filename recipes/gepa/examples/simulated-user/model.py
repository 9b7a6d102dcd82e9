"""A stand-in model endpoint for this example: ``bench/usage_sim.py``'s scripted, rule-following
``SimModel`` behind an OpenAI-compatible ``POST /v1/chat/completions`` on loopback.

It is not a language model.  As the served model it does the task and obeys the rule bullets in
its system prompt; as reef's judge, pairwise replay judge and GEPA's reflective mutation it
answers by script (see ``bench/usage_sim.py``).  run.sh starts it unless ``REEF_UPSTREAM_URL``
names a real endpoint.

    python model.py --port 8911
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from aiohttp import web

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

from bench.usage_sim import SimModel  # noqa: E402
from reef_core.learning.model import ModelCall  # noqa: E402

MODEL = SimModel()


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


async def chat(request: web.Request) -> web.Response:
    body = await request.json()
    messages = body.get("messages") or []
    system = "\n\n".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
    rest = [
        {"role": m["role"], "content": _text(m.get("content"))} for m in messages if m.get("role") != "system"
    ]
    answer = MODEL.answer(ModelCall(rest, system or None))
    return web.json_response(
        {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "sim"),
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
