"""Training on reef's scored samples with slime, as a batch job over a replay file.

Owns: turning scored samples (the engine's own token ids and behaviour logprobs, a reward, a
comparison group) into slime's debug-rollout file (``torch.save({"rollout_id", "samples"})`` of
``Sample.to_dict()``-shaped dicts), the ``train.py --debug-train-only --load-debug-rollout-data``
command line, running it with a log and a deadline, and checking the exported HF checkpoint.
Does not own: serving or the hot-swap (``reef_core.upstream.sglang`` loads the exported directory
with ``update_weights_from_disk``), committing checkpoints (the store), slime's own arguments for
the model, parallelism and algorithm (``SlimeJob.extra_args``).

GPU-only and optional (``weights.md`` §2.4 option 2, §6 (c) phase 1).  slime runs from its own
image and environment; this module never imports slime, and imports torch only when writing.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reef_core.errors import InvalidInput, ReefError, StoreError

__all__ = [
    "ScoredSample",
    "SlimeJob",
    "TrainingFailed",
    "rollout_file",
    "run_training",
    "sample_dicts",
    "write_rollout",
]

_LOG_TAIL = 4000
_STATUS_COMPLETED = "completed"  # slime's Sample.Status.COMPLETED.value


class TrainingFailed(ReefError):
    """slime exited non-zero, ran past its deadline, or exported no usable checkpoint."""

    code = "training_failed"

    def __init__(self, message: str, *, returncode: int | None = None, log_tail: str = "") -> None:
        super().__init__(message)
        self.returncode = returncode
        self.log_tail = log_tail


@dataclass(frozen=True)
class ScoredSample:
    """One recorded exchange in token space, scored.  ``group`` names its comparison group."""

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    reward: float
    group: str
    weight_version: str | None = None


def sample_dicts(samples: Sequence[ScoredSample]) -> list[dict[str, Any]]:
    """slime ``Sample`` dicts (as ``Sample.to_dict()`` writes them, for ``Sample.from_dict``).

    Samples of one group are made contiguous (groups in order of first appearance, samples in
    their given order), because slime normalises GRPO rewards over consecutive runs of
    ``--n-samples-per-prompt`` samples.  Only long-standing ``Sample`` fields are written, so
    older slime commits whose ``from_dict`` passes everything to ``Sample(**data)`` accept them.
    """
    if not samples:
        raise InvalidInput("a rollout needs at least one sample", field="samples")
    groups: dict[str, list[tuple[int, ScoredSample]]] = {}
    for position, sample in enumerate(samples):
        _check(sample, position)
        groups.setdefault(sample.group, []).append((position, sample))
    rows: list[dict[str, Any]] = []
    for group_index, (group, members) in enumerate(groups.items()):
        for position, sample in members:
            n = len(sample.response_ids)
            rows.append(
                {
                    "group_index": group_index,
                    "index": len(rows),
                    "prompt": "",  # token ids are authoritative; slime never re-tokenizes them
                    "tokens": [*sample.prompt_ids, *sample.response_ids],
                    "response": "",
                    "response_length": n,
                    "label": None,
                    "reward": float(sample.reward),
                    "loss_mask": [1] * n,
                    "weight_versions": [sample.weight_version] if sample.weight_version else [],
                    "rollout_log_probs": [float(lp) for lp in sample.logprobs],
                    "status": _STATUS_COMPLETED,
                    "metadata": {"reef_group": group, "reef_position": position},
                }
            )
    return rows


def _check(sample: ScoredSample, position: int) -> None:
    where = f"samples[{position}]"
    if not sample.prompt_ids:
        raise InvalidInput(f"{where} has no prompt tokens", field=f"{where}.prompt_ids")
    if not sample.response_ids:
        raise InvalidInput(f"{where} has no response tokens", field=f"{where}.response_ids")
    for name in ("prompt_ids", "response_ids"):
        ids = getattr(sample, name)
        if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
            raise InvalidInput(f"{where}.{name} must be non-negative token ids", field=f"{where}.{name}")
    if len(sample.logprobs) != len(sample.response_ids):
        raise InvalidInput(
            f"{where} has {len(sample.response_ids)} response tokens but {len(sample.logprobs)} logprobs",
            field=f"{where}.logprobs",
        )
    if not all(math.isfinite(lp) and lp <= 0 for lp in sample.logprobs):
        raise InvalidInput(f"{where}.logprobs must be finite and ≤ 0", field=f"{where}.logprobs")
    if not math.isfinite(sample.reward):
        raise InvalidInput(f"{where}.reward must be finite", field=f"{where}.reward")
    if not sample.group:
        raise InvalidInput(f"{where} has no group", field=f"{where}.group")


def rollout_file(directory: Path, rollout_id: int) -> Path:
    return directory / f"rollout_{rollout_id:06d}.pt"


def write_rollout(samples: Sequence[ScoredSample], directory: Path, rollout_id: int) -> Path:
    """Write slime's debug rollout file for ``rollout_id`` into ``directory``; its path."""
    if rollout_id < 0:
        raise InvalidInput("rollout_id must be ≥ 0", field="rollout_id")
    rows = sample_dicts(samples)
    import torch  # lazily: the CPU path never needs this module, and slime hosts bring their own

    path = rollout_file(directory, rollout_id)
    partial = path.with_name(path.name + ".partial")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        torch.save({"rollout_id": rollout_id, "samples": rows}, partial)
        os.replace(partial, path)
    except OSError as exc:
        raise StoreError(f"cannot write the rollout file {path}: {exc}") from exc
    return path


