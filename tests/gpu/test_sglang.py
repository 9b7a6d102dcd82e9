"""SGLangRuntime against the scripted SGLang: token-exact chat, the hot-swap order, the process."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from reef_core.errors import (
    EngineExited,
    InvalidInput,
    TokenCaptureError,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
    WeightSwapError,
)
from reef_core.upstream.sglang import SGLangLaunch, SGLangRuntime
from reef_core.upstream.sglang_tokens import parse_tokenized_chat
from tests.gpu.fake_sglang import FakeSGLang, install_fake_launcher, logprob_at, prompt_ids_for, reply_ids_for

T = TypeVar("T")
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
SWAP = ["/pause_generation", "/update_weights_from_disk", "/continue_generation", "/model_info"]


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def fake() -> Iterator[FakeSGLang]:
    with FakeSGLang(weight_version="v0") as server:
        yield server


async def _with(url: str, action: Any) -> Any:
    runtime = SGLangRuntime.attach(url)
    try:
        return await action(runtime)
    finally:
        await runtime.close()


# ----------------------------------------------------------------------------------- launch spec


def test_launch_command_is_sglangs_own_entrypoint():
    spec = SGLangLaunch("/ckpt/v1", port=31000, weight_version="abc123", python="/sgl/bin/python")
    assert spec.command() == [
        "/sgl/bin/python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/ckpt/v1",
        "--host",
        "127.0.0.1",
        "--port",
        "31000",
        "--weight-version",
        "abc123",
        "--disable-radix-cache",
    ]
    assert "--weight-version" not in SGLangLaunch("/m", extra_args=()).command()
    assert SGLangLaunch("/m", host="0.0.0.0", port=5).url == "http://127.0.0.1:5"
    assert SGLangLaunch("/m", host="::", port=5).url == "http://[::1]:5"
    with pytest.raises(InvalidInput):
        SGLangLaunch("/m", port=0)
    with pytest.raises(InvalidInput):
        SGLangLaunch("")


# ------------------------------------------------------------------------------------------- chat


def test_chat_returns_the_engines_tokens_and_logprobs(fake: FakeSGLang):
    chat = run(_with(fake.url, lambda rt: rt.chat({"model": "default", "messages": MESSAGES})))
    expected = reply_ids_for(fake.reply_text)
    assert chat.prompt_ids == prompt_ids_for(MESSAGES)
    assert chat.output_ids == expected
    assert chat.logprobs == [logprob_at(i) for i in range(len(expected))]
    assert chat.weight_version == "v0"
    assert chat.response["choices"][0]["message"]["content"] == fake.reply_text
    sent = fake.calls[-1].body
    assert sent["stream"] is False and sent["logprobs"] is True
    assert sent["return_prompt_token_ids"] is True and sent["return_token_ids"] is True
    assert sent["messages"] == MESSAGES


def test_chat_refuses_what_token_capture_cannot_do(fake: FakeSGLang):
    with pytest.raises(InvalidInput) as caught:
        run(_with(fake.url, lambda rt: rt.chat({"messages": MESSAGES, "stream": True})))
    assert caught.value.field == "stream"
    with pytest.raises(InvalidInput):
        run(_with(fake.url, lambda rt: rt.chat({"messages": MESSAGES, "n": 2})))
    with pytest.raises(InvalidInput):
        run(_with(fake.url, lambda rt: rt.chat({"prompt": "hi"})))
    assert fake.calls == []


def _response(**choice: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": {"content": "ab"}, **choice}]}


def test_parse_falls_back_to_meta_info_and_the_documented_alias():
    triples = [[-0.5, 97, "a"], [-0.25, 98, "b"]]
    meta_only = parse_tokenized_chat(
        _response(
            prompt_token_ids=[1, 2], meta_info={"output_token_logprobs": triples, "weight_version": "w"}
        )
    )
    assert (meta_only.output_ids, meta_only.logprobs, meta_only.weight_version) == (
        [97, 98],
        [-0.5, -0.25],
        "w",
    )
    alias = parse_tokenized_chat(
        _response(
            prompt_token_ids=[1],
            response_token_ids=[5, 6],
            logprobs={"content": [{"logprob": -1.0}, {"logprob": -2.0}]},
        )
    )
    assert (alias.prompt_ids, alias.output_ids, alias.logprobs, alias.weight_version) == (
        [1],
        [5, 6],
        [-1.0, -2.0],
        None,
    )


@pytest.mark.parametrize(
    "choice",
    [
        {"token_ids": [1], "logprobs": {"content": [{"logprob": -1.0}]}},  # no prompt ids
        {"prompt_token_ids": [1], "logprobs": {"content": [{"logprob": -1.0}]}},  # no output ids
        {"prompt_token_ids": [1], "token_ids": [1]},  # no logprobs
        {"prompt_token_ids": [1], "token_ids": [1, 2], "logprobs": {"content": [{"logprob": -1.0}]}},
        {"prompt_token_ids": ["x"], "token_ids": [1], "logprobs": {"content": [{"logprob": -1.0}]}},
    ],
)
def test_parse_rejects_answers_without_usable_tokens(choice: dict[str, Any]):
    with pytest.raises(TokenCaptureError):
        parse_tokenized_chat(_response(**choice))


# ----------------------------------------------------------------------------------- HTTP errors


def test_status_and_transport_errors_become_reef_errors(fake: FakeSGLang):
    fake.fail("/v1/chat/completions", status=400, message="context too long")
    with pytest.raises(UpstreamRejected) as rejected:
        run(_with(fake.url, lambda rt: rt.chat({"messages": MESSAGES})))
    assert rejected.value.status == 400 and b"context too long" in rejected.value.body

    fake.fail("/model_info", status=503, message="overloaded")
    with pytest.raises(UpstreamUnavailable, match="overloaded"):
        run(_with(fake.url, lambda rt: rt.model_info()))

    fake.delay("/v1/chat/completions", 1.0)
    with pytest.raises(UpstreamTimeout):
        run(_with(fake.url, lambda rt: rt.chat({"messages": MESSAGES}, timeout=0.2)))

    with pytest.raises(UpstreamUnavailable):
        run(_with(f"http://127.0.0.1:{free_port()}", lambda rt: rt.weight_version()))


def test_wait_ready_times_out_while_unhealthy(fake: FakeSGLang):
    fake.healthy = False
    with pytest.raises(UpstreamTimeout, match="503"):
        run(_with(fake.url, lambda rt: rt.wait_ready(0.6)))
    fake.healthy = True
    info = run(_with(fake.url + "/v1", lambda rt: rt.wait_ready(5)))
    assert info["weight_version"] == "v0"


# ------------------------------------------------------------------------------------------- swap


def test_swap_pauses_updates_continues_then_verifies(fake: FakeSGLang):
    result = run(_with(fake.url, lambda rt: rt.swap_weights("/ckpt/v1", "v1")))
    assert fake.paths() == SWAP
    assert fake.calls[0].body == {"mode": "retract"}
    assert fake.calls[1].body == {"model_path": "/ckpt/v1", "weight_version": "v1", "flush_cache": True}
    assert (result.weight_version, result.model_path, fake.paused) == ("v1", "/ckpt/v1", None)
    assert run(_with(fake.url, lambda rt: rt.weight_version())) == "v1"


def test_a_failed_update_still_continues_generation(fake: FakeSGLang):
    fake.fail("/update_weights_from_disk", message="Failed to load weights: shape mismatch in lm_head")
    with pytest.raises(WeightSwapError) as caught:
        run(_with(fake.url, lambda rt: rt.swap_weights("/ckpt/bad", "v2")))
    assert caught.value.stage == "update"
    assert "shape mismatch in lm_head" in caught.value.message
    assert caught.value.server_message == "Failed to load weights: shape mismatch in lm_head"
    assert fake.paths() == SWAP[:3]
    assert fake.paused is None and fake.weight_version == "v0"


def test_an_unreported_version_fails_the_swap(fake: FakeSGLang):
    fake.report_version = "v0"
    with pytest.raises(WeightSwapError, match="'v0', expected 'v3'") as caught:
        run(_with(fake.url, lambda rt: rt.swap_weights("/ckpt/v3", "v3")))
    assert caught.value.stage == "verify"
    assert fake.paths() == SWAP


def test_a_failed_pause_skips_the_update_but_still_continues(fake: FakeSGLang):
    fake.fail("/pause_generation", status=500, message="scheduler busy")
    with pytest.raises(WeightSwapError, match="scheduler busy") as caught:
        run(_with(fake.url, lambda rt: rt.swap_weights("/ckpt/v4", "v4")))
    assert caught.value.stage == "pause"
    assert fake.paths() == ["/pause_generation", "/continue_generation"]


def test_a_failed_continue_is_reported(fake: FakeSGLang):
    fake.fail("/continue_generation", status=500, message="still paused")
    with pytest.raises(WeightSwapError, match="still paused") as caught:
        run(_with(fake.url, lambda rt: rt.swap_weights("/ckpt/v5", "v5")))
    assert caught.value.stage == "continue"


def test_swap_arguments_are_checked(fake: FakeSGLang):
    with pytest.raises(InvalidInput):
        run(_with(fake.url, lambda rt: rt.swap_weights("", "v1")))
    with pytest.raises(InvalidInput):
        run(_with(fake.url, lambda rt: rt.swap_weights("/ckpt", "")))
    assert fake.calls == []


# ---------------------------------------------------------------------------- managed process


def _spec(**kw: Any) -> SGLangLaunch:
    return SGLangLaunch("/models/tiny", port=free_port(), python=sys.executable, **kw)


def test_launch_wait_ready_swap_and_stop(tmp_path: Path):
    env = {**install_fake_launcher(tmp_path / "pkg"), "FAKE_SGLANG_STARTUP_DELAY": "0.3"}
    log = tmp_path / "logs" / "sglang.log"
    runtime = SGLangRuntime.launch(_spec(weight_version="v7"), env=env, log_path=log)

    async def scenario() -> tuple[dict[str, Any], str, int | None]:
        async with runtime:
            info = await runtime.wait_ready(20)
            chat = await runtime.chat({"messages": MESSAGES})
            await runtime.swap_weights("/models/tiny-v8", "v8")
            assert chat.weight_version == "v7" and runtime.returncode is None
            return info, str(await runtime.weight_version()), await runtime.stop()

    info, version, code = run(scenario())
    assert info["model_path"] == "/models/tiny" and info["weight_version"] == "v7"
    assert version == "v8" and code == 0
    text = log.read_text()
    assert "ignored=['--disable-radix-cache']" in text and "stopped on SIGTERM" in text


def test_an_early_exit_raises_with_the_log_tail(tmp_path: Path):
    env = {**install_fake_launcher(tmp_path / "pkg"), "FAKE_SGLANG_EXIT": "CUDA out of memory (fake)"}
    runtime = SGLangRuntime.launch(_spec(), env=env)

    async def scenario() -> None:
        async with runtime:
            await runtime.wait_ready(20)

    try:
        with pytest.raises(EngineExited, match=r"code 3[\s\S]*CUDA out of memory \(fake\)") as caught:
            run(scenario())
        assert caught.value.returncode == 3 and "Traceback" in caught.value.log_tail
    finally:
        assert runtime.log_path is not None
        runtime.log_path.unlink()


def test_stop_kills_a_group_that_ignores_sigterm(tmp_path: Path):
    pidfile = tmp_path / "worker.pid"
    env = {
        **install_fake_launcher(tmp_path / "pkg"),
        "FAKE_SGLANG_IGNORE_SIGTERM": "1",
        "FAKE_SGLANG_CHILD_PIDFILE": str(pidfile),
    }
    runtime = SGLangRuntime.launch(_spec(), env=env, log_path=tmp_path / "sglang.log")

    async def scenario() -> int | None:
        await runtime.wait_ready(20)
        code = await runtime.stop(grace=0.5)
        await runtime.close()
        return code

    assert run(scenario()) == -9
    worker = int(pidfile.read_text())
    assert _gone(worker), "the forked worker outlived stop()"


def _gone(pid: int, wait: float = 5.0) -> bool:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # an orphan killed but not yet reaped by init
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_attached_runtimes_leave_the_server_alone(fake: FakeSGLang):
    runtime = SGLangRuntime.attach(fake.url)
    assert not runtime.managed and runtime.pid is None
    assert run(runtime.stop()) is None
    assert run(_with(fake.url, lambda rt: rt.weight_version())) == "v0"


# ----------------------------------------------------------------------------------------- errors


def test_the_engines_errors_are_reef_errors_with_their_codes_and_statuses():
    from reef_core.daemon.errors import status_of
    from reef_core.errors import ReefError, UpstreamError

    swap = WeightSwapError("no", stage="update", server_message="busy")
    exited = EngineExited("gone", returncode=3, log_tail="oom")
    capture = TokenCaptureError("no ids")
    assert all(isinstance(e, UpstreamError) and isinstance(e, ReefError) for e in (swap, exited, capture))
    assert isinstance(exited, UpstreamUnavailable)
    assert [e.code for e in (swap, exited, capture)] == [
        "weight_swap_failed",
        "engine_exited",
        "token_capture_failed",
    ]
    assert [status_of(e) for e in (swap, exited, capture)] == [500, 502, 500]
    assert (swap.stage, swap.server_message, exited.returncode, exited.log_tail) == (
        "update",
        "busy",
        3,
        "oom",
    )
