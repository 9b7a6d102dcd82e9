"""The launcher core shared by ``reef-pi`` and ``reef-claude``: reef's verbs for the person at the
terminal, the installed state, the daemon calls and the doctor's lines.

| command | what |
|---|---|
| ``reef-X [harness args]`` | the harness, routed through reef (each adapter's :attr:`Harness.run`) |
| ``reef-X evolve "text" [--wait] [--timeout S]`` | file an ask on the installed release, follow it |
| ``reef-X versions [NAME]`` | the releases table; with a name, its page |
| ``reef-X update [--release vN]`` | fetch the installer for the current (or named) release and run it |
| ``reef-X report --score S [--feedback T]`` | feedback on the receipts of the last run |
| ``reef-X learn [--wait] [--timeout S]`` | a usage step now (reefine learns from the scored sessions) |
| ``reef-X doctor`` | one line per prerequisite; exit 0 only when all are met |

An adapter describes what differs in one :class:`Harness`: its name, its launcher's name, the
binary it runs and how to tell that binary's version, the folder its config lives in, and the
function that starts it (pi: environment variables and ``exec``; Claude Code: a ``--settings``
file and a seeded ``.claude.json``, then ``exec``).  Everything else lives here, once.

Environment: ``REEF_URL`` and ``REEF_SCENARIO`` override the values the installer baked in;
``REEF_TOKEN`` is sent when set; ``REEF_HOME`` (default ``~/.reef``) holds the installs under
``harnesses/<adapter>/<scenario>/``; ``REEF_SESSION`` names the run's session instead of a fresh id.

"The last run": each run gets a fresh id (or ``REEF_SESSION``) that the harness sends as the
``x-reef-tag-run`` header, so every record of the run carries the tag ``run=<id>``.  The launcher
notes the id and start time in ``last-run.json`` before it hands the process to the harness;
``report`` asks the daemon for the records with that tag written since then and reports on them.

Exit codes: 0 done, 1 failed, 2 usage.

Starting the harness is the path every run takes, so it imports only the standard library and
reef's small modules (ids, errors): reef's HTTP client and the release listing, which bring
httpx and pygit2 (about 150 ms), load in the verbs that use them, and the check that the daemon
answers is one ``urllib`` request.
"""

from __future__ import annotations

import argparse
import functools
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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.client import HTTPConnection, HTTPSConnection
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO
from urllib.parse import quote, urlsplit

from reef_core.errors import ReefError, Unauthorized
from reef_core.ids import validate_scenario_name

if TYPE_CHECKING:  # the client (httpx) and the release listing (pygit2) load only in the verbs
    from reef_core.client import Progress, ReefClient

__all__ = [
    "COMMANDS",
    "Context",
    "Harness",
    "Layout",
    "Usage",
    "find_binary",
    "main",
    "parse",
    "probe_version",
    "receipts_since",
    "require_daemon",
    "run_tag",
    "version_at_least",
    "versions_table",
    "write_json",
]

COMMANDS = ("evolve", "versions", "update", "report", "learn", "doctor", "help")
RUN_TAG = "run"
CLOCK_SLACK_MS = 10_000  # records of a run are searched from this long before it started
HEALTH_TIMEOUT_S = 3.0  # a daemon on this machine answers /healthz in milliseconds
_SESSION = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_ASK_WIDTH = 60
_SAYS = {
    "queued": "waiting for the learner",
    "proposing": "proposing a change",
    "checking": "running the release checks",
    "learning": "learning from the sessions",
}
_VERSION = re.compile(r"(?<![\d.])v?(\d+\.\d+\.\d+)(?![\d.])")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


class Usage(ReefError):
    """The command line is wrong (exit code 2)."""

    code = "usage"