def _literal(path: Path) -> str:
    """slime passes these paths through ``str.format(rollout_id=…)``; keep them literal."""
    return str(path).replace("{", "{{").replace("}", "}}")


@dataclass(frozen=True)
class SlimeJob:
    """One slime checkout and where its outputs go.

    ``extra_args`` carries what reef cannot know: the model's architecture flags (or
    ``--megatron-to-hf-mode bridge``), parallelism and GPU counts, and the algorithm and batch
    sizes (``--advantage-estimator grpo``, ``--rollout-batch-size`` × ``--n-samples-per-prompt``
    = samples per rollout, ``--global-batch-size``).
    """

    slime_dir: Path
    hf_checkpoint: Path
    save_dir: Path
    extra_args: tuple[str, ...] = ()
    python: str = sys.executable

    def export_dir(self, rollout_id: int) -> Path:
        return self.save_dir / "hf" / f"rollout_{rollout_id:06d}"

    def command(self, rollout_path: Path, rollout_id: int) -> list[str]:
        return [
            self.python,
            str(self.slime_dir / "train.py"),
            "--debug-train-only",  # slime starts no SGLang engines and syncs no weights
            "--load-debug-rollout-data",
            _literal(rollout_path),
            "--hf-checkpoint",
            str(self.hf_checkpoint),
            "--start-rollout-id",
            str(rollout_id),
            "--num-rollout",
            str(rollout_id + 1),
            "--save",
            str(self.save_dir / "megatron"),
            "--save-interval",
            "1",
            "--save-hf",
            _literal(self.export_dir(rollout_id)),
            *self.extra_args,
        ]


def run_training(
    job: SlimeJob,
    samples: Sequence[ScoredSample],
    rollout_id: int,
    *,
    timeout: float,
    log_path: Path,
    env: Mapping[str, str] | None = None,
) -> Path:
    """Write the rollout, run one slime training step, and return the exported HF directory.

    The directory holds ``config.json`` and at least one ``*.safetensors``, ready for
    ``SGLangRuntime.swap_weights``.  ``env`` is merged over this process's environment.
    """
    rollout = write_rollout(samples, job.save_dir / "rollouts", rollout_id)
    command = job.command(rollout, rollout_id)
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = log_path.open("wb")
    except OSError as exc:
        raise StoreError(f"cannot open the training log {log_path}: {exc}") from exc
    with log:
        try:
            process = subprocess.Popen(
                command,
                cwd=job.slime_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,  # a timeout takes Ray's and Megatron's workers down too
            )
        except OSError as exc:
            raise TrainingFailed(f"cannot start slime ({command[0]}): {exc}") from exc
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            tail = _tail(log_path)
            raise TrainingFailed(
                f"slime ran past {timeout:g}s on rollout {rollout_id}; log tail:\n{tail}",
                returncode=process.returncode,
                log_tail=tail,
            ) from None
    if code != 0:
        tail = _tail(log_path)
        raise TrainingFailed(
            f"slime exited with code {code} on rollout {rollout_id}; log tail:\n{tail}",
            returncode=code,
            log_tail=tail,
        )
    exported = job.export_dir(rollout_id)
    missing = [
        what
        for what, ok in (
            ("config.json", (exported / "config.json").is_file()),
            ("*.safetensors", exported.is_dir() and any(exported.glob("*.safetensors"))),
        )
        if not ok
    ]
    if missing:
        tail = _tail(log_path)
        raise TrainingFailed(
            f"slime finished rollout {rollout_id} but {exported} lacks {' and '.join(missing)}; "
            f"log tail:\n{tail}",
            returncode=code,
            log_tail=tail,
        )
    return exported


def _kill_group(process: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    _signal_group(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(process.pid, signal.SIGKILL)  # stragglers die with the group too
    process.wait()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: Path, chars: int = _LOG_TAIL) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - chars))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
