"""``reef remote add|list|remove``: a scenario repository's git remotes.

Written straight into the scenario repository's git config (``reef_core/store/remotes.py``),
safe beside a running daemon.  A URL carrying a password is refused: credentials are git's own
(a credential helper, the ssh agent), and every URL shown here has its password redacted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from reef_cli import output as out
from reef_cli.output import JsonOption
from reef_cli.sources import ScenarioArgument
from reef_cli.state import StateDirOption, open_store
from reef_core.errors import NotFound
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
    state_dir: Path | None = StateDirOption,
    as_json: bool = JsonOption,
) -> None:
    """Add a git remote to a scenario."""
    path = _path(open_store(state_dir), scenario)
    kept = validate_url(url)
    if create and kept.startswith("/"):
        init_bare(Path(kept))
    remote = add_remote(path, name, kept)
    result = {"scenario": scenario, "name": remote.name, "url": remote.shown_url}
    out.output.done(result, f"{scenario}: remote {remote.name} → {remote.shown_url}", as_json=as_json)


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
    state_dir: Path | None = StateDirOption,
    as_json: bool = JsonOption,
) -> None:
    """Remove a remote (its config, tracking refs and sync state; nothing on the remote)."""
    remove_remote(_path(open_store(state_dir), scenario), name)
    out.output.done(
        {"scenario": scenario, "removed": name}, f"{scenario}: remote {name} removed", as_json=as_json
    )
