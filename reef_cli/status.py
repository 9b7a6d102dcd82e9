"""``reef status``: the daemon (running or not) and every scenario: releases, counts, learning."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from reef_cli import output as out
from reef_cli.output import JsonOption
from reef_cli.sources import UrlOption, open_source
from reef_cli.state import StateDirOption
from reef_core.store.space import format_bytes

__all__ = ["status"]


def status(url: str = UrlOption, state_dir: Path | None = StateDirOption, as_json: bool = JsonOption) -> None:
    """Show whether a daemon runs, what it serves, and each scenario's state."""
    source = open_source(url, state_dir)
    state = {**source.status(), "daemon": {"url": url, "running": source.live}}
    if as_json:
        out.output.json(state)
        return
    console = out.output.console
    if source.live:
        upstream = state.get("upstream") or {}
        console.print(
            f"reef {state['version']} running at {url}  recipe: {state.get('recipe')}  "
            f"upstream: {upstream.get('url') or 'none'} ({upstream.get('api') or '-'})  "
            f"auth: {_auth(state.get('auth'))}",
            highlight=False,
        )
        _warn_if_open(state.get("auth"))
    else:
        console.print(f"no reef daemon at {url}: read from the repositories", highlight=False)
    console.print(f"state: {state['state_dir']}", highlight=False)
    _warn_if_full(state.get("disk_full"))
    rows = state["scenarios"]
    if not rows:
        console.print("no scenarios yet")
        return
    table = Table(box=None, pad_edge=False)
    for column in ("scenario", "records", "reports", "asks", "release", "pending", "learning"):
        table.add_column(column, style="bold" if column == "scenario" else None)
    for row in rows:
        counts = row["counts"]
        table.add_row(
            row["name"],
            str(counts.get("record", 0)),
            str(counts.get("report", 0)),
            str(counts.get("ask", 0)),
            row.get("release") or "-",
            ", ".join(f"c{n}" for n in row.get("pending") or []) or "-",
            escape(_learning(row.get("learning"))),
        )
    console.print(table)
    for row in rows:
        for remote in row.get("remotes") or []:
            console.print(escape(_remote(row["name"], remote)), highlight=False)


def _remote(scenario: str, remote: dict[str, Any]) -> str:
    """``s ↔ origin (url): pushed 12:03:04 ok; 1 release, 40 records not pushed; checkpoints …``"""
    push = remote.get("last_push") or {}
    when = time.strftime("%H:%M:%S", time.localtime(push["at"])) if push.get("at") else None
    text = f"{scenario} ↔ {remote['name']} ({remote['url']}): "
    text += f"last push {when} {push.get('outcome')}" if when else "never pushed"
    waiting = [
        f"{n} {what}{'' if n == 1 else 's'}"
        for n, what in (
            (remote.get("unpushed_releases", 0), "release"),
            (remote.get("unpushed_records", 0), "record"),
        )
        if n
    ]
    if waiting:
        text += "; not pushed: " + ", ".join(waiting)
    if remote.get("behind_releases"):
        text += f"; {remote['behind_releases']} release(s) there not served here"
    if remote.get("lfs") == "unsupported":
        text += "; checkpoints NOT pushed (the remote has no git-lfs API)"
    if remote.get("error"):
        text += f"; error: {remote['error']}"
    return text


def _auth(auth: dict[str, Any] | None) -> str:
    if not auth:
        return "?"
    if auth.get("required"):
        return "on (token required)"
    return "off (loopback only)" if auth.get("loopback") else "off"


def _warn_if_open(auth: dict[str, Any] | None) -> None:
    if auth and not auth.get("required") and not auth.get("loopback"):
        out.output.console.print(
            f"[bold red]warning:[/] no token and listening on {escape(str(auth.get('listening')))}: "
            "anyone who can reach it can read every record and publish releases (set REEF_TOKEN)",
            highlight=False,
        )


def _warn_if_full(full: dict[str, Any] | None) -> None:
    if not full:
        return
    free = full.get("free_bytes")
    out.output.console.print(
        f"[bold red]disk full:[/] no space left under {escape(str(full['state_dir']))} since {full['since']} "
        f"({full['failed_writes']} writes refused with 507, "
        f"{'?' if free is None else format_bytes(free)} free): free some space, and recording resumes",
        highlight=False,
    )


def _learning(learning: dict[str, Any] | None) -> str:
    if not learning:
        return "-"
    text = f"{learning.get('state', '?')}, {learning.get('steps', 0)} steps"
    last = learning.get("last_step")
    if last:
        text += f", last c{last['step']}: {last['verdict']}"
    return text
