"""``reef evolve SCENARIO "text"``: ask the scenario to change, in plain language.

The ask goes to the daemon (``POST /reef/train``), which screens it before storing anything.
With ``--wait`` the command follows the ask (queued → proposing → checking → settled) under a
spinner and reports what became of it: a new release, a candidate pending approval, or why
nothing was published.  What became of it is read by :class:`reef_core.client.Outcome`; this
module only renders it (and ``reef learn`` follows its ticket with :func:`follow` too).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import typer
from rich.markup import escape

from reef_cli import output as out
from reef_cli.interrupt import until_interrupted
from reef_cli.output import JsonOption
from reef_cli.sources import ScenarioArgument, UrlOption, connect
from reef_core.client import PROGRESS_SAYS, Outcome, Progress, ReefClient
from reef_core.errors import InvalidInput, ReefError

__all__ = ["evolve", "follow", "print_outcome"]

_MAX_TEXT = 4000


def evolve(
    scenario: str = ScenarioArgument,
    text: str = typer.Argument(..., help='What to change, e.g. "reproduce bugs with a failing test first".'),
    wait: bool = typer.Option(False, "--wait", help="Follow the ask until it settles."),
    timeout: float = typer.Option(
        600.0, "--timeout", min=0, help="With --wait: give up after this many seconds."
    ),
    url: str = UrlOption,
    as_json: bool = JsonOption,
) -> None:
    """Ask for a change in plain language; with --wait, follow it to its verdict."""
    if not text.strip():
        raise InvalidInput("the ask is empty: say what should change", field="text")
    if len(text) > _MAX_TEXT:
        raise InvalidInput(f"the ask is {len(text)} characters; at most {_MAX_TEXT}", field="text")
    with connect(url) as client:
        asked = client.train(scenario, text)
        ask_id = asked["agent_record_id"]
        filed = [f"asked {scenario}: {ask_id}"]
        if asked.get("page_path"):
            filed.append(f"page: {client.url}{asked['page_path']}")
        follow(client, scenario, ask_id, asked, filed=filed, wait=wait, timeout=timeout, as_json=as_json)


def follow(
    client: ReefClient,
    scenario: str,
    ask_id: str,
    asked: dict[str, Any],
    *,
    filed: Sequence[str],
    wait: bool,
    timeout: float,
    as_json: bool,
) -> None:
    """Say what was filed (``asked`` with --json, else the lines of ``filed``); with ``wait``,
    follow the ask (or learn ticket) under a spinner until it settles and print its outcome."""
    if not wait:
        if as_json:
            out.output.json(asked)
        else:
            for line in filed:
                out.output.console.print(line, highlight=False)
        return
    started = time.monotonic()
    waiting = out.output.errors.status(f"{ask_id}: {PROGRESS_SAYS['queued']}…")
    with until_interrupted() as stop, waiting as spinner:

        def show(progress: Progress) -> None:
            spinner.update(f"{ask_id}: {progress.says}… {time.monotonic() - started:.0f}s")

        progress = client.wait(scenario, ask_id, timeout=timeout, on_progress=show, stop=stop)
    if stop.is_set() and not progress.settled:  # the person stopped waiting, not the ask
        raise ReefError(f"stopped waiting; {ask_id} goes on in the daemon (see reef releases {scenario})")
    if as_json:
        out.output.json({**asked, "state": progress.state, "result": progress.result})
    if not progress.settled:
        raise ReefError(
            f"{ask_id} is still {progress.state} after {timeout:g}s; it goes on in the daemon "
            f"(see reef releases {scenario})"
        )
    if not as_json:
        print_outcome(scenario, ask_id, Outcome.of(progress, client.url, asked))


def print_outcome(scenario: str, ask_id: str, outcome: Outcome) -> None:
    """One line for what became of the ask, and its page."""
    console = out.output.console
    name = outcome.candidate
    if outcome.released:
        console.print(
            f"{ask_id}: [green]{escape(outcome.verdict)}[/] → {outcome.release} now serves {scenario}",
            highlight=False,
        )
    elif outcome.canary:
        console.print(
            f"{ask_id}: [cyan]canary[/] → {name} serves a share of new sessions; their scores decide "
            f"whether it is published (reef canary {scenario} status)",
            highlight=False,
        )
    elif outcome.pending:
        console.print(
            f"{ask_id}: [yellow]pending[/] → {name} changes code and waits for a person "
            f"(reef promote {scenario} {name} · reef reject {scenario} {name})",
            highlight=False,
        )
    else:
        console.print(
            f"{ask_id}: {escape(outcome.verdict)}; the current release keeps serving", highlight=False
        )
    if outcome.page_url:
        console.print(f"page: {outcome.page_url}", highlight=False)
