"""Launcher benchmark: what ``reef-claude``, ``reef-pi``, ``reef-codex`` and ``reef-opencode`` add to a
harness run, what the Claude Code installer costs, and what reef's prompt hook costs every prompt.

    python bench/launcher.py [--runs 5] [--quick]

The scripted upstream (tests/fakes/upstream.py) and a real ``reef serve`` (a state directory in a
temp dir, removed after), the harnesses in a fresh HOME of the bench's own.  Every row is a
median, and its baseline is measured in the same run, interleaved so drift hits both alike:

* ``reef-claude -p hi`` against plain ``claude -p hi`` routed by hand the same way: the
  arguments (``--settings`` and its file) and the environment reef-claude hands claude, captured
  once by pointing ``REEF_CLAUDE`` at a script that writes them down, in the same config dir.  Both
  reach the same daemon and run reef's hooks, so the difference is the launcher's own work
  (Python's start, ``/healthz``, the run files, ``.claude.json``).  The same for ``reef-pi -p hi``
  against plain ``pi -p hi`` with ``PI_CODING_AGENT_DIR`` and the rest of reef-pi's environment.
  The same for ``reef-codex exec hi`` (its config.toml written and its hooks trusted before, as
  every start after the first) and ``reef-opencode run hi`` against plain ``codex exec`` and
  ``opencode run`` with the environment their launchers hand them.
* The Claude Code installer (the ``sh`` of ``curl … | sh``, the script fetched once): cold, into a
  fresh HOME (``REEF_CLAUDE`` names claude, so no npm), and warm, a rerun with nothing to write.
* ``reef-claude hook prompt`` for a prompt that is not one of reef's commands: what every prompt
  of a reef-claude session pays before Claude Code sends it.
* ``reef-claude -p hi`` and ``reef-pi -p hi`` with the harness replaced by ``true``: the launchers'
  own work alone, which the harness's start-up noise (hundreds of ms) does not hide.
* The baseline of every row but the first two: the interpreter the launchers run on, started
  bare (``python -c pass``).

Timings are printed, never asserted; the exit code is 1 only when a run fails.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from adapters.binaries import path_with  # noqa: E402  (the PATH reef-claude and reef-pi give)
from bench.proxy import reef_on_upstream  # noqa: E402  (one copy of each, shared)

SCENARIO = "bench"
CLAUDE = ROOT / ".cache" / "tools" / "claude-code" / "node_modules" / ".bin" / "claude"
PI = ROOT / ".cache" / "tools" / "node_modules" / ".bin" / "pi"
CODEX = ROOT / ".cache" / "tools" / "codex" / "node_modules" / ".bin" / "codex"
OPENCODE = ROOT / ".cache" / "tools" / "opencode" / "node_modules" / ".bin" / "opencode"
CODEX_EXEC = ("exec", "--skip-git-repo-check", "--ephemeral", "hi")
TRUE = "/bin/true"
ANSWER = "Hello there, this is a short answer."  # bench/proxy.py's upstream says this
# what Claude Code hands the UserPromptSubmit hook, for a prompt that is not a reef command
PLAIN_PROMPT = {
    "session_id": "4a3f1c9e-0000-4000-8000-000000000000",
    "transcript_path": "/nonexistent/transcript.jsonl",
    "cwd": "/tmp",
    "permission_mode": "default",
    "hook_event_name": "UserPromptSubmit",
    "prompt": "fix the failing test in tests/test_pages.py and run the suite",
}
# stands in for the harness once: writes down the arguments and environment a launcher hands it
CAPTURE = """#!/bin/sh
printf '%s\\0' "$@" > "{out}.args"
env -0 > "{out}.env"
"""


@dataclass(frozen=True)
class Run:
    """One command as the bench starts it."""

    argv: Sequence[str]
    env: dict[str, str]
    cwd: Path
    stdin: str | None = None
    expect: str | None = None  # stdout, stripped, when it is checked

    def time(self) -> float:
        """Wall seconds; a failed run stops the bench with what it said."""
        start = time.perf_counter()
        done = subprocess.run(
            list(self.argv),
            env=self.env,
            cwd=self.cwd,
            input=self.stdin,
            stdin=None if self.stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
        )
        took = time.perf_counter() - start
        if done.returncode != 0 or (self.expect is not None and done.stdout.strip() != self.expect):
            raise SystemExit(
                f"bench: {' '.join(self.argv)} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}"
            )
        return took


class Home:
    """A HOME of the bench's own, with ``~/.local/bin`` first on PATH, as a person's machine."""

    def __init__(self, root: Path) -> None:
        self.home = root
        self.work = root / "work"
        self.work.mkdir(parents=True)
        self.env = {
            "PATH": f"{root}/.local/bin:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(root),
            "LANG": "C.UTF-8",
            "REEF_CLAUDE": str(CLAUDE),
            "REEF_PI": str(PI),
            "REEF_CODEX": str(CODEX),
            "REEF_OPENCODE": str(OPENCODE),
            "CLAUDE_CODE_MAX_RETRIES": "0",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        }
        # opencode's own config dir, as after its first run: no npm install (the bench is offline)
        from adapters.opencode.render import NPM_STUBS

        for name, content in NPM_STUBS.items():
            path = root / ".config" / "opencode" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)

    def installer(self, script: str) -> Run:
        return Run(["sh", "-s"], self.env, self.home, stdin=script)

    def launcher(self, command: str, *args: str) -> Run:
        return Run([str(self.home / ".local" / "bin" / command), *args], self.env, self.work, expect=ANSWER)

    def by_hand(self, command: str, binary_env: str, binary: Path, *args: str) -> Run:
        """The harness started the way ``command`` starts it, without ``command``."""
        out = self.home / f"capture-{command}"
        fake = out.with_suffix(".sh")
        fake.write_text(CAPTURE.format(out=out))
        fake.chmod(0o755)
        Run(
            [str(self.home / ".local" / "bin" / command), *args],
            {**self.env, binary_env: str(fake)},
            self.work,
        ).time()
        handed = Path(f"{out}.args").read_bytes().decode().split("\0")[:-1]
        env = dict(
            line.split("=", 1) for line in Path(f"{out}.env").read_bytes().decode().split("\0") if "=" in line
        )
        env.update({binary_env: str(binary), "PATH": path_with(str(binary), self.env["PATH"])})
        return Run([str(binary), *handed], env, self.work, expect=ANSWER)


def fetch_script(reef: str, adapter: str) -> str:
    query = urllib.parse.urlencode({"adapter": adapter, "scenario": SCENARIO})
    with urllib.request.urlopen(f"{reef}/reef/harness/install?{query}", timeout=30) as response:
        return response.read().decode()


def interleaved(runs: int, *measures: Callable[[], float]) -> list[float]:
    """Median seconds of each measure, taken in turns (the order flips every round)."""
    taken: list[list[float]] = [[] for _ in measures]
    for round_ in range(runs):
        order = list(enumerate(measures))
        for i, measure in order if round_ % 2 == 0 else reversed(order):
            taken[i].append(measure())
    return [statistics.median(t) for t in taken]


def row(name: str, reef: float, base: float, baseline: str) -> str:
    return (
        f"{name:<38} {reef * 1000:>8.0f} {base * 1000:>9.0f} {(reef - base) * 1000:>+8.0f}"
        f" {reef / base:>6.2f}x  {baseline}"
    )


def measure(args: argparse.Namespace, root: Path) -> None:
    for binary in (CLAUDE, PI, CODEX, OPENCODE):
        if not os.access(binary, os.X_OK):
            raise SystemExit(f"bench: {binary} is missing: run scripts/setup.sh --dev")
    with reef_on_upstream(str(root / "state")) as (_proc, reef, _direct):
        rows = run(args, root, reef)
    print(
        f"{'medians of ' + str(args.runs) + ', ms':<38} {'reef':>8} {'baseline':>9} {'added':>8} {'ratio':>7}"
    )
    for line in rows:
        print(line)


def run(args: argparse.Namespace, root: Path, reef: str) -> list[str]:
    claude_script, pi_script = fetch_script(reef, "claude_code"), fetch_script(reef, "pi")
    person = Home(root / "person")
    person.installer(claude_script).time()
    person.installer(pi_script).time()
    person.installer(fetch_script(reef, "codex")).time()
    person.installer(fetch_script(reef, "opencode")).time()
    launcher = person.home / ".local" / "bin" / "reef-claude"
    interpreter = launcher.read_text().split("\n", 1)[0].removeprefix("#!")  # the launchers' python
    python = Run([interpreter, "-c", "pass"], person.env, person.work)

    reef_claude = person.launcher("reef-claude", "-p", "hi")
    claude = person.by_hand("reef-claude", "REEF_CLAUDE", CLAUDE, "-p", "hi")
    reef_pi = person.launcher("reef-pi", "-p", "hi")
    pi = person.by_hand("reef-pi", "REEF_PI", PI, "-p", "hi")
    reef_codex = person.launcher("reef-codex", *CODEX_EXEC)
    reef_codex.time()  # the first start trusts reef's hooks (codex app-server): once per release
    codex = person.by_hand("reef-codex", "REEF_CODEX", CODEX, *CODEX_EXEC)
    reef_opencode = person.launcher("reef-opencode", "run", "hi")
    opencode = person.by_hand("reef-opencode", "REEF_OPENCODE", OPENCODE, "run", "hi")
    for warm_up in (reef_claude, claude, reef_pi, pi, reef_codex, codex, reef_opencode, opencode, python):
        warm_up.time()
    with_claude, plain_claude = interleaved(args.runs, reef_claude.time, claude.time)
    with_pi, plain_pi = interleaved(args.runs, reef_pi.time, pi.time)
    with_codex, plain_codex = interleaved(args.runs, reef_codex.time, codex.time)
    with_opencode, plain_opencode = interleaved(args.runs, reef_opencode.time, opencode.time)

    homes = itertools.count()

    def cold() -> float:
        return Home(root / f"cold-{next(homes)}").installer(claude_script).time()

    warm = person.installer(claude_script)
    cold_s, warm_s, python_s = interleaved(args.runs, cold, warm.time, python.time)

    hook = Run(
        [str(launcher), "hook", "prompt"],
        claude.env,  # what a session's hooks see: the run's tag, REEF_CLAUDE_LAUNCHER
        person.work,
        stdin=json.dumps(PLAIN_PROMPT),
        expect="",  # not a reef command: no answer, the prompt goes on to the model
    )
    hook_s, python_again = interleaved(args.runs, hook.time, python.time)

    # the launchers' own work alone: the harness they start replaced by true(1)
    alone = {**person.env, "REEF_CLAUDE": TRUE, "REEF_PI": TRUE, "REEF_CODEX": TRUE, "REEF_OPENCODE": TRUE}
    claude_alone, pi_alone, codex_alone, opencode_alone, python_alone = interleaved(
        args.runs,
        Run([str(launcher), "-p", "hi"], alone, person.work).time,
        Run([str(launcher.with_name("reef-pi")), "-p", "hi"], alone, person.work).time,
        Run([str(launcher.with_name("reef-codex")), *CODEX_EXEC], alone, person.work).time,
        Run([str(launcher.with_name("reef-opencode")), "run", "hi"], alone, person.work).time,
        python.time,
    )
    bare = "python -c pass"
    return [
        row("-p hi: reef-claude vs claude by hand", with_claude, plain_claude, "claude, same routing"),
        row("-p hi: reef-pi vs pi by hand", with_pi, plain_pi, "pi, same environment"),
        row("exec hi: reef-codex vs codex by hand", with_codex, plain_codex, "codex, same environment"),
        row("run hi: reef-opencode vs opencode", with_opencode, plain_opencode, "opencode, same env"),
        row("Claude Code installer, cold", cold_s, python_s, bare),
        row("Claude Code installer, warm (rerun)", warm_s, python_s, bare),
        row("reef-claude hook prompt, plain prompt", hook_s, python_again, bare),
        row("reef-claude -p hi, claude = true", claude_alone, python_alone, bare),
        row("reef-pi -p hi, pi = true", pi_alone, python_alone, bare),
        row("reef-codex exec hi, codex = true", codex_alone, python_alone, bare),
        row("reef-opencode run hi, opencode = true", opencode_alone, python_alone, bare),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5, help="repetitions of each measurement")
    parser.add_argument("--quick", action="store_true", help="2 repetitions: a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.runs = 2
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="reef-launcher-bench-") as root:
        measure(args, Path(root))
    print(f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after; cpu: {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
