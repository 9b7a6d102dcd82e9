"""``reef log SCENARIO``: records, reports and asks in the order they were written."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from reef_cli import output as out
from reef_cli.state import StateDirOption, open_store
from reef_core.errors import InvalidInput
from reef_core.ids import KINDS

__all__ = [
    "log",
]


def log(
    scenario: str,
    kind: list[str] = typer.Option([], "--kind", help="Only this kind (record, report, ask); repeatable."),
    after: str | None = typer.Option(None, "--after", help="Only items after this id."),
    limit: int | None = typer.Option(None, "--limit", "-n", min=1, help="At most this many items."),
    state_dir: Path | None = StateDirOption,
    as_json: bool = typer.Option(False, "--json", help="One JSON document per line."),
) -> None:
    """Show a scenario's items, oldest first."""
    for k in kind:
        if k not in KINDS:
            raise InvalidInput(f"--kind must be one of {', '.join(KINDS)}, got {k!r}", field="kind")
    reader = open_store(state_dir).reader(scenario)
    for item in reader.data.iter_items(kind or None, after=after, limit=limit):
        if as_json:
            out.output.console.file.write(json.dumps(item.data, ensure_ascii=False) + "\n")
        else:
            detail = {k: v for k, v in item.data.items() if k not in ("id", "kind", "created_at")}
            text = json.dumps(detail, ensure_ascii=False)
            if len(text) > 100:
                text = text[:99] + "…"
            out.output.console.print(
                f"[dim]{item.created_at}[/] [bold]{item.kind:<6}[/] {item.id} {text}", highlight=False
            )
