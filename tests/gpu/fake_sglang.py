"""A scripted stand-in for an SGLang 0.5.23 server: a real aiohttp server, no GPU, no sglang.

``FakeSGLang`` serves, on 127.0.0.1 and an ephemeral port in a background thread, the endpoints
reef drives (bodies as in ``weights.md`` §1.2): ``/v1/chat/completions`` with
``return_prompt_token_ids`` / ``return_token_ids`` / ``return_meta_info`` / ``logprobs``,
``/model_info`` with ``weight_version``, ``/pause_generation``, ``/continue_generation``,
``/flush_cache``, ``/update_weights_from_disk``, ``/health_generate`` and ``/health``.  Every
request is recorded in ``calls``, in order.  Tests script failures with :meth:`FakeSGLang.fail`
and slowness with :meth:`FakeSGLang.delay`.

It doubles as the managed process: :func:`install_fake_launcher` writes a tiny ``sglang`` package
whose ``launch_server`` runs :func:`main`, so ``python -m sglang.launch_server --model-path …
--port …`` (the real command line) starts this fake.  Environment knobs for that process:
``FAKE_SGLANG_EXIT`` (print a traceback with this text and exit 3), ``FAKE_SGLANG_STARTUP_DELAY``
(seconds before listening), ``FAKE_SGLANG_IGNORE_SIGTERM=1``, ``FAKE_SGLANG_CHILD_PIDFILE`` (fork a
worker, like SGLang's scheduler, and write its pid there).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

__all__ = [
    "EOS_ID",
    "Call",
    "FakeSGLang",
    "install_fake_launcher",
    "logprob_at",
    "main",
    "prompt_ids_for",
    "reply_ids_for",
]

ROOT = Path(__file__).resolve().parents[2]
EOS_ID = 151645  # Qwen2's <|im_end|>
_ROLE_IDS = {"system": 151640, "user": 151641, "assistant": 151642, "tool": 151643}
_GENERATION_PROMPT = 151644


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    body: Any


def prompt_ids_for(messages: list[dict[str, Any]]) -> list[int]:
    """The fake chat template: a role token, then the UTF-8 bytes of the content, per message."""
    ids: list[int] = []
    for message in messages:
        ids.append(_ROLE_IDS.get(str(message.get("role")), 151639))
        ids.extend(str(message.get("content") or "").encode())
    return [*ids, _GENERATION_PROMPT]


def reply_ids_for(text: str) -> list[int]:
    return [*text.encode(), EOS_ID]


def logprob_at(i: int) -> float:
    return -0.125 * (i % 8) - 0.001


class FakeSGLang:
    """The server; use as a context manager or call :meth:`start` and :meth:`stop`."""

    def __init__(
        self,
        *,
        model_path: str = "/models/fake",
        weight_version: str = "default",
        reply_text: str = "Sure, hi!",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.model_path = model_path
        self.weight_version = weight_version
        self.reply_text = reply_text
        self.healthy = True
        self.paused: str | None = None  # the pause mode while paused
        self.report_version: str | None = None  # when set, /model_info reports this instead
        self.calls: list[Call] = []
        self._failures: dict[str, deque[tuple[int, str]]] = {}
        self._delays: dict[str, float] = {}
        self._host, self._port = host, port
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="fake-sglang")
        self._runner: web.AppRunner | None = None
        self.url = ""

    # ---- scripting

    def fail(
        self, path: str, *, status: int = 400, message: str = "scripted failure", times: int = 1
    ) -> None:
        """The next ``times`` requests to ``path`` answer ``status`` with ``message``."""
        self._failures.setdefault(path, deque()).extend([(status, message)] * times)

    def delay(self, path: str, seconds: float) -> None:
        self._delays[path] = seconds

    def paths(self) -> list[str]:
        return [call.path for call in self.calls]

    # ---- lifecycle

    def start(self) -> FakeSGLang:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fake SGLang server did not start")
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> FakeSGLang:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._runner = web.AppRunner(self._app(), access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, self._host, self._port)
        self._loop.run_until_complete(site.start())
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    # ---- the app

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._record])
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/model_info", self._model_info)
        app.router.add_get("/health", self._health)
        app.router.add_get("/health_generate", self._health_generate)
        app.router.add_post("/pause_generation", self._pause)
        app.router.add_post("/continue_generation", self._continue)
        app.router.add_route("*", "/flush_cache", self._flush)
        app.router.add_post("/update_weights_from_disk", self._update)
        return app

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        self.calls.append(Call(request.method, request.path, body))
        if seconds := self._delays.get(request.path):
            await asyncio.sleep(seconds)
        queued = self._failures.get(request.path)
        if queued:
            status, message = queued.popleft()
            if request.path == "/update_weights_from_disk":
                return web.json_response(
                    {"success": False, "message": message, "num_paused_requests": 0}, status=status
                )
            return web.json_response(
                {"object": "error", "message": message, "type": "BadRequestError", "code": status},
                status=status,
            )
        response: web.StreamResponse = await handler(request)
        return response

    async def _chat(self, request: web.Request) -> web.Response:
        body = await _body(request)
        if body.get("stream") and body.get("return_prompt_token_ids"):
            return _error(
                "return_prompt_token_ids is not supported with streaming. "
                "Please set stream=false when using return_prompt_token_ids=true."
            )
        prompt = prompt_ids_for(body.get("messages") or [])
        output = reply_ids_for(self.reply_text)
        triples = [
            [logprob_at(i), tid, chr(tid) if tid < 128 else "<|im_end|>"] for i, tid in enumerate(output)
        ]
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": self.reply_text, "reasoning_content": None},
            "logprobs": None,
            "finish_reason": "stop",
            "matched_stop": EOS_ID,
        }
        if body.get("logprobs"):
            choice["logprobs"] = {
                "content": [
                    {"token": text, "bytes": list(text.encode()), "logprob": lp, "top_logprobs": []}
                    for lp, _, text in triples
                ]
            }
        if body.get("return_prompt_token_ids"):
            choice["prompt_token_ids"] = prompt
        if body.get("return_token_ids"):
            choice["token_ids"] = output
        if body.get("return_meta_info"):
            choice["meta_info"] = {
                "id": "fake-rid",
                "finish_reason": {"type": "stop", "matched": EOS_ID},
                "prompt_tokens": len(prompt),
                "completion_tokens": len(output),
                "cached_tokens": 0,
                "weight_version": self.weight_version,
                "output_token_logprobs": triples,
            }
        return web.json_response(
            {
                "id": "fake-rid",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "default"),
                "choices": [choice],
                "usage": {
                    "prompt_tokens": len(prompt),
                    "completion_tokens": len(output),
                    "total_tokens": len(prompt) + len(output),
                },
                "metadata": {"weight_version": self.weight_version},
            }
        )

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model_path, "object": "model"}]})

    async def _model_info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "model_path": self.model_path,
                "tokenizer_path": self.model_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": self.report_version or self.weight_version,
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": "qwen2",
                "architectures": ["Qwen2ForCausalLM"],
            }
        )

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _health_generate(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.healthy else 503)

    async def _pause(self, request: web.Request) -> web.Response:
        mode = (await _body(request)).get("mode", "abort")
        if mode not in ("abort", "retract", "in_place"):
            return _error(f"unknown pause mode {mode!r}")
        self.paused = mode
        return web.json_response({"status": "ok"})

    async def _continue(self, request: web.Request) -> web.Response:
        self.paused = None
        return web.json_response({"status": "ok"})

    async def _flush(self, request: web.Request) -> web.Response:
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details.\n")

    async def _update(self, request: web.Request) -> web.Response:
        body = await _body(request)
        if not isinstance(body.get("model_path"), str):
            return web.json_response(
                {"detail": [{"type": "missing", "loc": ["body", "model_path"], "msg": "Field required"}]},
                status=422,
            )
        self.model_path = body["model_path"]
        if body.get("weight_version") is not None:
            self.weight_version = str(body["weight_version"])
        return web.json_response(
            {"success": True, "message": "Succeeded to update model weights.", "num_paused_requests": 0}
        )


async def _body(request: web.Request) -> Any:
    raw = await request.read()  # aiohttp keeps the bytes the recording middleware already read
    try:
        return (json.loads(raw) if raw else None) or {}
    except ValueError:
        return {}


def _error(message: str, status: int = 400) -> web.Response:
    return web.json_response(
        {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": status},
        status=status,
    )


# ---------------------------------------------------------------------------------- as a process


def install_fake_launcher(directory: Path) -> dict[str, str]:
    """Write ``<directory>/sglang/launch_server.py`` running :func:`main`; the env to launch with."""
    package = directory / "sglang"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text('"""A fake sglang package for reef tests."""\n')
    (package / "launch_server.py").write_text(
        "from tests.gpu.fake_sglang import main\n\nraise SystemExit(main())\n"
    )
    return {"PYTHONPATH": os.pathsep.join([str(directory), str(ROOT)])}


def main(argv: list[str] | None = None) -> int:
    """``python -m sglang.launch_server``'s stand-in: the flags reef passes, the rest ignored."""
    parser = argparse.ArgumentParser(prog="sglang.launch_server (fake)")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--weight-version", default="default")
    args, unknown = parser.parse_known_args(argv)
    print(f"[fake-sglang] model_path={args.model_path} port={args.port} ignored={unknown}", flush=True)

    if message := os.environ.get("FAKE_SGLANG_EXIT"):
        print("Traceback (most recent call last):", flush=True)
        print(f"RuntimeError: {message}", flush=True)
        return 3
    if pidfile := os.environ.get("FAKE_SGLANG_CHILD_PIDFILE"):
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        Path(pidfile).write_text(str(worker.pid))
    time.sleep(float(os.environ.get("FAKE_SGLANG_STARTUP_DELAY", "0")))

    stopping = threading.Event()
    if os.environ.get("FAKE_SGLANG_IGNORE_SIGTERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    server = FakeSGLang(model_path=args.model_path, weight_version=args.weight_version, port=args.port)
    server.start()
    print("The server is fired up and ready to roll!", flush=True)
    while not stopping.wait(0.1):  # a timed wait lets the SIGTERM handler run promptly
        pass
    server.stop()
    print("[fake-sglang] stopped on SIGTERM", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
