"""reef's prompt hooks, for the harnesses that run them (Claude Code, Codex, and opencode through
reef's plugin): in-session commands answered without a model call, and the update notice.

The rendered hooks run ``reef-X hook prompt`` (``UserPromptSubmit``) and ``reef-X hook
session-start`` (``SessionStart``); the harness passes the event as JSON on stdin.  Both harnesses
read the same answers: ``{"decision": "block", "reason": …}`` shows the reason to the person
instead of calling the model, ``{"systemMessage": …}`` shows a notice.

``hook prompt`` answers a prompt that starts with one of reef's commands, and lets every other
prompt through untouched (no output, exit 0).  The commands start with the harness's
:attr:`~adapters.launcher.Harness.command_prefix`: ``/`` in Claude Code, ``:`` in Codex (whose TUI
refuses a ``/`` command it does not know before any hook runs); shown here with ``/``:

    /evolve <text>              file an ask: what the agent should do differently
    /versions                   published releases and pending ones, with installed/current marks
    /versions <vN|cN>           the link to that release's (or step's) page
    /versions <vN> install      install it (a new session loads it)
    /versions <cN> install      a pending step: what code it runs, and how to confirm
    /versions <cN> install yes  approve the pending step (a person typed it), then install it
    /good [text], /bad [text]   a report with score 1 (or 0) on this session's receipts
    /feedback <text>            a report with that feedback on this session's receipts

"This session's receipts" are the records tagged ``session:<id>`` (the daemon stores Claude Code's
``x-claude-code-session-id``, Codex's ``session-id`` and opencode's ``x-session-id`` so, and
``REEF_SESSION`` overrides it)
written since this launcher started.  A harness that its launcher did not start has no ``REEF_RUN_TAG``:
the commands say so and change nothing.

``hook session-start`` prints a ``systemMessage`` when reef has a newer release than the installed
one, or steps waiting for approval; its call to the daemon gives up after 2 s, and any failure is
silent (no output, exit 0): a notice must never cost the session.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from typing import Any

from adapters import launcher as core
from adapters import verbs
from adapters.hook_gate import COMMAND, pending_event
from adapters.launcher import Context
from reef_core.client import approver
from reef_core.errors import NotFound, ReefError
from reef_core.release.listing import approval_question, code_notice

__all__ = ["NOTICE_TIMEOUT_S", "answer", "notice", "run"]

NOTICE_TIMEOUT_S = 2.0
_USAGE = {
    "evolve": "usage: {p}evolve <what the agent should do differently>",
    "versions": "usage: {p}versions [vN|cN [install]]",
    "feedback": "usage: {p}feedback <what was good or bad in this session>",
}


def _usage(ctx: Context, command: str) -> str:
    return "reef: " + _USAGE[command].format(p=ctx.harness.command_prefix)


def run(ctx: Context, args: list[str]) -> int:
    """``reef-X hook prompt|session-start``, the event on stdin; always exits 0."""
    try:
        text = pending_event()
        event = json.loads((sys.stdin.read() if text is None else text) or "{}")
    except ValueError:
        event = {}
    if not isinstance(event, dict):
        event = {}
    which = args[0] if args else ""
    if which == "prompt":
        text = answer(ctx, event)
        if text is not None:
            print(json.dumps({"decision": "block", "reason": text}, ensure_ascii=False))
    elif which == "session-start":
        try:
            said = notice(ctx)
        except Exception:  # a notice must never cost the session: the daemon may be down or slow
            said = None
        if said:
            print(json.dumps({"systemMessage": said}, ensure_ascii=False))
    else:
        print(f"{ctx.harness.command} hook: unknown hook {which!r} (prompt, session-start)", file=ctx.err)
    return 0


def answer(ctx: Context, event: dict[str, Any]) -> str | None:
    """What a reef command in ``event["prompt"]`` answers; None for any other prompt."""
    prompt = event.get("prompt")
    match = COMMAND.match(prompt) if isinstance(prompt, str) else None
    if match is None:
        return None
    command, rest = match.group(1), (match.group(2) or "").strip()
    if not ctx.env.get("REEF_RUN_TAG"):
        return (
            f"reef: this {ctx.harness.label} was not started through reef: run it with "
            f"{ctx.harness.command} to use {ctx.harness.command_prefix}{command}"
        )
    try:
        if command == "evolve":
            return _evolve(ctx, rest, event)
        if command == "versions":
            return _versions(ctx, rest)
        return _report(ctx, command, rest, event)
    except ReefError as exc:
        return f"reef: {exc.message}"


def _evolve(ctx: Context, text: str, event: dict[str, Any]) -> str:
    if not text:
        return _usage(ctx, "evolve")
    session = event.get("session_id") if isinstance(event.get("session_id"), str) else None
    with ctx.client() as client:
        filed = client.train(
            ctx.scenario,
            text,
            release_id=core.installed_release(ctx.layout),
            harness=ctx.harness.adapter,
            session=session,
        )
    return (
        f"reef: ask {filed['agent_record_id']} filed for scenario {ctx.scenario}.\n"
        f"  progress: {ctx.url}{filed['page_path']}\n"
        f"  when it settles, {ctx.harness.command_prefix}versions shows the result"
    )


def _versions(ctx: Context, args: str) -> str:
    words = args.split()
    prefix = ctx.harness.command_prefix
    with ctx.client() as client:
        try:
            listing = client.releases(ctx.scenario)
        except NotFound:  # the scenario is created by its first record or ask
            listing = {"releases": [], "steps": []}
        if not words:
            if not listing.get("releases") and not any(s.get("pending") for s in listing.get("steps", [])):
                return (
                    f"reef: scenario {ctx.scenario} has no releases yet; ask for one with "
                    f"{ctx.harness.command_prefix}evolve <what to change>"
                )
            return verbs.versions_table(listing, core.read_sidecar(ctx.layout) or {})
        name, action = words[0], words[1:]
        row = verbs.page_of(listing, name)
        if row is None:
            return (
                f"reef: no release or pending step {name} in scenario {ctx.scenario}: "
                f"see {ctx.harness.command_prefix}versions"
            )
        link = f"{ctx.url}{row['page_path']}"
        if not action:
            return f"reef: {name}: {link}"
        if action[0] != "install" or action[1:] not in ([], ["yes"]):
            return _usage(ctx, "versions")
        step = next((s for s in listing.get("steps", []) if s.get("name") == name), None)
        if step is None:
            return _install(ctx, name)
        if step.get("release"):
            return _install(ctx, str(step["release"]))
        if not step.get("pending"):
            return (
                f"reef: {name} was not selected ({step.get('verdict')}) and cannot be installed; see {link}"
            )
        code = step.get("executable")
        if action[1:] != ["yes"]:
            runs = code_notice(code)
            return (
                f"reef: {name} changes what runs on this machine and waits for a person's approval.\n"
                f'  "{verbs.one_line(step.get("ask"), 200)}"\n'
                + (f"{runs}\n" if runs else "")
                + f"  {approval_question(name, ctx.scenario, code)} Read {link}, then type\n"
                f"    {ctx.harness.command_prefix}versions {name} install yes\n"
                "  to promote it to a release and install it; anything else leaves it pending."
            )
        who = approver(f"{ctx.harness.label} {prefix}versions")
        promoted = client.promote(ctx.scenario, name, approved_by=who)
    release = str(promoted["release"])
    return f"reef: {name} is now {release}.\n" + _install(ctx, release)


def _install(ctx: Context, release: str) -> str:
    ran = verbs.install(ctx, release, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if ran.returncode != 0:
        said = (ran.stderr or ran.stdout or b"").decode(errors="replace").strip().splitlines()[-3:]
        return f"reef: installing {release} failed (exit {ran.returncode}):\n" + "\n".join(said)
    return (
        f"reef: installed {release}. Start a new {ctx.harness.label} session "
        f"({ctx.harness.command}) to load it."
    )


def _report(ctx: Context, command: str, text: str, event: dict[str, Any]) -> str:
    if command == "feedback" and not text:
        return _usage(ctx, "feedback")
    session = ctx.env.get("REEF_SESSION") or event.get("session_id")
    if not isinstance(session, str) or not session:
        return f"reef: {ctx.harness.label} did not say which session this is: nothing was reported"
    with ctx.client() as client:
        receipts = verbs.receipts_since(
            client, ctx.scenario, f"session:{session}", _session_start_ms(ctx, event)
        )
        if not receipts:
            return "reef: nothing to report on yet: this session has not reached the model through reef"
        made = client.report(
            ctx.scenario,
            receipts,
            score=None if command == "feedback" else (1.0 if command == "good" else 0.0),
            feedback=text or None,
            metadata={
                "harness": ctx.harness.adapter,
                "session": session,
                "source": "user",
                "command": command,
            },
        )
    what = "feedback" if command == "feedback" else f"{ctx.harness.command_prefix}{command}"
    plural = "" if len(receipts) == 1 else "s"
    return (
        f"reef: {what} noted as {made['agent_record_id']} on {len(receipts)} receipt{plural} of this session"
    )


def _session_start_ms(ctx: Context, event: dict[str, Any]) -> int:
    """When this session began: its transcript's first timestamp, or the creation time the
    harness says (opencode's plugin sends ``session_started_ms``), since a resumed session began
    before this launcher started; else this launcher's start."""
    try:
        started = int(ctx.env.get("REEF_RUN_STARTED_MS") or 0)
    except ValueError:
        started = 0
    said = event.get("session_started_ms")
    if isinstance(said, int) and not isinstance(said, bool) and said > 0:
        return min(said, started) if started else said
    path = event.get("transcript_path")
    if not isinstance(path, str):
        return started
    try:
        with open(path, encoding="utf-8") as transcript:
            for line, _ in zip(transcript, range(50), strict=False):
                stamp = json.loads(line).get("timestamp")
                if isinstance(stamp, str):
                    began = int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
                    return min(began, started) if started else began
    except (OSError, ValueError, AttributeError):
        pass
    return started


def notice(ctx: Context) -> str | None:
    """The update notice: a newer release, steps waiting for approval; None when there is nothing."""
    if not ctx.env.get("REEF_RUN_TAG"):
        return None
    mine = core.installed_release(ctx.layout)
    number = int(mine[1:]) if mine and mine[1:].isdigit() else 0
    with ctx.client(timeout=NOTICE_TIMEOUT_S) as client:
        listing = client.releases(ctx.scenario)
    newer = [r for r in listing.get("releases", []) if int(r.get("number") or 0) > number]
    waiting = [s["name"] for s in listing.get("steps", []) if s.get("pending")]
    lines = []
    if newer:
        latest = newer[0]
        lines += [
            f"reef: {latest['release']} is available (installed: {mine or 'none'}): "
            f'"{verbs.one_line(latest.get("ask"))}"',
            f"  install it with {ctx.harness.command_prefix}versions {latest['release']} install, "
            f"or {ctx.harness.command} update",
        ]
    if waiting:
        verb = "waits" if len(waiting) == 1 else "wait"
        see = f"see {ctx.harness.command_prefix}versions"
        lines.append(f"reef: {', '.join(waiting)} {verb} for approval: {see}")
    return "\n".join(lines) or None
