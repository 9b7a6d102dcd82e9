"""``reef releases | promote | reject | rollback``: a scenario's release chain and its operations.

``releases`` reads (the daemon, or the repository when none answers); the operations change
the chain, so they go through the daemon, which publishes by compare-and-swap: a chain that
moved under the caller is a conflict (exit 3), never a silent overwrite.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from reef_cli import output as out
from reef_cli.output import JsonOption
from reef_cli.sources import CandidateArgument, ScenarioArgument, UrlOption, connect, open_source
from reef_cli.state import StateDirOption
from reef_core.client import ReefClient, approver
from reef_core.errors import ReefError
from reef_core.release.listing import approval_question, code_notice

__all__ = [
    "in_use_cells",
    "latency_cell",
    "milliseconds",
    "promote",
    "reject",
    "releases",
    "rollback",
    "score_cell",
]

_ASK_WIDTH = 48


def releases(
    scenario: str = ScenarioArgument,
    url: str = UrlOption,
    state_dir: Path | None = StateDirOption,
    as_json: bool = JsonOption,
) -> None:
    """Show the release chain (newest first), which one serves, how each does in use (sessions,
    score, latency, tokens, errors), and candidates not published."""
    listing = open_source(url, state_dir).releases(scenario)
    if as_json:
        out.output.json(listing)
        return
    console = out.output.console
    rows = listing["releases"]
    if not rows:
        console.print(f"{scenario} has no release yet", highlight=False)
    else:
        table = Table(box=None, pad_edge=False)
        for column in ("release", "operation", "verdict", "ask", "metrics", "created"):
            _column(table, column)
        for row in rows:
            cells = [
                _mark(row),
                row["operation"],
                escape(row.get("verdict") or "-"),
                escape(_short(row.get("ask"))),
                _metrics(row.get("metrics")),
                out.when(row.get("created_at")),
            ]
            table.add_row(*cells)
        console.print(table)
        _print_in_use(listing)
    waiting = [step for step in listing["steps"] if not step.get("release")]  # not published
    if waiting:
        console.print()
        table = Table(box=None, pad_edge=False)
        for column in ("candidate", "state", "verdict", "ask", "metrics"):
            _column(table, column)
        for step in waiting:
            table.add_row(
                step.get("name") or f"c{step['step']}",
                _state(step),
                escape(step.get("verdict") or "-"),
                escape(_short(step.get("ask"))),
                _metrics(step.get("metrics")),
            )
        console.print(table)
    current = next((row["release"] for row in rows if row["current"]), None)
    console.print()
    console.print(f"current: {current or 'none'}", highlight=False)
    pending = [f"c{s['step']}" for s in waiting if s["pending"]]
    if pending:
        console.print(
            f"pending: {', '.join(pending)}  (approve: reef promote {scenario} {pending[0]} · "
            f"turn down: reef reject {scenario} {pending[0]})",
            highlight=False,
        )


def _column(table: Table, name: str) -> None:
    # on a narrow terminal the ask, verdict and metrics wrap (rich narrows wrapping columns
    # first); names, states, operations and times keep their width
    if name in _FLEXIBLE:
        table.add_column(name, max_width=_FLEXIBLE[name])
    else:
        table.add_column(name, no_wrap=True)


_FLEXIBLE = {"ask": 48, "verdict": 30, "metrics": 30}
#: the columns of live evidence (``reef_core.release.evidence``), a table of their own so that
#: the chain's stays readable in 80 columns
_IN_USE = ("in use", "sessions", "requests", "score", "p50/p95 ms", "tokens in/out", "errors")


def _mark(row: dict[str, Any]) -> str:
    return f"[green]●[/] [bold]{row['release']}[/]" if row["current"] else f"  {row['release']}"


def _print_in_use(listing: dict[str, Any]) -> None:
    """Each release (and each canary candidate that served) in use: a row of :data:`_IN_USE`."""
    console = out.output.console
    current = {row["release"]: row for row in listing["releases"]}
    evidence = listing.get("evidence") or {row["release"]: row.get("evidence") for row in listing["releases"]}
    table = Table(box=None, pad_edge=False)
    for column in _IN_USE:
        table.add_column(column, no_wrap=True)
    for name, found in evidence.items():
        label = _mark(current[name]) if name in current else f"  {name} [dim](canary)[/]"
        table.add_row(label, *in_use_cells(found))
    console.print()
    console.print(table)
    if any(_judged(found) for found in evidence.values()):
        console.print("[dim]j: the judge's score (no person scored it)[/]", highlight=False)


def in_use_cells(evidence: dict[str, Any] | None) -> list[str]:
    """A release's live evidence as cells: sessions, requests, the person's mean score and how
    many sessions it covers (the judge's, marked ``j``, when no person scored), upstream latency
    p50/p95 in ms, tokens in and out, and the error rate."""
    if not evidence or not evidence.get("requests"):
        return ["0", "0", "-", "-", "-", "-"]
    tokens = evidence.get("tokens") or {}
    return [
        str(evidence["sessions"]),
        str(evidence["requests"]),
        score_cell(evidence),
        latency_cell(evidence),
        f"{tokens.get('in', 0)}/{tokens.get('out', 0)}" if tokens.get("requests") else "-",
        f"{100 * evidence['errors']['count'] / evidence['requests']:.1f}%",
    ]


def score_cell(evidence: dict[str, Any]) -> str:
    for source, mark in (("person", ""), ("judge", " j")):
        scores = evidence.get(source) or {}
        if scores.get("count"):
            return f"{scores['mean']:.2f} ({scores['count']}){mark}"
    return "-"


def latency_cell(evidence: dict[str, Any]) -> str:
    latency = evidence.get("latency_ms") or {}
    if latency.get("p50") is None:
        return "-"
    return f"{milliseconds(latency['p50'])}/{milliseconds(latency['p95'])}"


def milliseconds(value: float) -> str:
    """``812``, or ``3.4`` below 100 ms (a local model answers in a few)."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}"


def _judged(evidence: dict[str, Any] | None) -> bool:
    person = (evidence or {}).get("person") or {}
    judge = (evidence or {}).get("judge") or {}
    return not person.get("count") and bool(judge.get("count"))


def _state(step: dict[str, Any]) -> str:
    if step.get("pending"):
        return "[yellow]pending[/]"
    if step.get("rejected_by_person"):
        return "[red]rejected by a person[/]"
    return "[dim]not published[/]"


def _short(text: str | None) -> str:
    if not text:
        return "-"
    flat = " ".join(text.split())
    return flat if len(flat) <= _ASK_WIDTH else flat[: _ASK_WIDTH - 1] + "…"


def _metrics(metrics: dict[str, Any] | None) -> str:
    if not metrics:
        return ""
    shown = []
    for key, value in list(metrics.items())[:3]:
        shown.append(f"{key}={value:.3g}" if isinstance(value, float) else f"{key}={value}")
    return escape(" ".join(shown))


def rollback(
    scenario: str = ScenarioArgument,
    release: str = typer.Argument(..., help="The release whose content serves again, e.g. v2."),
    expected: str | None = typer.Option(
        None,
        "--expected",
        help="The current release's commit as you saw it; if the chain has moved since, nothing "
        "changes and reef exits 3.",
    ),
    url: str = UrlOption,
    as_json: bool = JsonOption,
) -> None:
    """Serve an earlier release again, published as a new release (history is never rewritten)."""
    with connect(url) as client:
        result = client.rollback(scenario, release, expected=expected)
    line = (
        f"rolled back {scenario}: {result['release']} now serves the content of {result['source']} "
        f"(commit {result['commit'][:12]})"
    )
    out.output.done(result, line, as_json=as_json)


def promote(
    scenario: str = ScenarioArgument,
    candidate: str = CandidateArgument,
    yes: bool = typer.Option(
        False, "--yes", "-y", help="Approve without asking (the question names the code it runs)."
    ),
    url: str = UrlOption,
    as_json: bool = JsonOption,
) -> None:
    """Approve a pending candidate: publish it as a new release, which then serves.

    It first says which of its files run code with your privileges and asks; --yes skips the
    question.  The release records you (your login name) as its approver, and the moment."""
    with connect(url) as client:
        if not yes:
            _ask_to_approve(client, scenario, candidate)
        result = client.promote(scenario, candidate, approved_by=approver("reef promote"))
    line = (
        f"promoted {result.get('source') or candidate} in {scenario}: {result['release']} serves it "
        f"(commit {result['commit'][:12]})"
    )
    out.output.done(result, line, as_json=as_json)


def _ask_to_approve(client: ReefClient, scenario: str, candidate: str) -> None:
    """Name the code a pending candidate runs and ask; no (or no answer) ends the command."""
    steps = client.releases(scenario)["steps"]
    step = next(
        (s for s in steps if s["pending"] and candidate.strip().lower() in (s["name"], str(s["step"]))), None
    )
    if step is None:
        return  # not pending (or no such step): promote says what became of it
    errors = out.output.errors
    errors.print(
        f"{step['name']} of {scenario}: {step.get('ask') or '(no ask)'}", markup=False, highlight=False
    )
    notice = code_notice(step.get("executable"))
    if notice:
        errors.print(notice, markup=False, highlight=False)
    errors.print(f"It becomes {scenario}'s next release and serves at once.", markup=False, highlight=False)
    question = approval_question(step["name"], scenario, step.get("executable"))
    try:
        approved = typer.confirm(question, default=False, err=True)
    except typer.Abort:  # end of input: nobody to ask
        raise Declined(
            f"{step['name']} stays pending: there was no answer to the question "
            "(approve without it with --yes)"
        ) from None
    if not approved:
        raise Declined(f"{step['name']} stays pending; nothing was changed")


class Declined(ReefError):
    """The person said no (or could not be asked): nothing changed (exit code 1)."""

    code = "declined"


def reject(
    scenario: str = ScenarioArgument,
    candidate: str = CandidateArgument,
    url: str = UrlOption,
    as_json: bool = JsonOption,
) -> None:
    """Turn down a pending candidate: it is never published; the current release keeps serving."""
    with connect(url) as client:
        result = client.reject(scenario, candidate)
    step = result.get("step")
    line = f"rejected {candidate if step is None else f'c{step}'} in {scenario}: it will not be published"
    out.output.done(result, line, as_json=as_json)
