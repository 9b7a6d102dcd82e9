"""``reef log SCENARIO [--follow]``: records, reports and asks in the order they were written."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from reef_cli import output as out
from reef_cli.interrupt import until_interrupted
from reef_cli.sources import ScenarioArgument, UrlOption, open_source
from reef_cli.state import StateDirOption
from reef_core.errors import InvalidInput
from reef_core.ids import KINDS, parse_item_id

__all__ = [
    "log",
    "summary",
]

_WIDTH = 100


def log(
    scenario: str = ScenarioArgument,
    kind: list[str] = typer.Option([], "--kind", help="Only this kind (record, report, ask); repeatable."),
    after: str | None = typer.Option(None, "--after", help="Only items after this id."),
    limit: int | None = typer.Option(None, "--limit", "-n", min=1, help="At most this many items."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep showing new items as they arrive."),
    interval: float = typer.Option(1.0, "--interval", min=0.05, hidden=True, help="--follow poll period."),
    url: str = UrlOption,
    state_dir: Path | None = StateDirOption,
    as_json: bool = typer.Option(False, "--json", help="One JSON document per line."),
) -> None:
    """Show a scenario's items, oldest first (with --follow, then new ones until Ctrl-C)."""
    for k in kind:
        if k not in KINDS:
            raise InvalidInput(f"--kind must be one of {', '.join(KINDS)}, got {k!r}", field="kind")
    if after is not None:
        parse_item_id(after, field="--after")
    source = open_source(url, state_dir)
    kinds = sorted(set(kind)) or None
    shown = 0
    cursor = after

    def show(items: Iterable[dict[str, Any]]) -> bool:
        """Print items; False once --limit is reached."""
        nonlocal shown, cursor
        for item in items:
            if limit is not None and shown >= limit:
                return False
            _print(item, as_json)
            shown += 1
            cursor = item["id"]
        return limit is None or shown < limit

    going = show(source.items(scenario, kinds, after=cursor))
    if not follow:
        return
    with until_interrupted() as stop:  # Ctrl-C is how a person ends --follow: not an error
        while going:
            out.output.console.file.flush()
            if stop.wait(interval):
                return
            going = show(source.items(scenario, kinds, after=cursor))


def _print(item: dict[str, Any], as_json: bool) -> None:
    if as_json:
        out.output.jsonl(item)
        return
    out.output.console.print(
        f"[dim]{item.get('created_at', '')}[/] [bold]{item.get('kind', ''):<6}[/] {item['id']} "
        f"{escape(summary(item))}",
        highlight=False,
    )


def summary(item: dict[str, Any]) -> str:
    """One line a person can scan: what the item says, not its whole body."""
    kind = item.get("kind")
    if kind == "record":
        timings = item.get("timings") or {}
        parts = [
            str(item.get("route", "?")),
            f"model={item.get('model') or '?'}",
            str(item.get("status", "?")),
        ]
        if timings.get("total_ms") is not None:
            parts.append(f"{timings['total_ms']:.0f}ms")
        if item.get("release"):
            parts.append(str(item["release"]))
        if item.get("complete") is False:
            parts.append("incomplete")
        text = " ".join(parts)
        asked = _last_user_text(item.get("request"))
        if asked:
            text += f" {json.dumps(asked, ensure_ascii=False)}"
    elif kind == "report":
        score = item.get("score")
        text = f"score={'-' if score is None else f'{score:g}'} refs={','.join(item.get('references') or [])}"
        if item.get("feedback") is not None:
            text += f" {json.dumps(item['feedback'], ensure_ascii=False)}"
    elif kind == "ask":
        text = json.dumps(item.get("text", ""), ensure_ascii=False)
    else:
        text = json.dumps({k: v for k, v in item.items() if k not in ("id", "kind", "created_at")})
    flat = " ".join(text.split())
    return flat if len(flat) <= _WIDTH else flat[: _WIDTH - 1] + "…"


def _last_user_text(request: Any) -> str | None:
    messages = request.get("messages") if isinstance(request, dict) else None
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                texts = [
                    b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
                ]
                return " ".join(t for t in texts if t) or None
    return None
