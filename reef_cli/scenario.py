"""``reef scenario list|create|show|archive``.

Through the daemon when one answers at ``--url`` (it then opens, or closes, the scenario
itself); otherwise on the state directory directly.  Archiving directly fails with a conflict
while another process writes the scenario.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from reef_cli import output as out
from reef_cli.output import JsonOption
from reef_cli.sources import UrlOption, connect, open_source
from reef_cli.state import StateDirOption, open_store
from reef_core.client import DaemonUnavailable

__all__ = [
    "app",
]

app = typer.Typer(help="Create, list, inspect and archive scenarios.", no_args_is_help=True)


@app.command("list")
def list_(url: str = UrlOption, state_dir: Path | None = StateDirOption, as_json: bool = JsonOption) -> None:
    """List scenarios with their record counts and current release."""
    source = open_source(url, state_dir)
    rows = source.scenarios()
    if as_json:
        out.output.json(rows)
        return
    if not rows:
        out.output.console.print(f"no scenarios ({source.description})", highlight=False)
        return
    table = Table(box=None, pad_edge=False)
    for column in ("scenario", "records", "reports", "asks", "release", "pending"):
        table.add_column(column, style="bold" if column == "scenario" else None)
    for row in rows:
        c = row["counts"]
        pending = ", ".join(f"c{n}" for n in row.get("pending") or []) or "-"
        table.add_row(
            row["name"], str(c["record"]), str(c["report"]), str(c["ask"]), row["release"] or "-", pending
        )
    out.output.console.print(table)


@app.command()
def create(
    name: str,
    url: str = UrlOption,
    state_dir: Path | None = StateDirOption,
    as_json: bool = JsonOption,
) -> None:
    """Create a scenario (its git repository)."""
    result = _through_daemon(url, lambda client: client.create_scenario(name))
    if result is None:
        store = open_store(state_dir)
        result = {"name": name, "created": store.create(name), "path": str(store.path_of(name))}
    verb = "created" if result["created"] else "exists:"
    where = f" at {result['path']}" if result.get("path") else ""
    out.output.done(result, f"{verb} {name}{where}", as_json=as_json)


@app.command()
def show(
    name: str,
    url: str = UrlOption,
    state_dir: Path | None = StateDirOption,
    as_json: bool = JsonOption,
) -> None:
    """Show one scenario: where it lives, what it holds, its current release."""
    row = open_source(url, state_dir).scenario(name)
    if as_json:
        out.output.json(row)
        return
    c = row["counts"]
    console = out.output.console
    console.print(f"[bold]{name}[/]", highlight=False)
    console.print(f"  repository  {row['path']}", highlight=False)
    console.print(f"  items       {c['record']} records, {c['report']} reports, {c['ask']} asks")
    console.print(f"  release     {row['release'] or 'none yet'}")
    if row["pending"]:
        console.print(f"  pending     {', '.join(f'c{n}' for n in row['pending'])}")
    learning = row.get("learning")
    if learning:
        console.print(
            f"  learning    {learning.get('state')}, {learning.get('steps', 0)} steps", highlight=False
        )
    # a daemon with storage.node writes refs/reef/data/<node>: refs/heads/data may not exist
    refs = " ".join(r.removeprefix("refs/heads/") for r in row.get("data_refs") or ["data"])
    console.print(f"  audit       git -C {row['path']} log --oneline {refs}", highlight=False)


@app.command()
def archive(
    name: str,
    url: str = UrlOption,
    state_dir: Path | None = StateDirOption,
    as_json: bool = JsonOption,
) -> None:
    """Move a scenario out of service; its repository is kept whole under archive/."""
    result = _through_daemon(url, lambda client: client.archive_scenario(name))
    if result is None:
        result = {"name": name, "archived_to": str(open_store(state_dir).archive(name))}
    out.output.done(result, f"archived {name} to {result['archived_to']}", as_json=as_json)


def _through_daemon(url: str, call: Any) -> dict[str, Any] | None:
    """``call(client)`` on the daemon; None when no daemon answers (then the caller works directly)."""
    with connect(url) as client:
        try:
            result = call(client)
        except DaemonUnavailable as exc:
            out.output.note(f"{exc.message}: working on the state directory directly")
            return None
    out.output.note(f"source: the daemon at {client.url}")
    return result
