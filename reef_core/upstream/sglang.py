"""Driving an SGLang 0.5.23 server: launch or attach, token-exact chat, and weight hot-swaps.

Owns: the command line that starts ``sglang.launch_server``, the managed process group and its
log, readiness, asking for the SGLang-specific chat fields that return the engine's own prompt and
output token ids with per-token logprobs, and the disk hot-swap
(pause → update_weights_from_disk → continue → verify ``/model_info``).
Does not own: reading those fields (:mod:`reef_core.upstream.sglang_tokens`), its errors
(``reef_core.errors``), recording or scoring (the daemon), writing checkpoints (the store, the
trainer).

GPU-only and optional.  SGLang pins its own torch and transformers, so it always runs in a
separate environment and this module reaches it over HTTP only: it never imports ``sglang``, and
nothing on the CPU path imports this module.
May import: aiohttp, ``reef_core.errors``, ``reef_core.upstream.sglang_tokens``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

from reef_core.errors import (
    EngineExited,
    InvalidInput,
    StoreError,
    TokenCaptureError,
    UpstreamError,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
    WeightSwapError,
)
from reef_core.upstream.sglang_tokens import TokenizedChat, parse_tokenized_chat

__all__ = ["SGLangLaunch", "SGLangRuntime", "SwapResult"]

_LOG_TAIL = 4000  # characters of the server log quoted in errors
_PREVIEW = 500  # characters of a server answer quoted in errors
_CONTROL_TIMEOUT = 60.0  # pause, continue, flush, model_info
_CONTINUE_FLOOR = 30.0  # continue_generation gets at least this long, even past the swap deadline
_POLL_FIRST, _POLL_MAX = 0.1, 1.0  # readiness polling interval: start, cap


# ------------------------------------------------------------------------------------------- values


@dataclass(frozen=True)
class SGLangLaunch:
    """How to start one server.  ``python`` is the interpreter of SGLang's own environment."""

    model_path: str
    host: str = "127.0.0.1"
    port: int = 30000
    weight_version: str | None = None
    python: str = sys.executable
    # reef records exact tokens; a prefix cache kept across a swap would serve stale KV
    extra_args: tuple[str, ...] = ("--disable-radix-cache",)

    def __post_init__(self) -> None:
        if not self.model_path:
            raise InvalidInput("an SGLang launch needs a model path", field="model_path")
        if not 0 < self.port < 65536:
            raise InvalidInput(f"port {self.port} is out of range", field="port")

    def command(self) -> list[str]:
        cmd = [self.python, "-m", "sglang.launch_server", "--model-path", self.model_path]
        cmd += ["--host", self.host, "--port", str(self.port)]
        if self.weight_version:
            cmd += ["--weight-version", self.weight_version]
        return [*cmd, *self.extra_args]

    @property
    def url(self) -> str:
        """Where a client on this machine reaches the server (wildcard binds become loopback)."""
        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"


@dataclass(frozen=True)
class SwapResult:
    weight_version: str
    model_path: str
    seconds: float
    num_paused_requests: int = 0
    message: str = ""


@dataclass(frozen=True)
class _Reply:
    status: int
    body: bytes
    content_type: str = ""

    def text(self) -> str:
        return self.body[:_PREVIEW].decode("utf-8", "replace").strip()

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


# ------------------------------------------------------------------------------------------ runtime


