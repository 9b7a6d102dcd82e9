"""``reef log SCENARIO [--follow]``: records, reports and asks in the order they were written.

``reef log SCENARIO --sessions``: the records grouped into sessions by their session tag, each
with its turns and the reports that score it (the daemon's ``…/sessions`` route, or the same
grouping done here on the repository).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from reef_cli import output as out
from reef_cli.interrupt import until_interrupted
from reef_cli.sources import ScenarioArgument, Source, UrlOption, open_source
from reef_cli.state import StateDirOption
from reef_core.errors import InvalidInput
from reef_core.ids import KINDS, parse_item_id

__all__ = [
    "log",
    "summary",
]

_WIDTH = 100
_EXCERPT = 60  # of a turn's user message and answer
_PAGE = 1000  # sessions per read: the daemon's largest page


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
    sessions: bool = typer.Option(
        False,
        "--sessions",
        help="Records grouped by session tag, with their turns and reports; --limit counts sessions.",
    ),
) -> None:
    """Show a scenario's items, oldest first (with --follow, then new ones until Ctrl-C)."""
    for k in kind:
        if k not in KINDS:
            raise InvalidInput(f"--kind must be one of {', '.join(KINDS)}, got {k!r}", field="kind")
    if sessions and (kind or follow):
        used = "--kind" if kind else "--follow"
        raise InvalidInput(
            f"--sessions shows whole sessions: it cannot be used with {used}", field="--sessions"
        )
    if after is not None:
        parse_item_id(after, field="--after")
    source = open_source(url, state_dir)
    if sessions:
        _log_sessions(source, scenario, after=after, limit=limit, as_json=as_json)
        return
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


def _log_sessions(
    source: Source, scenario: str, *, after: str | None, limit: int | None, as_json: bool
) -> None:
    """Every session after ``after`` (at most ``limit``), page by page.

    A session that goes on past a page's end is shown again on the next page, with its later
    records only, marked as continuing (see the daemon's sessions route).
    """
    shown = 0
    cursor = after
    while limit is None or shown < limit:
        page = source.sessions(
            scenario, after=cursor, limit=_PAGE if limit is None else min(_PAGE, limit - shown)
        )
        for session in page["sessions"]:
            if as_json:
                out.output.jsonl(session)
            else:
                _print_session(session)
        shown += len(page["sessions"])
        cursor = page.get("next")
        if not cursor:
            return


def _print_session(session: dict[str, Any]) -> None:
    console = out.output.console
    turns, records = len(session.get("turns") or []), len(session.get("records") or [])
    parts = [
        f"[bold]{escape(str(session.get('session')))}[/]",
        f"[dim]{escape(str(session.get('started_at') or ''))}[/]",
        f"{turns} turn{'' if turns == 1 else 's'}",
        f"{records} record{'' if records == 1 else 's'}",
        f"score={_score(session.get('score'))} ({session.get('scored_by') or 'none'})",
    ]
    if session.get("negative"):
        parts.append("[red]negative[/]")
    if session.get("releases"):
        parts.append(escape(",".join(session["releases"])))
    if session.get("continues"):
        parts.append("[dim](continues)[/]")
    console.print(" ".join(parts), highlight=False)
    for n, turn in enumerate(session.get("turns") or [], 1):
        asked, answer = _one_line(turn.get("user", ""), _EXCERPT), _one_line(turn.get("answer", ""), _EXCERPT)
        console.print(f"  {n}. user: {escape(asked)} → {escape(answer)}", highlight=False)
    for report in session.get("reports") or []:
        line = f"report {report.get('id')} score={_score(report.get('score'))} [{report.get('source')}]"
        if report.get("feedback") is not None:
            line += " " + json.dumps(report["feedback"], ensure_ascii=False)
        console.print("  " + escape(_one_line(line, _WIDTH)), highlight=False)


def _score(value: Any) -> str:
    return "-" if value is None else f"{value:g}"


def _one_line(text: str, width: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


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
