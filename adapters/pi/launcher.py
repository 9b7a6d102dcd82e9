"""``reef-pi``: pi routed through reef, and reef's commands for the person at the terminal.

| command | what |
|---|---|
| ``reef-pi [pi args]`` | the installed pi: its agent dir, the scenario, a fresh run tag, offline switches |
| ``reef-pi evolve "text" [--wait] [--timeout S]`` | file an ask on the installed release, follow it |
| ``reef-pi versions [NAME]`` | the releases table (``/versions`` in pi); with a name, its page |
| ``reef-pi update [--release vN]`` | fetch the installer for the current (or named) release and run it |
| ``reef-pi report --score S [--feedback T]`` | feedback on the receipts of the last ``reef-pi`` run |
| ``reef-pi doctor`` | one line per prerequisite; exit 0 only when all are met |

The installed ``reef-pi`` file (written by :mod:`adapters.pi.install`) bakes in the daemon's URL
and the scenario and calls :func:`main`.  Environment: ``REEF_URL`` and ``REEF_SCENARIO``
override the baked-in values; ``REEF_TOKEN`` is sent when set; ``REEF_HOME`` (default
``~/.reef``) holds the agent dirs; ``REEF_PI`` names the pi to run; ``REEF_PI_ONLINE=1`` (or
``reef-pi --online …``) leaves pi's startup network calls on.

"The last run": each run of pi gets a fresh id in ``REEF_RUN_TAG`` (or ``REEF_SESSION``, when set:
several runs under one name are one session to reef), which pi sends as the
``x-reef-tag-run`` header (the installed ``models.json`` names that variable), so every record of
the run carries the tag ``run=<id>``.  The launcher notes the id and start time in
``last-run.json`` before it hands the process to pi; ``reef-pi report`` asks the daemon for the
records with that tag written since then (``GET …/records?tag=run:<id>&after=<cursor>``) and
reports on them with the id as ``metadata.session`` (as pi's ``/good``, ``/bad`` and ``/feedback`` do).

Exit codes: 0 done, 1 failed, 2 usage.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, TextIO
from urllib.parse import quote

import httpx

from reef_core.client import DaemonUnavailable, Progress, ReefClient, approver
from reef_core.errors import ReefError, Unauthorized
from reef_core.ids import validate_scenario_name
from reef_core.release.listing import approval_question, code_notice

__all__ = ["COMMANDS", "Layout", "main", "require_daemon", "versions_table"]

COMMANDS = ("evolve", "versions", "update", "report", "doctor", "help")
PI_VERSION = "0.73.1"  # adapters.pi.install pins the same one
_RUN_TAG = "run"
_SESSION = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_CLOCK_SLACK_MS = 10_000  # records of a run are searched from this long before it started
_ASK_WIDTH = 60
_OFFLINE = {"PI_OFFLINE": "1", "PI_SKIP_VERSION_CHECK": "1", "PI_TELEMETRY": "0"}
_SAYS = {
    "queued": "waiting for the learner",
    "proposing": "proposing a change",
    "checking": "running the release checks",
}
_VERSION = re.compile(r"^\s*v?(\d+\.\d+\.\d+\S*)\s*$", re.MULTILINE)


class Usage(ReefError):
    """The command line is wrong (exit code 2)."""

    code = "usage"


@dataclass(frozen=True)
class Layout:
    """Where one scenario's pi harness lives: ``<home>/harnesses/pi/<scenario>/``."""

    home: Path
    scenario: str

    @classmethod
    def of(cls, env: Mapping[str, str], scenario: str) -> Layout:
        home = env.get("REEF_HOME") or str(Path(env.get("HOME") or Path.home()) / ".reef")
        return cls(Path(home), validate_scenario_name(scenario, field="REEF_SCENARIO"))

    @property
    def base(self) -> Path:
        return self.home / "harnesses" / "pi" / self.scenario

    @property
    def agent(self) -> Path:
        return self.base / "agent"

    @property
    def sidecar(self) -> Path:
        return self.base / "installed.json"

    @property
    def last_run(self) -> Path:
        return self.base / "last-run.json"


