"""``reef serve``: the daemon, configured from file, environment and dotted flags."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from reef_cli import output as out
from reef_core.config import load_settings

__all__ = [
    "serve",
]


def serve(
    ctx: typer.Context,
    config: Path | None = typer.Option(None, "-c", "--config", help="A reef.toml file."),
    print_config: bool = typer.Option(
        False, "--print-config", help="Print every resolved setting and its source, then exit."
    ),
    as_json: bool = typer.Option(False, "--json", help="With --print-config: JSON output."),
) -> None:
    """Run the reef daemon.

    Any setting can be given as a dotted flag: --reef.port 8901, --inference.upstream-url URL,
    --recipe reefine, --recipe.config.<field> VALUE, --storage.state-dir DIR.
    """
    settings = load_settings(file=config, overrides=list(ctx.args))
    if print_config:
        rows = settings.describe()
        if as_json:
            out.output.json([{"key": k, "value": v, "source": s} for k, v, s in rows])
            return
        table = Table(box=None, pad_edge=False)
        table.add_column("setting", style="bold")
        table.add_column("value")
        table.add_column("source", style="dim")
        for key, value, source in rows:
            table.add_row(key, value, source)
        out.output.console.print(table)
        return
    from reef_core.errors import ReefError

    raise ReefError("the daemon is not built yet; only --print-config works in this version")
