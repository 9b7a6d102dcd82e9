"""The launchers' verbs for the person at the terminal: ``evolve``, ``versions``, ``update``,
``report``, ``learn`` and ``help`` (``doctor`` is :mod:`adapters.doctor`); the table of them is
:data:`VERBS`.  What each command does is the table in :mod:`adapters.launcher`.

``evolve --wait`` and ``learn --wait`` follow the ask (or the learn step) and render what became
of it: :class:`reef_core.client.Outcome` reads that, once, for these verbs and for ``reef evolve``;
here it is said for a person who installs releases with this launcher: the release to install
(offered at a terminal), the candidate to approve (asked at a terminal: the code it runs is
named first, then promoted and installed on yes), or why nothing changed.

The release listing that the ``versions`` table and Claude Code's hooks show is rendered here
too (:func:`versions_table`, :func:`page_of`), and so are the receipts of a run or a session
(:func:`receipts_since`) and the installer run (:func:`install`).  Each verb parses its arguments
with the core's ``_parse``, looked up on :mod:`adapters.launcher` at each call.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from adapters import launcher as core
from adapters.doctor import doctor
from adapters.launcher import Context, Usage
from reef_core.client import DaemonUnavailable, Outcome, Progress, ReefClient, approver
from reef_core.errors import ReefError

__all__ = [
    "VERBS",
    "install",
    "one_line",
    "page_of",
    "receipts_since",
    "versions_table",
]

RUN_TAG = "run"
CLOCK_SLACK_MS = 10_000  # records of a run are searched from this long before it started
_ASK_WIDTH = 60


# ------------------------------------------------------------------------------------ evolve, learn


def _waiting(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait", action="store_true")
    p.add_argument("--timeout", type=float, default=600.0)


def _positive(timeout: float) -> None:
    if timeout <= 0:
        raise Usage("--timeout must be a positive number of seconds")


def evolve(ctx: Context, args: list[str]) -> int:
    def build(p: argparse.ArgumentParser) -> None:
        p.add_argument("text")
        _waiting(p)

    opts = core._parse(ctx, "evolve", args, build)
    if not opts.text.strip():
        raise Usage("the ask is empty: say what the agent should do differently")
    _positive(opts.timeout)
    release = core.installed_release(ctx.layout)
    with ctx.client() as client:
        asked = client.train(ctx.scenario, opts.text, release_id=release, harness=ctx.harness.adapter)
        ask_id = asked["agent_record_id"]
        ctx.say(f"ask {ask_id} filed for scenario {ctx.scenario} (installed: {release or 'no release'})")
        ctx.say(f"progress: {client.url}{asked['page_path']}")
        c = ctx.harness.command
        hint = f"when it settles, `{c} versions` shows the result; `{c} update` installs it"
        return _settle(ctx, client, ask_id, asked, opts, hint)


def learn(ctx: Context, args: list[str]) -> int:
    opts = core._parse(ctx, "learn", args, _waiting)
    _positive(opts.timeout)
    with ctx.client() as client:
        asked = client.learn(ctx.scenario)
        ticket = asked["ticket"]
        ctx.say(f"learning from the sessions of scenario {ctx.scenario}: {ticket}")
        hint = f"when it settles, `{ctx.harness.command} versions` shows the result"
        return _settle(ctx, client, ticket, asked, opts, hint)


def _settle(
    ctx: Context, client: ReefClient, ticket: str, asked: dict[str, Any], opts: argparse.Namespace, hint: str
) -> int:
    """Without ``--wait``, say ``hint``; with it, say each state the ask (or learn step) reaches
    until it settles, then what became of it."""
    if not opts.wait:
        ctx.say(hint)
        return 0
    seen: list[str] = []

    def show(progress: Progress) -> None:
        if not progress.settled and progress.state not in seen:
            seen.append(progress.state)
            ctx.say(f"  {progress.says}…")

    progress = client.wait(ctx.scenario, ticket, timeout=opts.timeout, on_progress=show)
    if not progress.settled:
        ctx.say(f"{ticket} is still {progress.state} after {opts.timeout:g}s; it goes on in reef")
        return 1
    return _outcome(ctx, client, Outcome.of(progress, client.url, asked))


def _outcome(ctx: Context, client: ReefClient, outcome: Outcome) -> int:
    name, page, release = outcome.candidate, outcome.page_url, outcome.release
    command = ctx.harness.command
    tty = sys.stdin.isatty() and ctx.out.isatty()
    where = f"in a running {ctx.harness.label}: {ctx.harness.in_session_install}"
    if release is not None:
        ctx.say(f"selected: {release} ({name}) is the current release of {ctx.scenario}")
        if page:
            ctx.say(f"  page: {page}")
        ctx.say(f"  next: {command} update   (installs {release}; {where.format(name=release)})")
        if tty and _yes(f"Install {release} now? [y/N] "):
            return update(ctx, ["--release", release])
        return 0
    if outcome.canary:
        ctx.say(f"canary: {name} passed its checks and serves a share of new {ctx.harness.label} sessions")
        ctx.say(f"  their scores decide whether it is published: reef canary {ctx.scenario} status")
        if page:
            ctx.say(f"  page: {page}")
        return 0
    if outcome.pending:
        ctx.say(f"pending: {name} adds or changes code that runs on this machine and waits for your approval")
        if page:
            ctx.say(f"  page: {page}")
        ctx.say(
            f"  next: reef promote {ctx.scenario} {name}, then {command} update ({where.format(name=name)})"
        )
        if tty and _approve(ctx, client, name):
            promoted = client.promote(ctx.scenario, name, approved_by=approver(command))
            ctx.say(f"{name} is now {promoted['release']}")
            return update(ctx, ["--release", promoted["release"]])
        return 0
    ctx.say(f"{outcome.verdict} ({name}){outcome.why}")
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


def versions(ctx: Context, args: list[str]) -> int:
    opts = core._parse(ctx, "versions", args, lambda p: _ignore(p.add_argument("name", nargs="?")))
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
    ctx.say(versions_table(listing, core.read_sidecar(ctx.layout) or {}))
    return 0


# ------------------------------------------------------------------------------------ update


def update(ctx: Context, args: list[str]) -> int:
    opts = core._parse(ctx, "update", args, lambda p: _ignore(p.add_argument("--release")))
    run = install(ctx, opts.release, stdout=ctx.out, stderr=ctx.err)
    return 0 if run.returncode == 0 else 1


def install(ctx: Context, release: str | None, *, stdout: Any, stderr: Any) -> subprocess.CompletedProcess:
    """Fetch the installer for ``release`` (default: the current one) and run it with ``sh``."""
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
    run = subprocess.run(
        ["sh", "-s"], input=response.content, env=dict(ctx.env), stdout=stdout, stderr=stderr
    )
    # fetching the script noted nothing (no GET changes state): the install counts from here
    if run.returncode == 0:
        problem = _note_install(ctx)
        if problem:  # the harness's first recorded request notes it anyway
            said = f"reef: the install could not be noted at {ctx.url} ({problem})"
            print(said, file=stderr if hasattr(stderr, "write") else sys.stderr)
    return run


def _note_install(ctx: Context) -> str:
    """``POST /reef/harness/installed`` for this harness; what went wrong, or ``""``."""
    try:
        with ctx.client(timeout=60) as client:
            client.installed(ctx.scenario, ctx.harness.adapter)
    except ReefError as exc:
        return exc.message
    return ""


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


def report(ctx: Context, args: list[str]) -> int:
    def build(p: argparse.ArgumentParser) -> None:
        p.add_argument("--score", type=float, required=True)
        p.add_argument("--feedback")

    opts = core._parse(ctx, "report", args, build)
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


# ------------------------------------------------------------------------------------ help


def help_(ctx: Context, args: list[str]) -> int:
    ctx.say(core.usage_text(ctx.harness))
    ctx.say(f"\nscenario {ctx.scenario} at {ctx.url}; config {ctx.layout.config}")
    return 0


VERBS: dict[str, Callable[[Context, list[str]], int]] = {
    "evolve": evolve,
    "versions": versions,
    "update": update,
    "report": report,
    "learn": learn,
    "doctor": doctor,
    "help": help_,
}
