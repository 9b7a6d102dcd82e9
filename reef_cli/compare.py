"""``reef compare SCENARIO vA vB``: two releases' live evidence side by side, and the difference.

It reads the releases listing (the daemon's, or the repository's when no daemon answers), whose
``evidence`` holds every release and every candidate that served (a canary ``cN``), and sets
the two side by side: each difference is vB − vA, with its 95% interval
(:func:`reef_core.release.evidence.compare`: Welch for the mean scores, Newcombe for the error
rate; none for the median latency).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from reef_cli import output as out
from reef_cli.output import JsonOption
from reef_cli.releases import latency_cell, milliseconds
from reef_cli.sources import ScenarioArgument, UrlOption, open_source
from reef_cli.state import StateDirOption
from reef_core.errors import InvalidInput, NotFound
from reef_core.release.evidence import Evidence, compare

__all__ = ["compare_command"]

_NAME = re.compile(r"[vc][1-9][0-9]*")


def compare_command(
    scenario: str = ScenarioArgument,
    first: str = typer.Argument(..., help="A release (v2) or a candidate that served (c7): the baseline."),
    second: str = typer.Argument(..., help="The release or candidate set against it."),
    url: str = UrlOption,
    state_dir: Path | None = StateDirOption,
    as_json: bool = JsonOption,
) -> None:
    """Two releases side by side in use: sessions, scores, latency, tokens, errors; the
    difference (second − first) with its 95% interval."""
    a, b = _name(first, "first"), _name(second, "second")
    if a == b:
        raise InvalidInput(f"{a} is set against itself: name two different releases", field="second")
    listing = open_source(url, state_dir).releases(scenario)
    left, right = _evidence(listing, scenario, a), _evidence(listing, scenario, b)
    difference = compare(left, right)
    if as_json:
        out.output.json(
            {"scenario": scenario, "a": left.to_json(), "b": right.to_json(), "difference": difference}
        )
        return
    _print(scenario, left, right, difference)


def _name(raw: str, field: str) -> str:
    name = raw.strip().lower()
    if not _NAME.fullmatch(name):
        raise InvalidInput(
            f"{raw!r} is neither a release (such as v2) nor a candidate (such as c7)", field=field
        )
    return name


def _evidence(listing: dict[str, Any], scenario: str, name: str) -> Evidence:
    known = listing.get("evidence") or {}
    if name in known:
        return Evidence.from_json(known[name])
    if name.startswith("c") and any(step.get("name") == name for step in listing.get("steps") or []):
        return Evidence(name)  # a candidate that never served
    releases = [row["release"] for row in reversed(listing.get("releases") or [])]
    if name.startswith("v"):
        have = f"its releases: {', '.join(releases)}" if releases else "it has no release yet"
        raise NotFound(f"{scenario} has no release {name} ({have})", field="release")
    raise NotFound(f"{scenario} has no candidate {name}", field="release")


def _signed(value: float | None, digits: int = 2, scale: float = 1.0) -> str:
    return "-" if value is None else f"{value * scale:+.{digits}f}"


def _interval(row: dict[str, Any], digits: int = 2, scale: float = 1.0) -> str:
    bounds = row.get("interval")
    if not bounds:
        return "-"
    low, high = (f"{bound * scale:+.{digits}f}" for bound in bounds)
    return f"[{low}, {high}] {row['method'].capitalize()}"


def _scores(evidence: Evidence, source: str) -> str:
    scores = getattr(evidence, source)
    return "-" if not scores.count else f"{scores.mean:.2f} ({scores.count})"


def _errors(evidence: Evidence) -> str:
    rate = evidence.error_rate
    return "-" if rate is None else f"{100 * rate:.1f}% ({evidence.errors}/{evidence.requests})"


def _latency_difference(difference: float | None) -> str:
    if difference is None:
        return "-"
    return f"{'+' if difference >= 0 else '-'}{milliseconds(abs(difference))} (p50)"


def _print(scenario: str, a: Evidence, b: Evidence, difference: dict[str, Any]) -> None:
    console = out.output.console
    table = Table(box=None, pad_edge=False)
    table.add_column("")
    for column in (a.release, b.release, f"{b.release} − {a.release}", "95% interval"):
        table.add_column(column, no_wrap=True)
    person, judge = difference["person_score"], difference["judge_score"]
    latency, errors = difference["p50_ms"], difference["error_rate"]
    a_json, b_json = a.to_json(), b.to_json()
    table.add_row("sessions", str(a.sessions), str(b.sessions), f"{b.sessions - a.sessions:+d}", "")
    table.add_row("requests", str(a.requests), str(b.requests), f"{b.requests - a.requests:+d}", "")
    table.add_row(
        "person's score",
        _scores(a, "person"),
        _scores(b, "person"),
        _signed(person["difference"]),
        _interval(person),
    )
    table.add_row(
        "judge's score",
        _scores(a, "judge"),
        _scores(b, "judge"),
        _signed(judge["difference"]),
        _interval(judge),
    )
    table.add_row(
        "p50/p95 ms",
        latency_cell(a_json),
        latency_cell(b_json),
        _latency_difference(latency["difference"]),
        "",
    )
    table.add_row("tokens in/out", f"{a.tokens_in}/{a.tokens_out}", f"{b.tokens_in}/{b.tokens_out}", "", "")
    table.add_row(
        "error rate",
        _errors(a),
        _errors(b),
        _signed(errors["difference"], 1, 100) + (" pts" if errors["difference"] is not None else ""),
        _interval(errors, 1, 100),
    )
    console.print(f"{scenario}: {b.release} against {a.release}", highlight=False)
    console.print(table)
    idle = [e.release for e in (a, b) if not e.requests]
    if idle:
        console.print(f"[dim]{' and '.join(idle)} served no request yet[/]", highlight=False)
    console.print(
        f"[dim]score: the mean of each session's mean (sessions in brackets) · {b.release} − "
        f"{a.release} · error rate in points[/]",
        highlight=False,
    )
