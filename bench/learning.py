"""Learning benchmark: what one grpo update costs, and how fast a model learns from scores.

    python bench/learning.py [--steps 20]                  # the parts, on the embedded model
    python bench/learning.py --loop tiny [--seeds 0,1,2] [--target 0.9]   # the whole loop
    python bench/learning.py --loop smollm2 [--seeds 0] [--time-limit 900]
    python bench/learning.py --loop tiny --seeds 0,1 --before DIR   # against another checkout

**The parts** (in one process, on the embedded model, pretrained once and cached under
.cache/models): the time to generate one 48-token answer (the baseline), one policy-gradient
step on a batch of 16 scored answers, the release checks' importance-sampling estimate,
writing the checkpoint, and swapping weights into the serving engine.

**The loop** runs ``reef demo --model M --json`` (a real daemon, a simulated user who scores
answers by a preference reef never sees) once per seed, then reads each step's record from
the scenario's git repository: the held-out score of each release as the user measured it,
reports and seconds to the target, and a step's parts (propose = train + write the release
tree, each check, swap; publish is the rest of the step), against the baseline of the same run:
the time the user waited for one group of 8 answers.  The size of a release's weights (the
LoRA adapter on smollm2, the whole checkpoint on tiny) is read from its LFS object.  Serving
throughput of a real model is ``bench/serving.py``'s.  Memory: each step's peak RSS from its
record, and the daemon's peak over the run read from outside (the same for every version).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from recipes.grpo.objective import estimate_reward, group_advantages, policy_step
from recipes.grpo.samples import Sample
from reef_core.models.tiny import checkpoint, corpus, default_pretrain_seconds, ensure_pretrained
from reef_core.upstream.local import LocalEngine

ROOT = Path(__file__).resolve().parents[1]


def timed(fn, n: int) -> tuple[float, object]:
    result = None
    times = []
    for _ in range(n):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _step_records(repo: Path) -> list[dict]:
    refs = subprocess.run(
        ["git", "-C", str(repo), "for-each-ref", "--format=%(refname)", "refs/reef/candidates/"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    records = []
    for ref in sorted(refs, key=lambda r: int(r.rsplit("/", 1)[1])):
        body = subprocess.run(
            ["git", "-C", str(repo), "log", "-1", "--format=%b", ref],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        records.append(json.loads(body[: body.rindex("}") + 1]))
    return records


def _weights_size(repo: Path) -> int:
    """Bytes of the newest release's weights (its LFS objects)."""
    listing = subprocess.run(
        ["git", "-C", str(repo), "lfs", "ls-files", "--long", "--size", "release"],
        capture_output=True,
        text=True,
    ).stdout
    objects = repo / "lfs" / "objects"
    total = 0
    for line in listing.splitlines():
        oid = line.split()[0]
        found = objects / oid[:2] / oid[2:4] / oid
        total += found.stat().st_size if found.exists() else 0
    return total


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _hwm(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class _Peaks(threading.Thread):
    """The highest high-water mark (``VmHWM``) of any process under ``pid`` (the demo's daemon),
    read every half second: the daemon's peak over the whole run, model loading included, the
    same for every version of the recipe (older step records hold no peak of their own)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, 0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            self.peak = max([self.peak, *(_hwm(p) for p in _descendants(self.pid))])


def _demo(
    model: str, seed: int, target: float, time_limit: float | None, tree: Path
) -> tuple[dict, list, int, int]:
    """``reef demo`` of checkout ``tree`` once: its summary, step records, weights size and the
    daemon's peak RSS.  On tiny the demo starts from the model pretrained once under .cache
    (the same for every seed and checkout), not from its own 60 s of pretraining, whose quality
    depends on how busy the machine is."""
    with tempfile.TemporaryDirectory(prefix="reef-bench-learning-") as tmp:
        if model == "tiny":
            base = ensure_pretrained(ROOT / ".cache" / "models" / "tiny", seconds=default_pretrain_seconds())
            shutil.copytree(base, Path(tmp) / "models" / "tiny" / base.name)
        done = _run_watched(
            [
                *(sys.executable, "-m", "reef_cli", "demo", "--model", model, "--seed", str(seed)),
                *("--state-dir", tmp, "--target", str(target), "--json"),
                *(["--time-limit", str(time_limit)] if time_limit else []),
            ],
            tree,
        )
        try:
            summary = json.loads(done.stdout[done.stdout.index("{") :])
        except ValueError:
            print(done.stdout[-2000:], done.stderr[-2000:], sep="\n")
            raise SystemExit(f"reef demo --model {model} gave no summary (exit {done.returncode})") from None
        repo = Path(summary["repository"])
        return summary, _step_records(repo), _weights_size(repo), done.peak


def loop(
    model: str, seeds: list[int], target: float, time_limit: float | None = None, before: Path | None = None
) -> None:
    """Each seed's demo, described; with ``before`` (another checkout) that checkout's demo runs
    first on the same seed, and a table compares the two at the end."""
    compared: list[tuple[int, dict, dict]] = []
    for seed in seeds:
        if before is not None:
            earlier = _demo(model, seed, target, time_limit, before)[0]
        summary, steps, size, peak = _demo(model, seed, target, time_limit, ROOT)
        if before is not None:
            compared.append((seed, earlier, summary))
        verdict = "reached" if summary["reached"] else "did not reach"
        curve = "  ".join(f"{c['release']} {c['heldout']:.2f}" for c in summary["curve"])
        selected = sum(1 for s in steps if s["verdict"] == "selected")
        print(
            f"\n{model}, seed {seed}: {verdict} {summary['target']:.2f} held-out in "
            f"{summary['teaching_seconds']:.0f}s of teaching and {summary['reports']} reports; "
            f"{selected} of {len(steps)} steps selected"
        )
        print(f"  held-out by release: {curve}")
        print(f"  last answer: {summary['last_answer'][:70]!r}")
        group = _median(summary["round_seconds"])
        train = _median([s["metrics"]["train_seconds"] for s in steps if "metrics" in s])
        propose = _median([s.get("propose_seconds", float("nan")) for s in steps])
        checks: dict[str, list[float]] = {}
        for s in steps:
            for c in s["checks"]:
                checks.setdefault(c["name"], []).append(c.get("seconds", float("nan")))
        learning = summary["learning"] or {}
        recipe = learning.get("recipe") or {}
        step = learning.get("step_seconds") or float("nan")
        swap = recipe.get("swap_seconds_median") or float("nan")
        recorded = _median([s["seconds"] for s in steps])
        rows = [
            ("one group of 8 answers (baseline)", group),
            ("step: propose, checks, publish, swap", step),
            ("  propose and checks (its record)", recorded),
            ("  propose (train + release tree)", propose),
            ("    of which training", train),
        ]
        rows += [(f"  check {name}", _median(v)) for name, v in checks.items()]
        rows += [("  swap into serving", swap)]
        for name, seconds in rows:
            print(f"  {name:<36} {seconds:8.3f}s  = {seconds / group:6.2f} groups")
        print(f"  a release's weights in LFS: {size / 1e6:.2f} MB")
        peaks = [s["peak_rss_bytes"] / 1e6 for s in steps if "peak_rss_bytes" in s]
        if peaks:
            shown = "  ".join(f"{p:.0f}" for p in peaks)
            print(f"  peak RSS of each step (MB, its record): {shown}; max {max(peaks):.0f}")
        print(f"  the daemon's peak RSS over the run (VmHWM): {peak / 1e6:.0f} MB")
    if compared:
        print(f"\n{model}, {before} against this tree, the same seeds one after the other:")
        for seed, earlier, summary in compared:
            for name, s in (("before", earlier), ("after", summary)):
                curve = " ".join(f"{c['release']}:{c['heldout']:.2f}" for c in s["curve"])
                print(
                    f"  seed {seed} {name:6} reached {s['reached']!s:5} in {s['teaching_seconds']:6.1f}s, "
                    f"{s['reports']:4d} reports  {curve}"
                )


class _Watched(subprocess.CompletedProcess):
    peak: int = 0


def _run_watched(command: list[str], tree: Path = ROOT) -> _Watched:
    """``command`` run to its end (output captured) in checkout ``tree`` (its code first on the
    path), with its processes' peak RSS."""
    pipe = subprocess.PIPE
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with subprocess.Popen(command, stdout=pipe, stderr=pipe, text=True, cwd=tree, env=env) as proc:
        peaks = _Peaks(proc.pid)
        peaks.start()
        out, err = proc.communicate()
        peaks.done.set()
        peaks.join()
    done = _Watched(command, proc.returncode, out, err)
    done.peak = peaks.peak
    return done


def main() -> None:
    if "--loop" in sys.argv:
        model = sys.argv[sys.argv.index("--loop") + 1]
        seeds = (
            [int(x) for x in sys.argv[sys.argv.index("--seeds") + 1].split(",")]
            if "--seeds" in sys.argv
            else [0]
        )
        target = float(sys.argv[sys.argv.index("--target") + 1]) if "--target" in sys.argv else 0.9
        # the demo's own limit (480 s of teaching on smollm2) unless given: a busy machine needs more
        limit = float(sys.argv[sys.argv.index("--time-limit") + 1]) if "--time-limit" in sys.argv else None
        before = Path(sys.argv[sys.argv.index("--before") + 1]).resolve() if "--before" in sys.argv else None
        loop(model, seeds, target, limit, before)
        return
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 20
    base = ensure_pretrained(ROOT / ".cache" / "models" / "tiny", seconds=default_pretrain_seconds())
    engine = LocalEngine(base)
    request = engine._parse(
        json.dumps(
            {"messages": [{"role": "user", "content": "how is the river?"}], "max_tokens": 48}
        ).encode()
    )

    def answer(prompt: str) -> Sample:
        body = engine._parse(
            json.dumps({"messages": [{"role": "user", "content": prompt}], "max_tokens": 48}).encode()
        )
        reply = engine._generate(body, "bench", None)
        text, extras = reply.text, reply.extras
        return Sample(
            "r",
            "p",
            tuple(extras["prompt_ids"]),
            tuple(extras["response_ids"]),
            tuple(extras["logprobs"]),
            float(text.strip().startswith("Sure")),
            0,
        )

    gen_s, _ = timed(lambda: engine._generate(request, "bench", None), 30)
    prompts = corpus.train_prompts(n=60)
    groups = [[answer(p) for _ in range(8)] for p in prompts[:2]]
    for p in prompts[2:]:
        if all(len({s.reward for s in g}) > 1 for g in groups):
            break
        groups.append([answer(p) for _ in range(8)])
        groups = [g for g in groups if len({s.reward for s in g}) > 1][-2:] or groups[-2:]
    weighted = group_advantages(groups) or [(s, 1.0 if i % 2 else -1.0) for i, s in enumerate(groups[0])]
    held = [answer(p) for p in corpus.heldout_prompts(n=16) for _ in range(2)]
    model, _ = engine.snapshot("bench")
    reference = engine.base_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    step_s, _ = timed(
        lambda: policy_step(
            model, reference, optimizer, weighted, kl_coef=0.05, clip=0.2, micro_batch=len(weighted)
        ),
        steps,
    )
    estimate_s, _ = timed(lambda: estimate_reward(model, held), 10)
    with tempfile.TemporaryDirectory() as tmp:
        save_s, _ = timed(lambda: checkpoint.save(model, Path(tmp)), 10)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    swap_s, _ = timed(lambda: engine.swap("bench", state, 2), 20)
    print(f"one answer (48 tokens, the baseline): {gen_s * 1000:7.1f} ms")
    print(f"policy step on {len(weighted)} answers: {step_s * 1000:7.1f} ms  = {step_s / gen_s:5.1f} answers")
    print(
        f"held-out estimate, {len(held)} answers: {estimate_s * 1000:5.1f} ms  "
        f"= {estimate_s / gen_s:5.1f} answers"
    )
    print(f"checkpoint save (safetensors):  {save_s * 1000:7.1f} ms  = {save_s / gen_s:5.2f} answers")
    print(f"swap into serving:              {swap_s * 1000:7.1f} ms  = {swap_s / gen_s:5.2f} answers")


if __name__ == "__main__":
    main()