@dataclass(frozen=True)
class Harness:
    """What one adapter's launcher does differently (see the module docstring)."""

    adapter: str  # "pi", "claude_code": the installer's ?adapter= and the folder under harnesses/
    command: str  # the launcher's name: "reef-pi"
    binary: str  # the program it runs: "pi"; also the sidecar key naming the one installed
    label: str  # for people: "pi", "Claude Code"
    config_dir: str  # the harness's config folder inside the install: "agent", "config"
    binary_env: str  # the variable that names the binary to run: "REEF_PI"
    min_version: str  # the oldest version reef works with
    #: starts the harness (replacing the process); returns an exit code only when it cannot
    run: Callable[[Context, list[str]], int]
    #: in-session words for "install this release", for the people reading ``evolve``'s outcome
    in_session_install: str = "/versions {name} install"
    #: the harness's own flags that answer without a model call (no daemon needed)
    info_only: frozenset[str] = frozenset({"-h", "--help", "-v", "--version"})
    #: the launcher's own flags before the harness's, for the usage text
    run_flags: str = ""
    #: verbs only this adapter has (Claude Code's ``hook``)
    extra: Mapping[str, Callable[[Context, list[str]], int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Layout:
    """Where one scenario's install for one adapter lives: ``<home>/harnesses/<adapter>/<scenario>/``."""

    home: Path
    scenario: str
    adapter: str = "pi"
    config_dir: str = "agent"

    @classmethod
    def of(cls, env: Mapping[str, str], scenario: str, harness: Harness) -> Layout:
        home = env.get("REEF_HOME") or str(Path(env.get("HOME") or Path.home()) / ".reef")
        name = validate_scenario_name(scenario, field="REEF_SCENARIO")
        return cls(Path(home), name, harness.adapter, harness.config_dir)

    @property
    def base(self) -> Path:
        return self.home / "harnesses" / self.adapter / self.scenario

    @property
    def config(self) -> Path:
        """The harness's config folder (pi's agent dir, Claude Code's ``CLAUDE_CONFIG_DIR``)."""
        return self.base / self.config_dir

    @property
    def sidecar(self) -> Path:
        return self.base / "installed.json"

    @property
    def last_run(self) -> Path:
        return self.base / "last-run.json"


@dataclass(frozen=True)
class Context:
    harness: Harness
    url: str
    scenario: str
    token: str | None
    layout: Layout
    env: Mapping[str, str]
    launcher: str | None
    out: TextIO
    err: TextIO

    def client(self, timeout: float = 30.0) -> ReefClient:
        from reef_core.client import ReefClient

        return ReefClient(self.url, self.token, timeout=timeout)

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def installer_url(self) -> str:
        return (
            f"{self.url}/reef/harness/install?adapter={self.harness.adapter}&scenario={quote(self.scenario)}"
        )

    def installed(self) -> dict[str, Any]:
        """The sidecar; a missing or unreadable one is an error saying how to install."""
        try:
            data = json.loads(self.layout.sidecar.read_text())
        except FileNotFoundError:
            raise ReefError(
                f"{self.harness.label} is not installed for scenario {self.scenario} "
                f"(no {self.layout.sidecar}): install it with\n  curl -fsSL '{self.installer_url()}' | sh"
            ) from None
        except (OSError, ValueError) as exc:
            raise ReefError(
                f"{self.layout.sidecar} cannot be read ({exc}): run {self.harness.command} update"
            ) from exc
        if not isinstance(data, dict):
            raise ReefError(f"{self.layout.sidecar} is not a reef sidecar: run {self.harness.command} update")
        return data


# ------------------------------------------------------------------------------------ entry


def main(
    harness: Harness,
    argv: list[str],
    *,
    url: str,
    scenario: str,
    launcher: str | None = None,
    env: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run ``reef-X argv``; returns the exit code (a harness run replaces the process instead)."""
    env = os.environ if env is None else env
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    try:
        name = env.get("REEF_SCENARIO") or scenario
        ctx = Context(
            harness=harness,
            url=(env.get("REEF_URL") or url).rstrip("/"),
            scenario=validate_scenario_name(name, field="REEF_SCENARIO"),
            token=env.get("REEF_TOKEN") or None,
            layout=Layout.of(env, name, harness),
            env=env,
            launcher=launcher,
            out=out,
            err=err,
        )
        if argv and argv[0] in harness.extra:
            return harness.extra[argv[0]](ctx, argv[1:])
        if argv and argv[0] in COMMANDS:
            return _COMMANDS[argv[0]](ctx, argv[1:])
        return harness.run(ctx, argv)
    except Usage as exc:
        print(f"{harness.command}: {exc.message}\n{usage_text(harness)}", file=err)
        return 2
    except Unauthorized as exc:
        hint = "check REEF_TOKEN" if env.get("REEF_TOKEN") else "export REEF_TOKEN with this reef's token"
        print(f"{harness.command}: {exc.message} ({hint})", file=err)
        return 1
    except ReefError as exc:
        print(f"{harness.command}: {exc.message}", file=err)
        return 1
    except KeyboardInterrupt:
        print(f"{harness.command}: interrupted", file=err)
        return 130


def entry(harness: Harness) -> Callable[..., int]:
    """The ``main`` of one adapter's launcher: :func:`main` with ``harness`` given."""
    return functools.partial(main, harness)


def usage_text(harness: Harness) -> str:
    c = harness.command
    flags = f"{harness.run_flags} " if harness.run_flags else ""
    return (
        f"usage: {c} {flags}[{harness.binary} args]          {harness.label}, routed through reef\n"
        f'       {c} evolve "text" [--wait] [--timeout S]\n'
        f"       {c} versions [vN|cN]\n"
        f"       {c} update [--release vN]\n"
        f"       {c} report --score S [--feedback T]\n"
        f"       {c} learn [--wait] [--timeout S]\n"
        f"       {c} doctor"
    )


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise Usage(f"{self.prog}: {message}")


def parse(prog: str, args: list[str], build: Callable[[_Parser], None]) -> argparse.Namespace:
    """Parse a verb's arguments; a mistake raises :class:`Usage` (exit 2 with the usage text)."""
    parser = _Parser(prog=prog, add_help=False)
    build(parser)
    return parser.parse_args(args)


def _parse(ctx: Context, verb: str, args: list[str], build: Callable[[_Parser], None]) -> argparse.Namespace:
    return parse(f"{ctx.harness.command} {verb}", args, build)


# ------------------------------------------------------------------------------------ the daemon


def require_daemon(client: ReefClient) -> dict[str, Any]:
    """``GET /healthz``; when no daemon answers, :class:`DaemonUnavailable` saying how to start one."""
    from reef_core.client import DaemonUnavailable

    try:
        return client.health()
    except DaemonUnavailable as exc:
        raise DaemonUnavailable(f"{exc.message}: start it with `reef serve`") from exc


def daemon_answers(url: str, timeout: float = HEALTH_TIMEOUT_S) -> None:
    """``GET /healthz`` with the standard library (the run path's check, see the module
    docstring; no proxy from the environment, as reef's client); raises :class:`ReefError`
    saying how to start a daemon when none answers."""
    parts = urlsplit(url)
    kind = HTTPSConnection if parts.scheme == "https" else HTTPConnection
    try:
        connection = kind(parts.hostname or "", parts.port, timeout=timeout)
        try:
            connection.request("GET", f"{parts.path.rstrip('/')}/healthz")
            answered = connection.getresponse().status
        finally:
            connection.close()
    except (OSError, ValueError) as exc:
        raise ReefError(f"no reef daemon answers at {url} ({exc}): start it with `reef serve`") from exc
    if answered != 200:
        raise ReefError(f"{url} answers /healthz with {answered}: is it a reef daemon? (`reef serve`)")


def run_tag(ctx: Context, args: list[str]) -> tuple[str, dict[str, Any]]:
    """Before a run: the daemon answers (unless the harness only prints its version or help),
    the install is there; the run's tag is chosen and noted in ``last-run.json``.
    Returns the tag and the sidecar."""
    if not ctx.harness.info_only.intersection(args):
        # the harness would fail on its first model call with a bare connection error: say why first
        daemon_answers(ctx.url)
    installed = ctx.installed()
    tag = ctx.env.get("REEF_SESSION") or uuid.uuid4().hex
    if not _SESSION.fullmatch(tag):
        raise ReefError(f"REEF_SESSION {tag[:80]!r} must be 1-128 letters, digits, '.', '_', ':' or '-'")
    started = time.time()
    write_json(
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
    return tag, installed


def exec_harness(ctx: Context, binary: str, args: list[str], env: Mapping[str, str]) -> int:
    """Replace this process with the harness."""
    if any(a in ("-h", "--help") for a in args):
        print(
            f"{ctx.harness.command}: {ctx.harness.label} routed through reef (scenario {ctx.scenario}); "
            f"`{ctx.harness.command} help` for reef's commands",
            file=ctx.err,
        )
    try:
        os.execve(binary, [binary, *args], dict(env))
    except OSError as exc:
        raise ReefError(f"could not start {ctx.harness.label} at {binary}: {exc.strerror or exc}") from exc
    return 1  # not reached: execve replaced the process


def find_binary(ctx: Context, installed: Mapping[str, Any]) -> str:
    """The harness binary to run: ``$REEF_<X>``, else the one the install found, else PATH."""
    harness = ctx.harness
    explicit = ctx.env.get(harness.binary_env)
    if explicit:
        return explicit
    recorded = installed.get(harness.binary)
    if isinstance(recorded, str) and os.access(recorded, os.X_OK):
        return recorded
    found = shutil.which(harness.binary, path=ctx.env.get("PATH"))
    if found:
        return found
    raise ReefError(
        f"no {harness.binary} to run (the install found {recorded!r}, which is gone): "
        f"run {harness.command} update"
    )


def path_with(binary: str, path: str | None) -> str:
    """``PATH`` with the binary's own folder first: an npm install puts the node it needs there."""
    folder = str(Path(binary).parent)
    rest = [p for p in (path or os.defpath).split(os.pathsep) if p and p != folder]
    return os.pathsep.join([folder, *rest])


def probe_version(argv: list[str], env: Mapping[str, str], timeout: float = 30.0) -> str | None:
    """The last ``X.Y.Z`` that ``argv`` (a ``--version`` call) prints on stdout or stderr, when it
    exits 0; None when it does not start or says no version."""
    try:
        probe = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            env=dict(env),
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = _VERSION.findall(_ANSI.sub("", probe.stdout + "\n" + probe.stderr))
    return found[-1] if probe.returncode == 0 and found else None


def version_at_least(found: str | None, wanted: str) -> bool:
    """``found`` (``X.Y.Z``) is ``wanted`` or newer."""
    if not found:
        return False
    try:
        return _numbers(found) >= _numbers(wanted)
    except ValueError:
        return False


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("-")[0].split(".")[:3])


# ------------------------------------------------------------------------------------ evolve


def _evolve(ctx: Context, args: list[str]) -> int:
    def build(p: _Parser) -> None:
        p.add_argument("text")
        p.add_argument("--wait", action="store_true")
        p.add_argument("--timeout", type=float, default=600.0)

    opts = _parse(ctx, "evolve", args, build)
    if not opts.text.strip():
        raise Usage("the ask is empty: say what the agent should do differently")
    if opts.timeout <= 0:
        raise Usage("--timeout must be a positive number of seconds")
    release = installed_release(ctx.layout)
    with ctx.client() as client:
        asked = client.train(ctx.scenario, opts.text, release_id=release, harness=ctx.harness.adapter)
        ask_id = asked["agent_record_id"]
        ctx.say(f"ask {ask_id} filed for scenario {ctx.scenario} (installed: {release or 'no release'})")
        ctx.say(f"progress: {client.url}{asked['page_path']}")
        if not opts.wait:
            c = ctx.harness.command
            ctx.say(f"when it settles, `{c} versions` shows the result; `{c} update` installs it")
            return 0
        progress = _follow(ctx, client, ask_id, opts.timeout)
        if progress is None:
            return 1
        return _outcome(ctx, client, progress)


def _follow(ctx: Context, client: ReefClient, ticket: str, timeout: float) -> Progress | None:
    seen: list[str] = []

    def show(progress: Progress) -> None:
        if progress.state != "settled" and progress.state not in seen:
            seen.append(progress.state)
            ctx.say(f"  {_SAYS.get(progress.state, progress.state)}…")

    progress = client.wait(ctx.scenario, ticket, timeout=timeout, on_progress=show)
    if not progress.settled:
        ctx.say(f"{ticket} is still {progress.state} after {timeout:g}s; it goes on in reef")
        return None
    return progress


def _outcome(ctx: Context, client: ReefClient, progress: Progress) -> int:
    from reef_core.client import approver

    result = progress.result or {}
    verdict = str(result.get("verdict") or "unknown")
    step = result.get("step")
    name = f"c{step}" if step is not None else "the candidate"
    page = f"{client.url}{result['page_path']}" if result.get("page_path") else None
    release = result.get("release")
    command = ctx.harness.command
    tty = sys.stdin.isatty() and ctx.out.isatty()
    where = f"in a running {ctx.harness.label}: {ctx.harness.in_session_install}"
    if release:
        ctx.say(f"selected: {release} ({name}) is the current release of {ctx.scenario}")
        if page:
            ctx.say(f"  page: {page}")
        ctx.say(f"  next: {command} update   (installs {release}; {where.format(name=release)})")
        if tty and _yes(f"Install {release} now? [y/N] "):
            return _update(ctx, ["--release", release])
        return 0
    if verdict == "pending":
        ctx.say(f"pending: {name} adds or changes code that runs on this machine and waits for your approval")
        if page:
            ctx.say(f"  page: {page}")
        ctx.say(
            f"  next: reef promote {ctx.scenario} {name}, then {command} update ({where.format(name=name)})"
        )
        if tty and _approve(ctx, client, name):
            promoted = client.promote(ctx.scenario, name, approved_by=approver(command))
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


def _approve(ctx: Context, client: ReefClient, name: str) -> bool:
    """Name the code pending step ``name`` runs, and ask to approve and install it."""
    from reef_core.release.listing import approval_question, code_notice

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


def read_sidecar(layout: Layout) -> dict[str, Any] | None:
    try:
        data = json.loads(layout.sidecar.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def installed_release(layout: Layout) -> str | None:
    release = (read_sidecar(layout) or {}).get("release")
    return release if isinstance(release, str) else None


# ------------------------------------------------------------------------------------ versions


def versions_table(listing: Mapping[str, Any], installed: Mapping[str, Any]) -> str:
    """Pending steps (newest first), then the releases (newest first), in aligned columns:
    version, short id, result, installed/current marks, the ask."""
    rows = [("version", "id", "result", "installed/current", "ask")]
    steps = sorted((s for s in listing.get("steps", []) if s.get("pending")), key=lambda s: -s["step"])
    for s in steps:
        marks = "needs approval" + (f", on {s['base']}" if s.get("base") else "")
        rows.append((s["name"], "-", "pending", marks, one_line(s.get("ask"))))
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
                one_line(r.get("ask")),
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


def one_line(text: str | None, width: int = _ASK_WIDTH) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _ignore(_value: object) -> None:
    """For a lambda that adds an argument: argparse's return value is not ours to pass on."""


def page_of(listing: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    """The release or step row called ``name`` (``v3``, ``c4``) that has a page."""
    rows = [*listing.get("releases", []), *listing.get("steps", [])]
    row = next((r for r in rows if name in (r.get("release"), r.get("name"))), None)
    return row if row is not None and row.get("page_path") else None


def _versions(ctx: Context, args: list[str]) -> int:
    opts = _parse(ctx, "versions", args, lambda p: _ignore(p.add_argument("name", nargs="?")))
    with ctx.client() as client:
        listing = client.releases(ctx.scenario)
    if opts.name:
        row = page_of(listing, opts.name)
        if row is None:
            raise ReefError(
                f"no release or step {opts.name} in scenario {ctx.scenario}: "
                f"see {ctx.harness.command} versions"
            )
        ctx.say(f"{opts.name}: {ctx.url}{row['page_path']}")
        return 0
    if not listing.get("releases") and not any(s.get("pending") for s in listing.get("steps", [])):
        ctx.say(
            f"scenario {ctx.scenario} has no releases yet; "
            f'ask for one with: {ctx.harness.command} evolve "..."'
        )
        return 0
    ctx.say(versions_table(listing, read_sidecar(ctx.layout) or {}))
    return 0


# ------------------------------------------------------------------------------------ update


def _update(ctx: Context, args: list[str]) -> int:
    opts = _parse(ctx, "update", args, lambda p: _ignore(p.add_argument("--release")))
    run = install(ctx, opts.release, stdout=ctx.out, stderr=ctx.err)
    return 0 if run.returncode == 0 else 1


def install(ctx: Context, release: str | None, *, stdout: Any, stderr: Any) -> subprocess.CompletedProcess:
    """Fetch the installer for ``release`` (default: the current one) and run it with ``sh``."""
    import httpx

    from reef_core.client import DaemonUnavailable

    params = {"adapter": ctx.harness.adapter, "scenario": ctx.scenario}
    if release:
        params["release"] = release
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
    return subprocess.run(
        ["sh", "-s"], input=response.content, env=dict(ctx.env), stdout=stdout, stderr=stderr
    )


def _error_message(response: Any) -> str:
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = f"{response.status_code} {response.reason_phrase}"
    return str(message)


# ------------------------------------------------------------------------------------ report


def receipts_since(client: ReefClient, scenario: str, tag: str, started_ms: int) -> list[str]:
    """The ids of the records tagged ``tag`` (``run:<id>``, ``session:<id>``) written since
    ``started_ms`` (a little before: ids are time-ordered, clocks may differ)."""
    after = f"rec_{max(0, started_ms - CLOCK_SLACK_MS):012x}{0:016x}"
    return [r["id"] for r in client.iter_records(scenario, after=after, tag=tag)]


def _report(ctx: Context, args: list[str]) -> int:
    def build(p: _Parser) -> None:
        p.add_argument("--score", type=float, required=True)
        p.add_argument("--feedback")

    opts = _parse(ctx, "report", args, build)
    try:
        last = json.loads(ctx.layout.last_run.read_text())
        tag, started_ms = str(last["tag"]), int(last["started_ms"])
    except FileNotFoundError:
        raise ReefError(
            f"no run to report on: start {ctx.harness.label} with {ctx.harness.command} first "
            f"(scenario {ctx.scenario})"
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ReefError(
            f"{ctx.layout.last_run} cannot be read ({exc}): run {ctx.harness.command} again"
        ) from exc
    with ctx.client() as client:
        receipts = receipts_since(client, ctx.scenario, f"{RUN_TAG}:{tag}", started_ms)
        if not receipts:
            raise ReefError(
                f"the last run (started {last.get('started_at')}) left no records in scenario "
                f"{ctx.scenario}: it never reached the model through reef"
            )
        made = client.report(
            ctx.scenario,
            receipts,
            score=opts.score,
            feedback=opts.feedback,
            metadata={"harness": ctx.harness.adapter, "run": tag, "session": tag},
        )
    plural = "s" if len(receipts) != 1 else ""
    ctx.say(
        f"report {made['agent_record_id']} (score {opts.score:g}) on {len(receipts)} receipt{plural} "
        f"of the run started {last.get('started_at')}"
    )
    return 0


# ------------------------------------------------------------------------------------ learn


def _learn(ctx: Context, args: list[str]) -> int:
    def build(p: _Parser) -> None:
        p.add_argument("--wait", action="store_true")
        p.add_argument("--timeout", type=float, default=600.0)

    opts = _parse(ctx, "learn", args, build)
    if opts.timeout <= 0:
        raise Usage("--timeout must be a positive number of seconds")
    with ctx.client() as client:
        ticket = client.learn(ctx.scenario)["ticket"]
        ctx.say(f"learning from the sessions of scenario {ctx.scenario}: {ticket}")
        if not opts.wait:
            ctx.say(f"when it settles, `{ctx.harness.command} versions` shows the result")
            return 0
        progress = _follow(ctx, client, ticket, opts.timeout)
        if progress is None:
            return 1
        return _outcome(ctx, client, progress)


# ------------------------------------------------------------------------------------ doctor


def _doctor(ctx: Context, args: list[str]) -> int:
    _parse(ctx, "doctor", args, lambda p: None)
    harness = ctx.harness
    lines: list[tuple[bool | None, str, str]] = []  # (met, what, detail); None: a note
    lines.append((True, "python", f"{sys.executable} ({sys.version.split()[0]})"))
    reachable = False
    listing = None
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
            try:
                listing = client.releases(ctx.scenario)
            except ReefError:
                pass
    except ReefError as exc:
        lines.append((False, "reef daemon", exc.message))
    sidecar = read_sidecar(ctx.layout)
    if sidecar is None:
        lines.append(
            (False, "installed", f"nothing in {ctx.layout.base}: curl -fsSL '{ctx.installer_url()}' | sh")
        )
    else:
        lines.append((True, "installed", f"{sidecar.get('release') or 'no release'} in {ctx.layout.config}"))
        files = sidecar.get("files") or {}
        bad = [p for p, sha in files.items() if _sha256_of(ctx.layout.config / p) != sha]
        if bad:
            lines.append(
                (
                    False,
                    "files",
                    f"{len(bad)} changed or missing ({', '.join(bad[:3])}): run {harness.command} update",
                )
            )
        else:
            lines.append((True, "files", f"{len(files)} match their sha256"))
        if reachable and listing is not None:
            tip = next((r for r in listing.get("releases", []) if r.get("current")), None)
            if tip and tip.get("release") != sidecar.get("release"):
                lines.append((None, "release", f"{tip['release']} is available: {harness.command} update"))
    try:
        binary = find_binary(ctx, sidecar or {})
    except ReefError as exc:
        lines.append((False, harness.binary, exc.message))
    else:
        version = probe_version([binary, "--version"], _probe_env(ctx, binary))
        if version_at_least(version, harness.min_version):
            lines.append((True, harness.binary, f"{binary} is {harness.label} {version}"))
        else:
            said = f"is {harness.label} {version}" if version else "does not start (node on PATH?)"
            lines.append(
                (
                    False,
                    harness.binary,
                    f"{binary} {said}; reef needs {harness.min_version} or newer: "
                    f"run {harness.command} update",
                )
            )
    on_path = shutil.which(harness.command, path=ctx.env.get("PATH"))
    if on_path:
        lines.append((True, "PATH", f"{harness.command} is {on_path}"))
    else:
        bindir = ctx.env.get("REEF_BIN_DIR") or str(
            Path(ctx.env.get("HOME") or Path.home()) / ".local" / "bin"
        )
        lines.append((False, "PATH", f"{harness.command} is not on PATH: add {bindir} to it"))
    width = max(len(what) for _, what, _ in lines)
    for met, what, detail in lines:
        mark = "note" if met is None else ("ok" if met else "FAIL")
        ctx.say(f"{mark:<4}  {what:<{width}}  {detail}")
    return 0 if all(met is not False for met, _, _ in lines) else 1


def _probe_env(ctx: Context, binary: str) -> dict[str, str]:
    return {
        "PATH": path_with(binary, ctx.env.get("PATH")),
        "HOME": ctx.env.get("HOME", ""),
        "PI_OFFLINE": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


def _sha256_of(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


# ------------------------------------------------------------------------------------ help


def _help(ctx: Context, args: list[str]) -> int:
    ctx.say(usage_text(ctx.harness))
    ctx.say(f"\nscenario {ctx.scenario} at {ctx.url}; config {ctx.layout.config}")
    return 0


def write_json(path: Path, value: Any, mode: int | None = None) -> None:
    """Write ``value`` to ``path`` atomically (``mode``: the file's permissions, before it appears)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644 if mode is None else mode)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(value, indent=2) + "\n")
    tmp.replace(path)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_COMMANDS: dict[str, Callable[[Context, list[str]], int]] = {
    "evolve": _evolve,
    "versions": _versions,
    "update": _update,
    "report": _report,
    "learn": _learn,
    "doctor": _doctor,
    "help": _help,
}
