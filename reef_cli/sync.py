"""``reef sync [SCENARIO] [--remote NAME]``: push to and fetch from a scenario's git remotes.

Writes the state directory itself (``reef_core/store/sync.py``); a scenario a running daemon
holds is synced by that daemon instead (``POST /reef/scenarios/{s}/sync`` at ``--url``).  A
remote that cannot be reached, or refuses the credentials, is exit 1; a remote whose data ref
or release chain cannot be fast-forwarded is exit 3 (conflict); a remote without a git-lfs API
takes the refs and is reported ("checkpoints NOT pushed").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from reef_cli import exits
from reef_cli import output as out
from reef_cli.output import JsonOption
from reef_cli.sources import UrlOption, connect
from reef_cli.state import StateDirOption, open_store
from reef_core.client import DaemonUnavailable
from reef_core.errors import InvalidInput, NotFound, ScenarioLocked
from reef_core.release.adoption import admit
from reef_core.store import Store
from reef_core.store.remotes import list_remotes
from reef_core.store.sync import DEFAULT_TIMEOUT_S, SyncReport, sync

__all__ = [
    "sync_command",
]


def sync_command(
    scenario: str | None = typer.Argument(None, help="The scenario (default: every one with a remote)."),
    remote: str | None = typer.Option(None, "--remote", help="Only this remote (default: every one)."),
    node: str = typer.Option(
        "", "--node", help="This machine's storage.node, if its daemon has one (whose data ref is its own)."
    ),
    timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--timeout", help="Seconds each git command may take."),
    url: str = UrlOption,
    state_dir: Path | None = StateDirOption,
    as_json: bool = JsonOption,
) -> None:
    """Push a scenario's records, releases and checkpoints to its git remotes; fetch the others'."""
    store = open_store(state_dir)
    names = [scenario] if scenario else [n for n in store.names() if list_remotes(store.path_of(n))]
    if scenario and not store.exists(scenario):
        raise NotFound(f"no scenario {scenario!r} in {store.state_dir}", field="scenario")
    reports: list[SyncReport] = []
    for name in names:
        remotes = [r.name for r in list_remotes(store.path_of(name))]
        if remote is not None:
            remotes = [r for r in remotes if r == remote]
        if not remotes and scenario:
            which = f"no remote {remote!r}" if remote else "no remote"
            raise InvalidInput(
                f"scenario {name} has {which} (reef remote add {name} NAME URL)", field="remote"
            )
        if remotes:
            reports += _sync_one(store, name, remotes, node, timeout, as_json, url)
    if as_json:
        out.output.json({"remotes": [r.as_dict() for r in reports]})
    elif not reports:
        out.output.console.print(
            "no scenario has a remote (reef remote add SCENARIO NAME URL)", highlight=False
        )
    code = _exit_code(reports)
    if code != exits.OK:
        raise typer.Exit(code)


def _sync_one(
    store: Store, name: str, remotes: list[str], node: str, timeout: float, as_json: bool, url: str
) -> list[SyncReport]:
    try:
        opened = store.open(name, node=node)
    except ScenarioLocked as exc:
        return _through_daemon(name, remotes, url, exc, as_json)
    reports = []
    try:
        for each in remotes:
            if out.is_tty() and not as_json:
                with out.output.errors.status(f"{name}: syncing with {each}…") as spinner:
                    report = sync(
                        opened, each, timeout=timeout, progress=lambda line: spinner.update(line), admit=admit
                    )
            else:
                report = sync(opened, each, timeout=timeout, admit=admit)
            if not as_json:
                _print(report)
            reports.append(report)
    finally:
        opened.close()
    return reports


def _through_daemon(
    name: str, remotes: list[str], url: str, locked: ScenarioLocked, as_json: bool
) -> list[SyncReport]:
    """A scenario a daemon holds: that daemon syncs it (it owns the repository's writer)."""
    client = connect(url, timeout=600)
    try:
        reports = []
        for each in remotes:
            for row in client.sync(name, each):
                report = SyncReport(**row)
                if not as_json:
                    _print(report)
                reports.append(report)
        return reports
    except DaemonUnavailable:
        raise ScenarioLocked(
            f"{locked.message}, and no daemon answers at {url}: reef sync writes the repository "
            f"itself, so stop what holds {name}, or pass the daemon's --url"
        ) from None
    finally:
        client.close()


def _print(report: SyncReport) -> None:
    line = f"{report.scenario} ↔ {report.remote} ({report.url}): {report.outcome}"
    details: list[str] = []
    if report.pushed:
        details.append(f"pushed {len(report.pushed)} refs")
    if report.adopted:
        details.append(f"adopted {report.adopted}")
    if report.adopted_data:
        details.append("fetched " + ", ".join(report.adopted_data))
    if report.held:
        details.append("held for a person's approval: " + ", ".join(report.held))
    if details:
        line += "; " + "; ".join(details)
    out.output.console.print(line, highlight=False, markup=False)
    for warning in report.warnings:
        out.output.console.print(f"  warning: {report.remote}: {warning}", highlight=False, markup=False)
    if report.error:
        out.output.error(report.error)


def _exit_code(reports: list[SyncReport]) -> int:
    outcomes: set[Any] = {r.outcome for r in reports}
    if outcomes & {"unreachable", "auth", "failed"}:
        return exits.FAILURE
    if "conflict" in outcomes:
        return exits.CONFLICT
    return exits.OK
