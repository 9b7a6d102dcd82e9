"""``reef scenario list|create|show|archive``, on the state directory."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from reef_cli import output as out
from reef_cli.state import StateDirOption, open_store

__all__ = [
    "app",
]

app = typer.Typer(help="Create, list, inspect and archive scenarios.", no_args_is_help=True)

JsonOption = typer.Option(False, "--json", help="Machine-readable output.")


def _summary(store, name: str) -> dict:
    reader = store.reader(name)
    tip = reader.releases.tip()
    return {
        "name": name,
        "path": str(reader.path),
        "counts": reader.data.counts(),
        "release": tip.name if tip else None,
        "pending": reader.releases.pending(),
    }


@app.command("list")
def list_(state_dir: Path | None = StateDirOption, as_json: bool = JsonOption) -> None:
    """List scenarios with their record counts and current release."""
    store = open_store(state_dir)
    rows = [_summary(store, name) for name in store.names()]
    if as_json:
        out.output.json(rows)
        return
    if not rows:
        out.output.console.print(f"no scenarios in {store.state_dir}")
        return
    table = Table(box=None, pad_edge=False)
    for column in ("scenario", "records", "reports", "asks", "release"):
        table.add_column(column, style="bold" if column == "scenario" else None)
    for row in rows:
        c = row["counts"]
        table.add_row(row["name"], str(c["record"]), str(c["report"]), str(c["ask"]), row["release"] or "-")
    out.output.console.print(table)


@app.command()
def create(name: str, state_dir: Path | None = StateDirOption, as_json: bool = JsonOption) -> None:
    """Create a scenario (its git repository)."""
    store = open_store(state_dir)
    created = store.create(name)
    if as_json:
        out.output.json({"name": name, "created": created, "path": str(store.path_of(name))})
        return
    verb = "created" if created else "exists:"
    out.output.console.print(f"{verb} {name} at {store.path_of(name)}", highlight=False)


@app.command()
def show(name: str, state_dir: Path | None = StateDirOption, as_json: bool = JsonOption) -> None:
    """Show one scenario: where it lives, what it holds, its current release."""
    store = open_store(state_dir)
    row = _summary(store, name)
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
        console.print(f"  pending     {', '.join(map(str, row['pending']))}")
    console.print(f"  audit       git -C {row['path']} log --oneline data", highlight=False)


@app.command()
def archive(name: str, state_dir: Path | None = StateDirOption, as_json: bool = JsonOption) -> None:
    """Move a scenario out of service; its repository is kept whole under archive/."""
    store = open_store(state_dir)
    target = store.archive(name)
    if as_json:
        out.output.json({"name": name, "archived_to": str(target)})
        return
    out.output.console.print(f"archived {name} to {target}", highlight=False)
