"""The slime batch-job backend: the replay file slime loads, and one training run with a fake train.py."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from recipes.grpo.slime_backend import (
    ScoredSample,
    SlimeJob,
    TrainingFailed,
    run_training,
    write_rollout,
)
from reef_core.errors import InvalidInput

torch = pytest.importorskip("torch")  # the optional ``model`` extra
ROOT = Path(__file__).resolve().parents[2]


def _sample(group: str, prompt: list[int], response: list[int], reward: float, version: str | None = "v1"):
    logprobs = [-0.1 * (i + 1) for i in range(len(response))]
    return ScoredSample(prompt, response, logprobs, reward, group, version)


SAMPLES = [
    _sample("a", [1, 2, 3], [10, 11], 1.0),
    _sample("b", [4, 5], [12, 13, 14], 0.0, None),
    _sample("a", [1, 2, 3], [15], -1.0),
]


def test_write_rollout_is_what_slime_loads(tmp_path: Path):
    path = write_rollout(SAMPLES, tmp_path / "rollouts", 7)
    assert path == tmp_path / "rollouts" / "rollout_000007.pt"
    data = torch.load(path)  # plain values only, so the safe (weights_only) loader reads it
    assert data["rollout_id"] == 7
    rows = data["samples"]
    # group "a" made contiguous: slime normalises GRPO rewards over consecutive samples
    assert [(r["group_index"], r["index"], r["metadata"]["reef_group"]) for r in rows] == [
        (0, 0, "a"),
        (0, 1, "a"),
        (1, 2, "b"),
    ]
    for row, sample in zip(rows, [SAMPLES[0], SAMPLES[2], SAMPLES[1]], strict=True):
        assert row["tokens"] == sample.prompt_ids + sample.response_ids
        assert row["response_length"] == len(sample.response_ids) == len(row["loss_mask"])
        assert row["loss_mask"] == [1] * row["response_length"]
        assert row["rollout_log_probs"] == pytest.approx(sample.logprobs)
        assert row["reward"] == sample.reward and isinstance(row["reward"], float)
        assert row["status"] == "completed"
        assert row["weight_versions"] == ([sample.weight_version] if sample.weight_version else [])
    assert not list(path.parent.glob("*.partial"))


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (ScoredSample([1], [2, 3], [-0.1], 1.0, "g"), "samples[0].logprobs"),
        (ScoredSample([1], [], [], 1.0, "g"), "samples[0].response_ids"),
        (ScoredSample([], [2], [-0.1], 1.0, "g"), "samples[0].prompt_ids"),
        (ScoredSample([1], [2], [-0.1], math.nan, "g"), "samples[0].reward"),
        (ScoredSample([1], [2], [0.5], 1.0, "g"), "samples[0].logprobs"),
        (ScoredSample([1], [-2], [-0.1], 1.0, "g"), "samples[0].response_ids"),
        (ScoredSample([1], [2], [-0.1], 1.0, ""), "samples[0].group"),
    ],
)
def test_write_rollout_refuses_bad_samples(tmp_path: Path, bad: ScoredSample, field: str):
    with pytest.raises(InvalidInput) as caught:
        write_rollout([bad], tmp_path, 0)
    assert caught.value.field == field
    assert not tmp_path.joinpath("rollout_000000.pt").exists()


def test_write_rollout_needs_samples(tmp_path: Path):
    with pytest.raises(InvalidInput):
        write_rollout([], tmp_path, 0)


def test_command_drives_one_debug_train_step(tmp_path: Path):
    job = SlimeJob(
        Path("/opt/slime"), Path("/ckpt/base"), Path("/runs/{x}"), ("--advantage-estimator", "grpo"), "/py"
    )
    assert job.command(Path("/runs/{x}/rollouts/rollout_000003.pt"), 3) == [
        "/py",
        "/opt/slime/train.py",
        "--debug-train-only",
        "--load-debug-rollout-data",
        "/runs/{{x}}/rollouts/rollout_000003.pt",
        "--hf-checkpoint",
        "/ckpt/base",
        "--start-rollout-id",
        "3",
        "--num-rollout",
        "4",
        "--save",
        "/runs/{x}/megatron",
        "--save-interval",
        "1",
        "--save-hf",
        "/runs/{{x}}/hf/rollout_000003",
        "--advantage-estimator",
        "grpo",
    ]
    assert job.export_dir(3) == Path("/runs/{x}/hf/rollout_000003")


# A stand-in for slime's train.py: parses the flags reef passes, loads the replay the way slime
# does (path.format(rollout_id=…), then Sample(**dict) as older slime commits do), and "exports".
FAKE_TRAIN = textwrap.dedent(
    """
    import argparse, json, os, sys, time
    from dataclasses import dataclass, field
    from pathlib import Path

    mode = os.environ.get("FAKE_TRAIN_MODE", "ok")
    print("fake slime starting, mode", mode, flush=True)
    if mode == "fail":
        print("Traceback (most recent call last):", file=sys.stderr)
        print("RuntimeError: NCCL error: unhandled cuda error (fake)", file=sys.stderr)
        sys.exit(1)
    if mode == "hang":
        time.sleep(120)

    parser = argparse.ArgumentParser()
    parser.add_argument("--debug-train-only", action="store_true")
    parser.add_argument("--load-debug-rollout-data", required=True)
    parser.add_argument("--hf-checkpoint", required=True)
    parser.add_argument("--start-rollout-id", type=int, required=True)
    parser.add_argument("--num-rollout", type=int, required=True)
    parser.add_argument("--save", required=True)
    parser.add_argument("--save-interval", type=int, required=True)
    parser.add_argument("--save-hf", required=True)
    args, extra = parser.parse_known_args()
    assert args.debug_train_only
    if mode == "noexport":
        sys.exit(0)

    @dataclass
    class Sample:
        group_index: int | None = None
        index: int | None = None
        prompt: str = ""
        tokens: list = field(default_factory=list)
        response: str = ""
        response_length: int = 0
        label: str | None = None
        reward: float | None = None
        loss_mask: list | None = None
        weight_versions: list = field(default_factory=list)
        rollout_log_probs: list | None = None
        status: str = "pending"
        metadata: dict = field(default_factory=dict)

    import torch

    seen = []
    for rollout_id in range(args.start_rollout_id, args.num_rollout):
        path = args.load_debug_rollout_data.format(rollout_id=rollout_id)
        rows = torch.load(path, weights_only=False)["samples"]
        samples = [Sample(**row) for row in rows]
        for s in samples:
            assert len(s.loss_mask) == s.response_length == len(s.rollout_log_probs)
            assert s.status == "completed"
        seen.append(len(samples))
        out = Path(args.save_hf.format(rollout_id=rollout_id))
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps({"architectures": ["FakeForCausalLM"]}))
        (out / "model.safetensors").write_bytes(b"not really tensors")
        seen_by = {"samples": seen, "extra": extra, "hf": args.hf_checkpoint}
        (out / "seen.json").write_text(json.dumps(seen_by))
    print("fake slime done", seen, flush=True)
    """
)


def _job(tmp_path: Path) -> SlimeJob:
    slime = tmp_path / "slime"
    slime.mkdir()
    (slime / "train.py").write_text(FAKE_TRAIN)
    return SlimeJob(slime, tmp_path / "base", tmp_path / "run{1}", ("--n-samples-per-prompt", "2"))


def test_run_training_returns_the_exported_checkpoint(tmp_path: Path):
    job = _job(tmp_path)
    log = tmp_path / "logs" / "train.log"
    exported = run_training(job, SAMPLES, 2, timeout=60, log_path=log)
    assert exported == tmp_path / "run{1}" / "hf" / "rollout_000002"
    seen = json.loads((exported / "seen.json").read_text())
    assert seen == {"samples": [3], "extra": ["--n-samples-per-prompt", "2"], "hf": str(tmp_path / "base")}
    assert "fake slime done [3]" in log.read_text()


def test_a_failing_train_raises_with_the_log_tail(tmp_path: Path):
    job = _job(tmp_path)
    with pytest.raises(TrainingFailed, match=r"code 1[\s\S]*NCCL error") as caught:
        run_training(
            job, SAMPLES, 0, timeout=60, log_path=tmp_path / "t.log", env={"FAKE_TRAIN_MODE": "fail"}
        )
    assert caught.value.returncode == 1 and "Traceback" in caught.value.log_tail


def test_a_clean_exit_without_an_export_is_a_failure(tmp_path: Path):
    job = _job(tmp_path)
    with pytest.raises(TrainingFailed, match=r"lacks config\.json and \*\.safetensors"):
        run_training(
            job, SAMPLES, 0, timeout=60, log_path=tmp_path / "t.log", env={"FAKE_TRAIN_MODE": "noexport"}
        )


def test_a_hung_train_is_killed_at_the_deadline(tmp_path: Path):
    job = _job(tmp_path)
    with pytest.raises(TrainingFailed, match=r"ran past 0\.5s") as caught:
        run_training(
            job, SAMPLES, 0, timeout=0.5, log_path=tmp_path / "t.log", env={"FAKE_TRAIN_MODE": "hang"}
        )
    assert "mode hang" in caught.value.log_tail


def test_the_gpu_modules_import_without_torch_sglang_or_slime():
    code = (
        "import sys; import reef_core.upstream.sglang, recipes.grpo.slime_backend; "
        "assert not {'torch', 'sglang', 'slime'} & set(sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)