@dataclass(frozen=True)
class _Context:
    url: str
    scenario: str
    token: str | None
    layout: Layout
    env: Mapping[str, str]
    launcher: str | None
    out: TextIO
    err: TextIO

    def client(self, timeout: float = 30.0) -> ReefClient:
        return ReefClient(self.url, self.token, timeout=timeout)

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def installer_url(self) -> str:
        return f"{self.url}/reef/harness/install?adapter=pi&scenario={quote(self.scenario)}"


# ------------------------------------------------------------------------------------ entry


def main(
    argv: list[str],
    *,
    url: str,
    scenario: str,
    launcher: str | None = None,
    env: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run ``reef-pi argv``; returns the exit code (a pi run replaces the process instead)."""
    env = os.environ if env is None else env
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    try:
        name = env.get("REEF_SCENARIO") or scenario
        ctx = _Context(
            url=(env.get("REEF_URL") or url).rstrip("/"),
            scenario=validate_scenario_name(name, field="REEF_SCENARIO"),
            token=env.get("REEF_TOKEN") or None,
            layout=Layout.of(env, name),
            env=env,
            launcher=launcher,
            out=out,
            err=err,
        )
        if argv and argv[0] in COMMANDS:
            return _COMMANDS[argv[0]](ctx, argv[1:])
        return _run_pi(ctx, argv)
    except Usage as exc:
        print(f"reef-pi: {exc.message}\n{_USAGE}", file=err)
        return 2
    except Unauthorized as exc:
        hint = "check REEF_TOKEN" if env.get("REEF_TOKEN") else "export REEF_TOKEN with this reef's token"
        print(f"reef-pi: {exc.message} ({hint})", file=err)
        return 1
    except ReefError as exc:
        print(f"reef-pi: {exc.message}", file=err)
        return 1
    except KeyboardInterrupt:
        print("reef-pi: interrupted", file=err)
        return 130


_USAGE = """\
usage: reef-pi [--online] [pi args]          pi, routed through reef
       reef-pi evolve "text" [--wait] [--timeout S]
       reef-pi versions [vN|cN]
       reef-pi update [--release vN]
       reef-pi report --score S [--feedback T]
       reef-pi doctor"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise Usage(f"{self.prog}: {message}")


def _parse(prog: str, args: list[str], build: Callable[[_Parser], None]) -> argparse.Namespace:
    parser = _Parser(prog=f"reef-pi {prog}", add_help=False)
    build(parser)
    return parser.parse_args(args)


# ------------------------------------------------------------------------------------ the daemon
# What any harness launcher checks before it starts its harness, and what its doctor reports:
# adapter-neutral, so a launcher core shared by the adapters can take it as it is.

_HEALTH_TIMEOUT_S = 3.0  # a daemon on this machine answers /healthz in milliseconds
_INFO_ONLY = frozenset({"-h", "--help", "-v", "--version"})  # pi answers these without a model


def require_daemon(client: ReefClient) -> dict[str, Any]:
    """``GET /healthz``; when no daemon answers, :class:`DaemonUnavailable` saying how to start one."""
    try:
        return client.health()
    except DaemonUnavailable as exc:
        raise DaemonUnavailable(f"{exc.message}: start it with `reef serve`") from exc


# ------------------------------------------------------------------------------------ running pi


def _run_pi(ctx: _Context, args: list[str]) -> int:
    online = ctx.env.get("REEF_PI_ONLINE", "").lower() in ("1", "true", "yes")
    if args[:1] == ["--online"]:
        online, args = True, args[1:]
    if not _INFO_ONLY.intersection(args):
        # pi would fail on its first model call with only "Connection error.": say why, before it starts
        with ctx.client(timeout=_HEALTH_TIMEOUT_S) as client:
            require_daemon(client)
    installed = _installed(ctx)
    pi = _pi_path(ctx, installed)
    tag = ctx.env.get("REEF_SESSION") or uuid.uuid4().hex
    if not _SESSION.fullmatch(tag):
        raise ReefError(f"REEF_SESSION {tag[:80]!r} must be 1-128 letters, digits, '.', '_', ':' or '-'")
    run_env = dict(ctx.env)
    if not online:
        for key, value in _OFFLINE.items():
            run_env.setdefault(key, value)
    run_env.update(
        {
            "PI_CODING_AGENT_DIR": str(ctx.layout.agent),
            "REEF_URL": ctx.url,
            "REEF_SCENARIO": ctx.scenario,
            # pi resolves these header and key values from the environment and would send the
            # variable's name when it is unset: always set them
            "REEF_API_KEY": ctx.token or ctx.env.get("REEF_API_KEY") or "reef-local",
            "REEF_RUN_TAG": tag,
        }
    )
    if ctx.launcher:
        run_env["REEF_PI_LAUNCHER"] = ctx.launcher
    if any(a in ("-h", "--help") for a in args):
        print(
            f"reef-pi: pi routed through reef (scenario {ctx.scenario}); `reef-pi help` for reef's commands",
            file=ctx.err,
        )
    started = time.time()
    _write_json(
        ctx.layout.last_run,
        {
            "tag": tag,
            "started_at": _iso(started),
            "started_ms": int(started * 1000),
            "release": installed.get("release"),
            "cwd": os.getcwd(),
            "args": args,
        },
    )
    try:
        os.execve(pi, [pi, *args], run_env)
    except OSError as exc:
        raise ReefError(f"could not start pi at {pi}: {exc.strerror or exc}") from exc
    return 1  # not reached: execve replaced the process


def _installed(ctx: _Context) -> dict[str, Any]:
    try:
        data = json.loads(ctx.layout.sidecar.read_text())
    except FileNotFoundError:
        raise ReefError(
            f"pi is not installed for scenario {ctx.scenario} (no {ctx.layout.sidecar}): install it with\n"
            f"  curl -fsSL '{ctx.installer_url()}' | sh"
        ) from None
    except (OSError, ValueError) as exc:
        raise ReefError(f"{ctx.layout.sidecar} cannot be read ({exc}): run reef-pi update") from exc
    if not isinstance(data, dict):
        raise ReefError(f"{ctx.layout.sidecar} is not a reef sidecar: run reef-pi update")
    return data


def _pi_path(ctx: _Context, installed: Mapping[str, Any]) -> str:
    explicit = ctx.env.get("REEF_PI")
    if explicit:
        return explicit
    recorded = installed.get("pi")
    if isinstance(recorded, str) and os.access(recorded, os.X_OK):
        return recorded
    found = shutil.which("pi", path=ctx.env.get("PATH"))
    if found:
        return found
    raise ReefError(f"no pi to run (the install found {recorded!r}, which is gone): run reef-pi update")


# ------------------------------------------------------------------------------------ evolve


def _evolve(ctx: _Context, args: list[str]) -> int:
    def build(p: _Parser) -> None:
        p.add_argument("text")
        p.add_argument("--wait", action="store_true")
        p.add_argument("--timeout", type=float, default=600.0)

    opts = _parse("evolve", args, build)
    if not opts.text.strip():
        raise Usage("the ask is empty: say what the agent should do differently")
    if opts.timeout <= 0:
        raise Usage("--timeout must be a positive number of seconds")
    release = _installed_release(ctx)
    with ctx.client() as client:
        asked = client.train(ctx.scenario, opts.text, release_id=release, harness="pi")
        ask_id = asked["agent_record_id"]
        ctx.say(f"ask {ask_id} filed for scenario {ctx.scenario} (installed: {release or 'no release'})")
        ctx.say(f"progress: {client.url}{asked['page_path']}")
        if not opts.wait:
            ctx.say("when it settles, `reef-pi versions` shows the result; `reef-pi update` installs it")
            return 0
        seen: list[str] = []

        def show(progress: Progress) -> None:
            if progress.state != "settled" and progress.state not in seen:
                seen.append(progress.state)
                ctx.say(f"  {_SAYS.get(progress.state, progress.state)}…")

        progress = client.wait(ctx.scenario, ask_id, timeout=opts.timeout, on_progress=show)
        if not progress.settled:
            ctx.say(f"{ask_id} is still {progress.state} after {opts.timeout:g}s; it goes on in reef")
            return 1
        return _outcome(ctx, client, progress)


def _outcome(ctx: _Context, client: ReefClient, progress: Progress) -> int:
    result = progress.result or {}
    verdict = str(result.get("verdict") or "unknown")
    step = result.get("step")
    name = f"c{step}" if step is not None else "the candidate"
    page = f"{client.url}{result['page_path']}" if result.get("page_path") else None
    release = result.get("release")
    tty = sys.stdin.isatty() and ctx.out.isatty()
    if release:
        ctx.say(f"selected: {release} ({name}) is the current release of {ctx.scenario}")
        if page:
            ctx.say(f"  page: {page}")
        ctx.say(
            f"  next: reef-pi update   (installs {release}; in a running pi: /versions {release} install)"
        )
        if tty and _yes(f"Install {release} now? [y/N] "):
            return _update(ctx, ["--release", release])
        return 0
    if verdict == "pending":
        ctx.say(f"pending: {name} adds or changes code that runs on this machine and waits for your approval")
        if page:
            ctx.say(f"  page: {page}")
        ctx.say(
            f"  next: reef promote {ctx.scenario} {name}, then reef-pi update "
            f"(in pi: /versions {name} install)"
        )
        if tty and _approve(ctx, client, name):
            promoted = client.promote(ctx.scenario, name, approved_by=approver("reef-pi"))
            ctx.say(f"{name} is now {promoted['release']}")
            return _update(ctx, ["--release", promoted["release"]])
        return 0
    failed = next((c for c in result.get("checks", []) if c.get("passed") is False), None)
    why = f": {failed['name']}: {failed.get('detail')}" if failed else ""
    ctx.say(f"{verdict} ({name}){why}")
    if page:
        ctx.say(f"  page: {page}")
    ctx.say("  the installed release stays as it is; rephrase the ask and try again")
    return 0


def _approve(ctx: _Context, client: ReefClient, name: str) -> bool:
    """Name the code pending step ``name`` runs, and ask to approve and install it."""
    step: dict[str, Any] = next((s for s in client.releases(ctx.scenario)["steps"] if s["name"] == name), {})
    code = code_notice(step.get("executable"))
    if code:
        ctx.say(code)
    question = approval_question(name, ctx.scenario, step.get("executable"))
    return _yes(f"{question} Yes installs it too. [y/N] ")


def _yes(question: str) -> bool:
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:
        return False


def _installed_release(ctx: _Context) -> str | None:
    try:
        release = json.loads(ctx.layout.sidecar.read_text()).get("release")
    except (OSError, ValueError, AttributeError):
        return None
    return release if isinstance(release, str) else None


# ------------------------------------------------------------------------------------ versions


def versions_table(listing: Mapping[str, Any], installed: Mapping[str, Any]) -> str:
    """Pending steps (newest first), then the releases (newest first), in aligned columns:
    version, short id, result, installed/current marks, the ask."""
    rows = [("version", "id", "result", "installed/current", "ask")]
    steps = sorted((s for s in listing.get("steps", []) if s.get("pending")), key=lambda s: -s["step"])
    for s in steps:
        marks = "needs approval" + (f", on {s['base']}" if s.get("base") else "")
        rows.append((s["name"], "-", "pending", marks, _one_line(s.get("ask"))))
    for r in listing.get("releases", []):
        mark: list[str] = []
        if r.get("commit") == installed.get("commit") and r.get("release") == installed.get("release"):
            mark.append("installed")
        if r.get("current"):
            mark.append("current")
        rows.append(
            (
                r["release"],
                str(r.get("commit") or "")[:7],
                _result(r),
                ", ".join(mark),
                _one_line(r.get("ask")),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(
        "  ".join([*(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])), row[4]]).rstrip()
        for row in rows
    )


def _result(row: Mapping[str, Any]) -> str:
    if row.get("operation") == "evolve":
        return str(row.get("verdict") or "").split(":")[0] or "selected"
    if row.get("operation") == "promote":
        return "approved"
    return str(row.get("operation") or "")


def _one_line(text: str | None, width: int = _ASK_WIDTH) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _ignore(_value: object) -> None:
    """For a lambda that adds an argument: argparse's return value is not ours to pass on."""


def _versions(ctx: _Context, args: list[str]) -> int:
    opts = _parse("versions", args, lambda p: _ignore(p.add_argument("name", nargs="?")))
    with ctx.client() as client:
        listing = client.releases(ctx.scenario)
    if opts.name:
        rows = [*listing.get("releases", []), *listing.get("steps", [])]
        row = next((r for r in rows if opts.name in (r.get("release"), r.get("name"))), None)
        if row is None or not row.get("page_path"):
            raise ReefError(
                f"no release or step {opts.name} in scenario {ctx.scenario}: see reef-pi versions"
            )
        ctx.say(f"{opts.name}: {ctx.url}{row['page_path']}")
        return 0
    if not listing.get("releases") and not any(s.get("pending") for s in listing.get("steps", [])):
        ctx.say(f'scenario {ctx.scenario} has no releases yet; ask for one with: reef-pi evolve "..."')
        return 0
    installed = _read_sidecar(ctx.layout) or {}
    ctx.say(versions_table(listing, installed))
    return 0


def _read_sidecar(layout: Layout) -> dict[str, Any] | None:
    try:
        data = json.loads(layout.sidecar.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# ------------------------------------------------------------------------------------ update


def _update(ctx: _Context, args: list[str]) -> int:
    opts = _parse("update", args, lambda p: _ignore(p.add_argument("--release")))
    params = {"adapter": "pi", "scenario": ctx.scenario}
    if opts.release:
        params["release"] = opts.release
    headers = {"x-reef-scenario": ctx.scenario}
    if ctx.token:
        headers["authorization"] = f"Bearer {ctx.token}"
    try:
        response = httpx.get(f"{ctx.url}/reef/harness/install", params=params, headers=headers, timeout=60)
    except httpx.ConnectError as exc:
        raise DaemonUnavailable(f"no reef daemon answers at {ctx.url} ({exc})") from exc
    except httpx.HTTPError as exc:
        raise ReefError(f"the installer could not be fetched from {ctx.url}: {exc}") from exc
    if not response.is_success:
        raise ReefError(f"the installer could not be fetched: {_error_message(response)}")
    run = subprocess.run(
        ["sh", "-s"], input=response.content, env=dict(ctx.env), stdout=ctx.out, stderr=ctx.err
    )
    return 0 if run.returncode == 0 else 1


def _error_message(response: httpx.Response) -> str:
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = f"{response.status_code} {response.reason_phrase}"
    return str(message)


# ------------------------------------------------------------------------------------ report


def _report(ctx: _Context, args: list[str]) -> int:
    def build(p: _Parser) -> None:
        p.add_argument("--score", type=float, required=True)
        p.add_argument("--feedback")

    opts = _parse("report", args, build)
    try:
        last = json.loads(ctx.layout.last_run.read_text())
        tag, started_ms = str(last["tag"]), int(last["started_ms"])
    except FileNotFoundError:
        raise ReefError(
            f"no run to report on: start pi with reef-pi first (scenario {ctx.scenario})"
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ReefError(f"{ctx.layout.last_run} cannot be read ({exc}): run reef-pi again") from exc
    # ids are time-ordered: start a little before the run, in case the clocks differ
    after = f"rec_{max(0, started_ms - _CLOCK_SLACK_MS):012x}{0:016x}"
    with ctx.client() as client:
        records = list(client.iter_records(ctx.scenario, after=after, tag=f"{_RUN_TAG}:{tag}"))
        if not records:
            raise ReefError(
                f"the last run (started {last.get('started_at')}) left no records in scenario "
                f"{ctx.scenario}: it never reached the model through reef"
            )
        receipts = [r["id"] for r in records]
        made = client.report(
            ctx.scenario,
            receipts,
            score=opts.score,
            feedback=opts.feedback,
            metadata={"harness": "pi", "run": tag, "session": tag},
        )
    plural = "s" if len(receipts) != 1 else ""
    ctx.say(
        f"report {made['agent_record_id']} (score {opts.score:g}) on {len(receipts)} receipt{plural} "
        f"of the run started {last.get('started_at')}"
    )
    return 0


# ------------------------------------------------------------------------------------ doctor


def _doctor(ctx: _Context, args: list[str]) -> int:
    _parse("doctor", args, lambda p: None)
    lines: list[tuple[bool | None, str, str]] = []  # (met, what, detail); None: a note
    lines.append((True, "python", f"{sys.executable} ({sys.version.split()[0]})"))
    reachable = False
    try:
        with ctx.client(timeout=5.0) as client:
            health = require_daemon(client)
            reachable = True
            lines.append((True, "reef daemon", f"{ctx.url} answers (reef {health.get('version')})"))
            try:
                client.status()
                lines.append((True, "token", "accepted" if ctx.token else "none needed"))
            except ReefError as exc:
                hint = "export REEF_TOKEN" if not ctx.token else "check REEF_TOKEN"
                lines.append((False, "token", f"{exc.message} ({hint})"))
            listing = None
            try:
                listing = client.releases(ctx.scenario)
            except ReefError:
                pass
    except ReefError as exc:
        lines.append((False, "reef daemon", exc.message))
        listing = None
    sidecar = _read_sidecar(ctx.layout)
    if sidecar is None:
        lines.append(
            (False, "installed", f"nothing in {ctx.layout.base}: curl -fsSL '{ctx.installer_url()}' | sh")
        )
    else:
        lines.append((True, "installed", f"{sidecar.get('release') or 'no release'} in {ctx.layout.agent}"))
        files = sidecar.get("files") or {}
        bad = [p for p, sha in files.items() if _sha256_of(ctx.layout.agent / p) != sha]
        if bad:
            lines.append(
                (False, "files", f"{len(bad)} changed or missing ({', '.join(bad[:3])}): run reef-pi update")
            )
        else:
            lines.append((True, "files", f"{len(files)} match their sha256"))
        if reachable and listing is not None:
            tip = next((r for r in listing.get("releases", []) if r.get("current")), None)
            if tip and tip.get("release") != sidecar.get("release"):
                lines.append((None, "release", f"{tip['release']} is available: reef-pi update"))
    try:
        pi = _pi_path(ctx, sidecar or {})
    except ReefError as exc:
        lines.append((False, "pi", exc.message))
    else:
        version = _pi_version(pi, ctx.env)
        if version == PI_VERSION:
            lines.append((True, "pi", f"{pi} is pi {version}"))
        else:
            said = f"is pi {version}" if version else "does not start (node >= 20.6 on PATH?)"
            lines.append((False, "pi", f"{pi} {said}; reef needs {PI_VERSION}: run reef-pi update"))
    on_path = shutil.which("reef-pi", path=ctx.env.get("PATH"))
    if on_path:
        lines.append((True, "PATH", f"reef-pi is {on_path}"))
    else:
        bindir = ctx.env.get("REEF_BIN_DIR") or str(
            Path(ctx.env.get("HOME") or Path.home()) / ".local" / "bin"
        )
        lines.append((False, "PATH", f"reef-pi is not on PATH: add {bindir} to it"))
    width = max(len(what) for _, what, _ in lines)
    for met, what, detail in lines:
        mark = "note" if met is None else ("ok" if met else "FAIL")
        ctx.say(f"{mark:<4}  {what:<{width}}  {detail}")
    return 0 if all(met is not False for met, _, _ in lines) else 1


def _sha256_of(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _pi_version(pi: str, env: Mapping[str, str]) -> str | None:
    probe_env = {"PATH": env.get("PATH", os.defpath), "HOME": env.get("HOME", ""), "PI_OFFLINE": "1"}
    try:
        probe = subprocess.run(
            [pi, "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            env=probe_env,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    # pi prints its version on stderr when stdin is not a terminal
    found = _VERSION.findall(probe.stdout + "\n" + probe.stderr)
    return found[-1] if probe.returncode == 0 and found else None


# ------------------------------------------------------------------------------------ help


def _help(ctx: _Context, args: list[str]) -> int:
    ctx.say(_USAGE)
    ctx.say(f"\nscenario {ctx.scenario} at {ctx.url}; agent dir {ctx.layout.agent}")
    return 0


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(value, indent=2) + "\n")
    tmp.replace(path)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_COMMANDS: dict[str, Callable[[_Context, list[str]], int]] = {
    "evolve": _evolve,
    "versions": _versions,
    "update": _update,
    "report": _report,
    "doctor": _doctor,
    "help": _help,
}
