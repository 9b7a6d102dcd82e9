"""``reef remote add|list|remove``: a scenario repository's git remotes.

Written into the scenario repository's git config (``reef_core/store/remotes.py``).  A scenario
a running daemon holds is changed through that daemon (``POST`` and ``DELETE
/reef/scenarios/{s}/remotes`` at ``--url``): it publishes through the new remote from its next
release on and syncs with it at once.  ``add`` on a scenario this state directory lacks says how
to join instead (``reef clone URL SCENARIO``).  A URL carrying a credential (a password, a
token, a query-string secret) or naming another transport (``ext::``, ``fd::``) is refused:
credentials are git's own (a credential helper, the ssh agent), and every URL shown here is
redacted.  ``--create`` makes the bare repository here, as the person who runs the command,
before any daemon is asked; ``--trusted`` serves the remote's releases without a person's
approval on this node (``reef_core.release.adoption``).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from reef_cli import output as out
from reef_cli.output import JsonOption
from reef_cli.sources import ScenarioArgument, UrlOption, connect
from reef_cli.state import StateDirOption, open_store
from reef_core.client import DaemonUnavailable, ReefClient
from reef_core.errors import NotFound, ScenarioLocked
from reef_core.store import Store
from reef_core.store.remotes import add_remote, list_remotes, remove_remote, validate_url
from reef_core.store.repo import init_bare
from reef_core.store.sync import remote_status

__all__ = [
    "app",
]

app = typer.Typer(
    help="A scenario's git remotes: add, list, remove (reef sync pushes and fetches).", no_args_is_help=True
)

_NameArgument = typer.Argument(..., help="The remote's name, e.g. origin.")


def _path(store: Store, scenario: str) -> Path:
    if not store.exists(scenario):
        raise NotFound(f"no scenario {scenario!r} in {store.state_dir}", field="scenario")
    return store.path_of(scenario)


@app.command()
def add(
    scenario: str = ScenarioArgument,
    name: str = _NameArgument,
    url: str = typer.Argument(..., help="Where: a path, ssh://…, user@host:path or https://… (no password)."),
    create: bool = typer.Option(False, "--create", help="Make a bare repository at URL (a path) first."),
    trusted: bool = typer.Option(
        False,
        "--trusted",
        help="Serve this remote's releases without a person's approval here (code they add runs as you).",
    ),
    daemon_url: str = UrlOption,
    state_dir: Path | None = StateDirOption,
    as_json: bool = JsonOption,
) -> None:
    """Add a git remote to a scenario (through its daemon when one holds it)."""
    store = open_store(state_dir)
    kept = validate_url(url)
    if not store.exists(scenario):
        raise NotFound(
            f"no scenario {scenario!r} in {store.state_dir}; to make it here from the remote: "
            f"reef clone {shlex.quote(url)} {scenario} (--node NAME when another daemon writes there)",
            field="scenario",
        )
    if create and kept.startswith("/"):
        init_bare(Path(kept))  # here, as the person: a daemon makes one only under its state dir
    held = _held(store, scenario)
    if held is not None:
        result = _through_daemon(
            daemon_url, scenario, held, lambda c: c.add_remote(scenario, name, kept, trusted=trusted)
        )
        report = result.get("sync") or {}
        line = f"{scenario}: remote {result['name']} → {result['url']} (added by the daemon at {daemon_url})"
        line += f"; synced: {report.get('outcome')}" + (
            f" ({report['error']})" if report.get("error") else ""
        )
        out.output.done(result, line, as_json=as_json)
        return
    remote = add_remote(store.path_of(scenario), name, kept, trusted=trusted)
    result = {"scenario": scenario, "name": remote.name, "url": remote.shown_url, "trusted": remote.trusted}
    out.output.done(result, f"{scenario}: remote {remote.name} → {remote.shown_url}", as_json=as_json)


def _held(store: Store, scenario: str) -> ScenarioLocked | None:
    """Why a daemon holds ``scenario`` (None: nothing does, this command may write it)."""
    try:
        store.open(scenario).close()
    except ScenarioLocked as exc:
        return exc
    return None


def _through_daemon(
    url: str, scenario: str, held: ScenarioLocked, call: Callable[[ReefClient], dict[str, Any]]
) -> dict[str, Any]:
    client = connect(url, timeout=600)
    try:
        return call(client)
    except DaemonUnavailable:
        raise ScenarioLocked(
            f"{held.message}, and no daemon answers at {url}: stop what holds {scenario}, or pass the "
            "daemon's --url"
        ) from None
    finally:
        client.close()


@app.command("list")
def list_(
    scenario: str | None = typer.Argument(None, help="The scenario (default: every scenario)."),
    state_dir: Path | None = StateDirOption,
    as_json: bool = JsonOption,
) -> None:
    """List remotes: URL, last push and fetch, LFS, what is not pushed yet."""
    store = open_store(state_dir)
    names = [scenario] if scenario else store.names()
    rows: list[dict[str, Any]] = []
    for each in names:
        _path(store, each)
        reader = store.reader(each)
        try:
            rows += [{"scenario": each, **remote_status(reader, r)} for r in list_remotes(reader.path)]
        finally:
            reader.handle.close()
    if as_json:
        out.output.json(rows)
        return
    if not rows:
        out.output.console.print("no remotes (reef remote add SCENARIO NAME URL)", highlight=False)
        return
    table = Table(box=None, pad_edge=False)
    for column in ("scenario", "remote", "url", "last push", "last fetch", "lfs", "unpushed"):
        table.add_column(column, style="bold" if column == "scenario" else None, overflow="fold")
    for row in rows:
        table.add_row(
            row["scenario"],
            row["name"],
            row["url"],
            _last(row["last_push"]),
            _last(row["last_fetch"]),
            row["lfs"],
            f"{row['unpushed_releases']} releases {row['unpushed_records']} records",
        )
    out.output.console.print(table, highlight=False, markup=False)
    for row in rows:
        if row.get("error"):
            out.output.console.print(f"{row['scenario']}: {row['error']}", highlight=False, markup=False)


def _last(event: dict[str, Any] | None) -> str:
    if not event:
        return "-"
    return f"{out.when(event.get('at'))} {event.get('outcome')}"


@app.command()
def remove(
    scenario: str = ScenarioArgument,
    name: str = _NameArgument,
    daemon_url: str = UrlOption,
    state_dir: Path | None = StateDirOption,
    as_json: bool = JsonOption,
) -> None:
    """Remove a remote (its config, tracking refs and sync state; nothing on the remote)."""
    store = open_store(state_dir)
    path = _path(store, scenario)
    held = _held(store, scenario)
    if held is not None:
        _through_daemon(daemon_url, scenario, held, lambda c: c.remove_remote(scenario, name))
    else:
        remove_remote(path, name)
    out.output.done(
        {"scenario": scenario, "removed": name}, f"{scenario}: remote {name} removed", as_json=as_json
    )