class SGLangRuntime:
    """One SGLang server, launched here (:meth:`launch`) or already running (:meth:`attach`).

    Use as ``async with``: leaving stops a managed process and closes the HTTP session.
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        process: subprocess.Popen[bytes] | None = None,
        log_path: Path | None = None,
    ) -> None:
        base = url.rstrip("/")
        self.url = base[: -len("/v1")] if base.endswith("/v1") else base
        self.log_path = log_path
        self._process = process
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._session: aiohttp.ClientSession | None = None
        self._swap_lock = asyncio.Lock()

    # ---- lifecycle

    @classmethod
    def attach(cls, url: str, *, api_key: str | None = None) -> SGLangRuntime:
        return cls(url, api_key=api_key)

    @classmethod
    def launch(
        cls,
        spec: SGLangLaunch,
        *,
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
        api_key: str | None = None,
    ) -> SGLangRuntime:
        """Start the server in a process group of its own; stdout and stderr go to ``log_path``.

        ``env`` is merged over this process's environment (e.g. ``CUDA_VISIBLE_DEVICES``).  Without
        ``log_path`` the log goes to a temporary file, so errors can always quote its tail.
        """
        try:
            if log_path is None:
                fd, name = tempfile.mkstemp(prefix="reef-sglang-", suffix=".log")
                os.close(fd)
                log_path = Path(name)
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log = log_path.open("ab")
        except OSError as exc:
            raise StoreError(f"cannot open the SGLang log {log_path}: {exc}") from exc
        full_env = {**os.environ, **(env or {})}
        try:
            with log:
                process = subprocess.Popen(
                    spec.command(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=full_env,
                    start_new_session=True,  # stop() signals the whole group: SGLang forks workers
                )
        except OSError as exc:
            raise EngineExited(f"cannot start {spec.python!r}: {exc}", returncode=None, log_tail="") from exc
        return cls(spec.url, api_key=api_key, process=process, log_path=log_path)

    @property
    def managed(self) -> bool:
        return self._process is not None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def returncode(self) -> int | None:
        return self._process.poll() if self._process is not None else None

    def log_tail(self, chars: int = _LOG_TAIL) -> str:
        if self.log_path is None:
            return ""
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - chars))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    async def stop(self, grace: float = 15.0) -> int | None:
        """Terminate the managed process group, SIGKILL it after ``grace`` seconds; the exit code.

        Attached servers are left alone (returns None).
        """
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            _signal_group(process.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while process.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        # stragglers (scheduler, detokenizer) die with the group even when the leader left politely
        _signal_group(process.pid, signal.SIGKILL)
        while process.poll() is None:
            await asyncio.sleep(0.02)
        return process.returncode

    async def close(self) -> None:
        """Close the HTTP session (the server, managed or not, keeps running)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> SGLangRuntime:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.stop()
        finally:
            await self.close()

    # ---- HTTP

    def _ensure(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(headers=self._headers)
        return self._session

    async def _call(
        self, method: str, path: str, *, body: Any = None, timeout: float = _CONTROL_TIMEOUT
    ) -> _Reply:
        """One request; transport failures become reef errors, the status is left to the caller."""
        try:
            async with self._ensure().request(
                method, self.url + path, json=body, timeout=aiohttp.ClientTimeout(total=timeout)
            ) as response:
                body = await response.read()
                return _Reply(response.status, body, response.headers.get("Content-Type", ""))
        except TimeoutError as exc:
            raise UpstreamTimeout(f"SGLang did not answer {method} {path} within {timeout:g}s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamUnavailable(
                f"SGLang at {self.url} unreachable ({method} {path}): {exc or type(exc).__name__}"
            ) from exc

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        reply = await self._call(method, path, **kwargs)
        _raise_for_status(reply, path)
        data = reply.json()
        if data is None and reply.body.strip():
            raise UpstreamUnavailable(f"SGLang answered {path} with non-JSON: {reply.text()}")
        return data

    # ---- readiness and info

    async def wait_ready(self, timeout: float) -> dict[str, Any]:
        """Poll ``/health_generate`` until it answers 200, then return ``/model_info``.

        A managed process that exits first raises :class:`EngineExited` with its log tail; running
        out of time raises :class:`UpstreamTimeout` (with the log tail when managed).
        """
        deadline = time.monotonic() + timeout
        interval = _POLL_FIRST
        last = "no answer yet"
        while True:
            if self._process is not None and self._process.poll() is not None:
                code = self._process.returncode
                tail = self.log_tail()
                raise EngineExited(
                    f"SGLang exited with code {code} before it was ready; log tail:\n{tail}",
                    returncode=code,
                    log_tail=tail,
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                tail = self.log_tail()
                message = f"SGLang at {self.url} not ready after {timeout:g}s (last: {last})"
                raise UpstreamTimeout(message + (f"; log tail:\n{tail}" if tail else ""))
            try:
                reply = await self._call("GET", "/health_generate", timeout=max(0.5, min(remaining, 30.0)))
            except (UpstreamUnavailable, UpstreamTimeout) as exc:
                last = exc.message
            else:
                if reply.status == 200:
                    return await self.model_info()
                last = f"/health_generate {reply.status} {reply.text()}"
            await asyncio.sleep(min(interval, max(0.0, deadline - time.monotonic())))
            interval = min(interval * 1.5, _POLL_MAX)

    async def model_info(self) -> dict[str, Any]:
        data = await self._json("GET", "/model_info")
        if not isinstance(data, dict):
            raise UpstreamUnavailable(f"SGLang /model_info is not an object: {data!r:.200}")
        return data

    async def weight_version(self) -> str | None:
        version = (await self.model_info()).get("weight_version")
        return None if version is None else str(version)

    async def flush_cache(self) -> None:
        """Clear the prefix cache.  SGLang refuses (400) while requests run or wait."""
        reply = await self._call("POST", "/flush_cache")
        _raise_for_status(reply, "/flush_cache")

    # ---- inference

    async def chat(self, body: Mapping[str, Any], *, timeout: float = 600.0) -> TokenizedChat:
        """A non-streaming chat completion that also returns the engine's tokens and logprobs."""
        if not isinstance(body.get("messages"), list):
            raise InvalidInput("a chat body needs a messages list", field="messages")
        if body.get("stream"):
            raise InvalidInput("token capture needs stream=false", field="stream")
        if body.get("n", 1) not in (None, 1):
            raise InvalidInput("token capture supports one choice (n=1)", field="n")
        request = {
            **body,
            "stream": False,
            "return_prompt_token_ids": True,
            "return_token_ids": True,
            "return_meta_info": True,  # carries [logprob, id, text]: ids survive even without token_ids
            "logprobs": True,
        }
        data = await self._json("POST", "/v1/chat/completions", body=request, timeout=timeout)
        if not isinstance(data, dict):
            raise TokenCaptureError(f"the chat answer is not an object: {data!r:.200}")
        return parse_tokenized_chat(data)

    # ---- weights

    async def swap_weights(
        self, model_path: str, weight_version: str, *, timeout: float = 600.0
    ) -> SwapResult:
        """Hot-swap to the HF checkpoint at ``model_path`` (same architecture), then verify.

        pause_generation(retract) → update_weights_from_disk{flush_cache} → continue_generation
        (always, even after a failed update, so the engine never stays paused) → ``/model_info``
        must report ``weight_version``.  No separate ``/flush_cache``: retracted requests wait in
        the queue, and SGLang refuses a standalone flush then; the update's own flush covers it.
        """
        if not model_path:
            raise InvalidInput("a weight swap needs a model path", field="model_path")
        if not weight_version:
            raise InvalidInput("a weight swap needs a weight version", field="weight_version")
        async with self._swap_lock:
            started = time.monotonic()
            deadline = started + timeout
            failure: WeightSwapError | None = None
            outcome: dict[str, Any] = {}
            try:
                failure = await self._control("pause", "/pause_generation", {"mode": "retract"}, deadline)
                if failure is None:
                    outcome, failure = await self._update(model_path, weight_version, deadline)
            finally:
                resumed = await self._control(
                    "continue", "/continue_generation", {}, max(deadline, time.monotonic() + _CONTINUE_FLOOR)
                )
            if failure is not None and resumed is not None:
                raise WeightSwapError(
                    f"{failure.message}; and then {resumed.message}",
                    stage=failure.stage,
                    server_message=failure.server_message,
                )
            if failure is not None:
                raise failure
            if resumed is not None:
                raise resumed
            try:
                reported = await self.weight_version()
            except UpstreamError as exc:
                raise WeightSwapError(
                    f"cannot verify the swap: {exc.message}", stage="verify", server_message=exc.message
                ) from exc
            if reported != weight_version:
                raise WeightSwapError(
                    f"after the swap SGLang reports weight_version {reported!r}, expected {weight_version!r}",
                    stage="verify",
                    server_message=str(reported),
                )
            return SwapResult(
                weight_version=weight_version,
                model_path=model_path,
                seconds=time.monotonic() - started,
                num_paused_requests=int(outcome.get("num_paused_requests") or 0),
                message=str(outcome.get("message") or ""),
            )

    async def _control(
        self, stage: str, path: str, body: dict[str, Any], deadline: float
    ) -> WeightSwapError | None:
        """POST a control call; a failure is returned (not raised) so the caller can still resume."""
        try:
            reply = await self._call("POST", path, body=body, timeout=max(1.0, deadline - time.monotonic()))
        except UpstreamError as exc:
            return WeightSwapError(f"{path} failed: {exc.message}", stage=stage, server_message=exc.message)
        if reply.status >= 400:
            return WeightSwapError(
                f"{path} answered {reply.status}: {reply.text()}", stage=stage, server_message=reply.text()
            )
        return None

    async def _update(
        self, model_path: str, weight_version: str, deadline: float
    ) -> tuple[dict[str, Any], WeightSwapError | None]:
        body = {"model_path": model_path, "weight_version": weight_version, "flush_cache": True}
        path = "/update_weights_from_disk"
        try:
            reply = await self._call("POST", path, body=body, timeout=max(1.0, deadline - time.monotonic()))
        except UpstreamError as exc:
            return {}, WeightSwapError(
                f"{path} failed: {exc.message}", stage="update", server_message=exc.message
            )
        data = reply.json()
        outcome = data if isinstance(data, dict) else {}
        said = str(outcome.get("message") or reply.text())
        if reply.status >= 400 or outcome.get("success") is not True:
            return outcome, WeightSwapError(
                f"{path} to {weight_version!r} from {model_path} failed ({reply.status}): {said}",
                stage="update",
                server_message=said,
            )
        return outcome, None


def _raise_for_status(reply: _Reply, path: str) -> None:
    if reply.status < 400:
        return
    if reply.status < 500:
        raise UpstreamRejected(
            f"SGLang refused {path} ({reply.status}): {reply.text()}",
            status=reply.status,
            body=reply.body,
            content_type=reply.content_type,
        )
    raise UpstreamUnavailable(f"SGLang failed {path} ({reply.status}): {reply.text()}")


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
