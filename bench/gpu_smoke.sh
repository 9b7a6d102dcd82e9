#!/usr/bin/env bash
# GPU smoke test for reef's SGLang path (reef_core/upstream/sglang.py). Optional; GPU machines only.
#
#   bench/gpu_smoke.sh [MODEL]
#
# MODEL is a local Hugging Face checkpoint directory (config.json + *.safetensors), or a hub id
# already in the local HF cache.  Default: $REEF_SMOKE_MODEL, else Qwen/Qwen2.5-0.5B-Instruct.
#
# What it does, timing each step:
#   1. checks the GPU (nvidia-smi) and that $SGLANG_PYTHON can import sglang;
#   2. launches `python -m sglang.launch_server` through SGLangRuntime.launch and waits for
#      /health_generate                                                        -> launch_s
#   3. one non-streaming chat with return_prompt_token_ids / return_token_ids / logprobs, and
#      checks that prompt ids, output ids and one logprob per output token came back -> first_chat_s
#   4. copies the same weights to a new directory and hot-swaps to it under a new weight_version
#      (pause -> update_weights_from_disk -> continue), verified on /model_info     -> swap_s
#   5. chats again and checks the answer carries the new weight_version.
# It prints one JSON line of results and exits 0 on success, 1 on a failed check, 2 when the
# machine lacks a GPU, sglang or the model.
#
# Environment:
#   SGLANG_PYTHON      interpreter of the environment with sglang installed   (default: python3)
#   REEF_PYTHON        interpreter with reef's dependencies (aiohttp)         (default: .venv/bin/python)
#   SGLANG_EXTRA_ARGS  extra launch_server flags, e.g. "--mem-fraction-static 0.5 --tp 1"
#   LAUNCH_TIMEOUT     seconds to wait for the server                         (default: 900)
#   SMOKE_PORT         server port                                            (default: a free one)
#   KEEP=1             keep the work directory (server log, copied checkpoint)
#   REEF_SMOKE_FAKE=1  rehearse the script on CPU against tests/gpu/fake_sglang.py (no GPU, no sglang)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="${1:-${REEF_SMOKE_MODEL:-Qwen/Qwen2.5-0.5B-Instruct}}"
FAKE="${REEF_SMOKE_FAKE:-0}"
if [[ -z "${REEF_PYTHON:-}" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then REEF_PYTHON="$ROOT/.venv/bin/python"; else REEF_PYTHON=python3; fi
fi
SGLANG_PYTHON="${SGLANG_PYTHON:-python3}"
LAUNCH_TIMEOUT="${LAUNCH_TIMEOUT:-900}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/reef-gpu-smoke.XXXXXX")"

cleanup() {
  if [[ "${KEEP:-0}" == "1" ]]; then echo "work directory kept: $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

say() { echo "[gpu_smoke] $*" >&2; }
missing() { say "$*"; exit 2; }

# ---- 1. the machine
if [[ "$FAKE" == "1" ]]; then
  say "REEF_SMOKE_FAKE=1: rehearsing against the fake SGLang, no GPU used"
  SGLANG_PYTHON="$REEF_PYTHON"
  MODEL="$WORK/fake-model"
  mkdir -p "$MODEL"
  echo '{"architectures": ["Qwen2ForCausalLM"]}' >"$MODEL/config.json"
  printf 'fake' >"$MODEL/model.safetensors"
else
  command -v nvidia-smi >/dev/null || missing "nvidia-smi not found: this needs a machine with an NVIDIA GPU"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >&2 ||
    missing "nvidia-smi cannot talk to a GPU"
  SGLANG_VERSION="$("$SGLANG_PYTHON" -c 'import sglang; print(sglang.__version__)' 2>/dev/null)" ||
    missing "$SGLANG_PYTHON cannot import sglang (set SGLANG_PYTHON to sglang's environment)"
  say "sglang $SGLANG_VERSION via $SGLANG_PYTHON"
fi
"$REEF_PYTHON" -c 'import aiohttp' 2>/dev/null || missing "$REEF_PYTHON lacks aiohttp (set REEF_PYTHON)"

# ---- the model: a local directory, or a hub id resolved from the local cache
if [[ ! -d "$MODEL" ]]; then
  say "resolving $MODEL from the Hugging Face cache"
  MODEL="$("$SGLANG_PYTHON" -c 'import sys; from huggingface_hub import snapshot_download as s; print(s(sys.argv[1]))' "$MODEL" 2>/dev/null)" ||
    missing "no local checkpoint for ${1:-Qwen/Qwen2.5-0.5B-Instruct}: pass a directory with config.json and *.safetensors"
fi
[[ -f "$MODEL/config.json" ]] || missing "$MODEL has no config.json"
compgen -G "$MODEL/*.safetensors" >/dev/null || missing "$MODEL has no *.safetensors"

# ---- 4 (prepared now). the same weights under a new version: a real copy, symlinks resolved
SWAPPED="$WORK/ckpt/smoke-v1"
mkdir -p "$SWAPPED"
cp -rL "$MODEL"/. "$SWAPPED"/
say "model $MODEL; swap target $SWAPPED"

# ---- 2, 3, 4, 5 through SGLangRuntime
export ROOT MODEL SWAPPED WORK FAKE SGLANG_PYTHON LAUNCH_TIMEOUT
export SGLANG_EXTRA_ARGS="${SGLANG_EXTRA_ARGS:-}" SMOKE_PORT="${SMOKE_PORT:-}"
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$REEF_PYTHON" - <<'PY'
import asyncio, json, os, shlex, socket, sys, time
from pathlib import Path

from reef_core.errors import ReefError
from reef_core.upstream.sglang import SGLangLaunch, SGLangRuntime

E = os.environ


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def check(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"[gpu_smoke] FAILED: {what}")


async def main() -> dict:
    env = None
    if E["FAKE"] == "1":
        sys.path.insert(0, E["ROOT"])
        from tests.gpu.fake_sglang import install_fake_launcher

        env = install_fake_launcher(Path(E["WORK"]) / "fake-launcher")
    spec = SGLangLaunch(
        E["MODEL"],
        port=int(E["SMOKE_PORT"] or free_port()),
        weight_version="smoke-v0",
        python=E["SGLANG_PYTHON"],
        extra_args=("--disable-radix-cache", *shlex.split(E["SGLANG_EXTRA_ARGS"])),
    )
    log = Path(E["WORK"]) / "sglang.log"
    print(f"[gpu_smoke] launching: {shlex.join(spec.command())}", file=sys.stderr)
    result: dict = {"model": E["MODEL"], "command": spec.command(), "log": str(log)}
    t0 = time.monotonic()
    runtime = SGLangRuntime.launch(spec, env=env, log_path=log)
    async with runtime:
        info = await runtime.wait_ready(float(E["LAUNCH_TIMEOUT"]))
        result["launch_s"] = round(time.monotonic() - t0, 3)
        check(info.get("weight_version") == "smoke-v0", f"/model_info weight_version {info.get('weight_version')!r}")

        body = {
            "model": "default",
            "messages": [{"role": "user", "content": "Say hello in five words."}],
            "max_tokens": 32,
            "temperature": 0,
        }
        t1 = time.monotonic()
        first = await runtime.chat(body)
        result["first_chat_s"] = round(time.monotonic() - t1, 3)
        check(len(first.prompt_ids) > 0, "no prompt token ids")
        check(len(first.output_ids) > 0, "no output token ids")
        check(len(first.logprobs) == len(first.output_ids), "one logprob per output token")
        check(all(lp <= 0 for lp in first.logprobs), "logprobs are ≤ 0")
        result["first_chat"] = {
            "text": first.response["choices"][0]["message"].get("content"),
            "prompt_tokens": len(first.prompt_ids),
            "output_tokens": len(first.output_ids),
            "sum_logprob": round(sum(first.logprobs), 4),
            "weight_version": first.weight_version,
        }

        swap = await runtime.swap_weights(E["SWAPPED"], "smoke-v1")
        result["swap_s"] = round(swap.seconds, 3)
        check(await runtime.weight_version() == "smoke-v1", "weight_version after the swap")

        t2 = time.monotonic()
        second = await runtime.chat(body)
        result["second_chat_s"] = round(time.monotonic() - t2, 3)
        check(second.weight_version in (None, "smoke-v1"), f"chat after the swap says {second.weight_version!r}")
        # same weights, greedy: usually identical, but SGLang does not promise bitwise determinism
        result["same_output_after_swap"] = second.output_ids == first.output_ids
        result["stop_returncode"] = await runtime.stop()
    result["total_s"] = round(time.monotonic() - t0, 3)
    return result


try:
    print(json.dumps(asyncio.run(main())))
except ReefError as exc:
    raise SystemExit(f"[gpu_smoke] FAILED: {type(exc).__name__}: {exc}") from None
PY
say "ok"
