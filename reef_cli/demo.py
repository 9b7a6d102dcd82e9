"""``reef demo``: the whole loop on a local model, watched live.

It starts ``reef serve --recipe grpo`` on ``builtin:tiny`` (or, with ``--model smollm2``, the
real SmolLM2-135M-Instruct, where each release is a LoRA adapter) and plays a user with a
hidden preference, through the public HTTP API only: ask, score, report.  reef records every
exchange, trains on the scores, checks each candidate, publishes releases and hot-swaps them
in; the view shows the held-out score of the releases as they land.  With ``--canary`` each
candidate first answers a share of new sessions, and the view shows both arms
(:mod:`reef_cli.demo_canary`).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import typer
from rich.console import Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from reef_cli import output as out
from reef_cli.demo_canary import SHARE, CanaryBoard, check_share, serve_flags
from reef_cli.demo_user import DemoUser, parse_preference, requests
from reef_core.errors import InvalidInput, ReefError

__all__ = ["demo"]


@dataclass(frozen=True)
class _Model:
    spec: str
    target: float  # the default --target
    time_limit: float  # the default --time-limit
    max_tokens: int  # per answer: the preference shows in the first words
    measure_every: float  # seconds between held-out measurements (each costs a batch of answers)
    prompts: str  # "corpus": the embedded model's world; "requests": requests for things
    starting: str
    serve: tuple[str, ...] = ()  # more `reef serve` settings
    # with --canary: reef does not train while a canary runs, so each canary is one step from
    # its base, and a step must be big enough to show in a hundred sessions
    canary_serve: tuple[str, ...] = ()


MODELS = {
    "tiny": _Model(
        spec="builtin:tiny",
        target=0.8,
        time_limit=300,
        max_tokens=48,
        measure_every=0,
        prompts="corpus",
        starting="starting reef (a first run pretrains the embedded model: a minute)",
        serve=("--recipe.config.epochs", "2"),
        canary_serve=("--recipe.config.groups-per-step", "4", "--recipe.config.lr", "6e-4"),
    ),
    "smollm2": _Model(
        spec="builtin:smollm2",
        target=0.9,
        time_limit=480,
        max_tokens=24,
        measure_every=20,
        prompts="requests",
        starting="starting reef (loading SmolLM2-135M-Instruct)",
        serve=("--recipe.config.lr", "1e-3"),
    ),
}


@dataclass
class _View:
    preference: str
    target: float
    scenario: str
    curve: list[tuple[str, float]] = field(default_factory=list)
    note: str = "starting"
    last_answer: str = ""
    board: CanaryBoard | None = None  # with --canary

    def render(self, user: DemoUser | None, elapsed: float, serving: str) -> Panel:
        lines: list[RenderableType] = [
            Text.assemble(
                ("the user secretly prefers ", "dim"),
                (self.preference, "bold"),
                ("; reef only ever sees their scores", "dim"),
            ),
        ]
        if user is not None:
            lines.append(
                Text(
                    f"{elapsed:5.0f}s  {user.rate:5.1f} req/s  {user.requests} requests  "
                    f"{user.reports} reports  serving "
                    + (self.board.serving(serving) if self.board else serving)
                )
            )
        table = Table(box=None, pad_edge=False, show_header=True, header_style="dim")
        table.add_column("release")
        table.add_column(f"held-out score (target {self.target:.2f})")
        table.add_column("", justify="right")
        for name, score in self.curve[-14:]:
            filled = round(score * 30)
            bar = Text("█" * filled, style="green" if score >= self.target else "cyan")
            bar.append("░" * (30 - filled), style="dim")
            table.add_row(name, bar, f"{score:.2f}")
        lines.append(table)
        if self.board is not None:
            lines.append(self.board.render())
        lines.append(Text(self.note, style="yellow"))
        if self.last_answer:
            lines.append(Text(f"last answer: {self.last_answer[:70]!r}", style="dim"))
        return Panel(Group(*lines), title=f"reef demo · scenario {self.scenario}", border_style="blue")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_daemon(
    state: Path, port: int, log_path: Path, model: str, extra: list[str]
) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "reef_cli",
        "serve",
        "--recipe",
        "grpo",
        "--inference.model-path",
        model,
        "--reef.port",
        str(port),
        "--storage.state-dir",
        str(state),
        "--inference.model-cache",
        str(state / "models"),
        *extra,
    ]
    with open(log_path, "ab") as log:
        return subprocess.Popen(command, stdout=log, stderr=log, start_new_session=True)


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log_path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
            raise ReefError("the daemon exited while starting:\n  " + "\n  ".join(tail))
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise ReefError(f"the daemon did not answer within {timeout:.0f}s (log: {log_path})")


async def _play(
    user: DemoUser,
    view: _View,
    live: Live | None,
    target: float,
    limit: float,
    measure_every: float = 0,
    canaries: int | None = None,
) -> tuple[bool, float]:
    """Teach until a release reaches ``target`` (True), ``canaries`` canaries have ended, or
    ``limit`` seconds have passed."""
    started = time.monotonic()
    serving = "v1"

    def refresh() -> None:
        if live is not None:
            live.update(view.render(user, time.monotonic() - started, serving))

    view.note = "measuring the pretrained model on held-out prompts"
    refresh()
    view.curve.append(("v1", await user.heldout_score()))
    seen = {"v1"}
    measured = time.monotonic()
    view.note = "asking, scoring, reporting: reef trains in the background"
    reached_at = None
    while time.monotonic() - started < limit:
        await user.wait_while_stepping()
        means = await asyncio.gather(user.teach_one_group(), user.teach_one_group())
        view.note = f"last groups scored {sum(means) / len(means):.2f} on average"
        releases = await user.releases()
        fresh = [r for r in releases if r["release"] not in seen]
        if view.board is not None:
            await view.board.poll(user)
        if fresh:
            serving = fresh[0]["release"]
        if fresh and time.monotonic() - measured >= measure_every:
            newest = fresh[0]["release"]
            seen.update(r["release"] for r in fresh)
            measured = time.monotonic()
            score = await user.heldout_score()
            view.curve.append((newest, score))
            if score >= target:
                reached_at = time.monotonic() - started
                refresh()
                break
        text, _ = await user.ask(user.heldout_prompts[0], capture=False, seed=1)
        view.last_answer = text
        refresh()
        if view.board is not None and canaries is not None and len(view.board.ended) >= canaries:
            break
    return reached_at is not None, reached_at or (time.monotonic() - started)


def demo(
    model: str = typer.Option(
        "tiny",
        "--model",
        help="tiny (the embedded model) or smollm2 (SmolLM2-135M-Instruct, LoRA releases).",
    ),
    target: float | None = typer.Option(
        None,
        "--target",
        min=0.05,
        max=1.0,
        help="Stop once a release pleases the user this often on held-out prompts "
        "[default: 0.8 on tiny, 0.9 on smollm2].",
    ),
    time_limit: float | None = typer.Option(
        None,
        "--time-limit",
        min=5,
        help="Stop after this many seconds of teaching [default: 300 on tiny, 480 on smollm2].",
    ),
    preference: str = typer.Option(
        "starts-with:Sure",
        "--preference",
        help="The user's hidden preference: starts-with:WORD or shorter-than:N.",
    ),
    state_dir: Path = typer.Option(
        Path(".reef/demo"), "--state-dir", help="Where the demo's scenarios and model cache live."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the simulated user."),
    canary: bool = typer.Option(
        False,
        "--canary",
        help="Each candidate that passes its checks first answers a share of new sessions (a "
        "canary); the sessions' scores promote or retire it. The view shows both arms.",
    ),
    canary_share: float | None = typer.Option(
        None,
        "--canary-share",
        help=f"The share of new sessions a canary answers, above 0 and below 1: {SHARE} unless "
        "given (implies --canary).",
    ),
    canaries: int | None = typer.Option(
        None,
        "--canaries",
        min=1,
        help="Stop once this many canaries have ended (implies --canary).",
    ),
    as_json: bool = out.JsonOption,
) -> None:
    """Watch reef teach a local model a user's hidden preference, from scores alone."""
    from reef_core.models.tiny import corpus

    if model not in MODELS:
        raise InvalidInput(f"unknown --model {model!r}: use {' or '.join(MODELS)}", field="model")
    chosen = MODELS[model]
    target = chosen.target if target is None else target
    time_limit = chosen.time_limit if time_limit is None else time_limit
    pref = parse_preference(preference)
    canary = canary or canary_share is not None or canaries is not None
    share = check_share(SHARE if canary_share is None else canary_share)
    state = state_dir.expanduser().resolve()
    state.mkdir(parents=True, exist_ok=True)
    scenario = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = state / "daemon.log"
    console = out.output.console
    serve = ["--storage.pack-every", "500", *chosen.serve]
    if canary:
        serve += [*chosen.canary_serve, *serve_flags(share)]
    # a SIGTERM (a timeout, a supervisor, kill) ends the demo as Ctrl-C does, through the finally
    # below that stops the daemon: started in a session of its own, it would outlive the demo
    signal.signal(signal.SIGTERM, _terminated)
    proc = _start_daemon(state, port, log_path, chosen.spec, serve)
    repo = state / "scenarios" / f"{scenario}.git"
    view = _View(
        pref.description, target, scenario, board=CanaryBoard(repo, scenario, share) if canary else None
    )
    begun = time.monotonic()
    try:
        with console.status(chosen.starting) if not as_json else contextlib.nullcontext():
            _wait_ready(url, proc, log_path, timeout=600)
        httpx.post(f"{url}/reef/scenarios", json={"name": scenario}, timeout=30).raise_for_status()
        if chosen.prompts == "corpus":
            train, heldout = corpus.train_prompts(seed=seed, n=200), corpus.heldout_prompts(seed=seed, n=16)
        else:
            train, heldout = requests(seed, 200), requests(seed, 16, held_out=True)
        user = DemoUser(
            url,
            scenario,
            pref,
            train,
            heldout,
            seed=seed,
            model=chosen.spec,
            max_tokens=chosen.max_tokens,
            sessions=canary,
        )

        async def main() -> tuple[bool, float, dict]:
            try:
                if as_json:  # no live view: the summary is the output
                    reached, seconds = await _play(
                        user, view, None, target, time_limit, chosen.measure_every, canaries
                    )
                else:
                    with Live(view.render(None, 0, "v1"), console=console, refresh_per_second=4) as live:
                        reached, seconds = await _play(
                            user, view, live, target, time_limit, chosen.measure_every, canaries
                        )
                return reached, seconds, await user.status()
            finally:
                await user.close()

        reached, seconds, status = asyncio.run(main())
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    board = view.board
    if board is not None:
        board.settle()
    # the goal: the target, or with --canaries that many canaries ended
    done = reached or (board is not None and canaries is not None and len(board.ended) >= canaries)
    best = max((s for _, s in view.curve), default=0.0)
    first = view.curve[0][1] if view.curve else 0.0
    learning = (
        next((row.get("learning") for row in status["scenarios"] if row["name"] == scenario), None) or {}
    )
    if as_json:
        out.output.json(
            {
                "model": chosen.spec,
                "preference": pref.description,
                "target": target,
                "reached": reached,
                "teaching_seconds": round(seconds, 1),
                "total_seconds": round(time.monotonic() - begun, 1),
                "requests": user.requests,
                "reports": user.reports,
                "round_seconds": [round(x, 3) for x in user.round_seconds],
                "curve": [{"release": name, "heldout": score} for name, score in view.curve],
                "last_answer": view.last_answer,
                "learning": learning,
                **({"canaries": board.to_json()} if board is not None else {}),
                "repository": str(repo),
                "log": str(log_path),
            }
        )
        if not done:
            raise typer.Exit(1)
        return
    verdict = "reached" if reached else "did not reach"
    console.print(
        f"\n{verdict} the target {target:.2f} in {seconds:.0f}s of teaching and {user.reports} reports "
        f"(held-out {first:.2f} → best {best:.2f}; {time.monotonic() - begun:.0f}s in all, "
        f"{learning.get('steps', 0)} steps)",
        highlight=False,
    )
    recipe = learning.get("recipe") or {}
    console.print(
        f"one step (train, check, publish, swap): {learning.get('step_seconds') or 0:.2f}s median; "
        f"of which training {recipe.get('train_seconds_median') or 0:.3f}s, "
        f"swap {1000 * (recipe.get('swap_seconds_median') or 0):.1f}ms; "
        f"{learning.get('selected', 0)} of {learning.get('steps', 0)} steps selected",
        highlight=False,
    )
    for line in board.summary() if board is not None else []:
        console.print(line, highlight=False)
    console.print(f"\n$ git -C {repo} log --oneline release", highlight=False)
    log = subprocess.run(
        ["git", "-C", str(repo), "log", "--oneline", "release"], capture_output=True, text=True
    )
    console.print(log.stdout.rstrip() or log.stderr.rstrip(), highlight=False)
    console.print(f"\nthe repository: {repo}\nthe daemon's log: {log_path}", highlight=False)
    if not done:
        raise typer.Exit(1)
