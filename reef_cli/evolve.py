"""``reef evolve SCENARIO "text"``: ask the scenario to change, in plain language.

The ask goes to the daemon (``POST /reef/train``), which screens it before storing anything.
With ``--wait`` the command follows the ask (queued → proposing → checking → settled) under a
spinner and reports what became of it: a new release, a candidate pending approval, or why
nothing was published.
"""

from __future__ import annotations

import time
from typing import Any

import typer
from rich.markup import escape

from reef_cli import output as out
from reef_cli.interrupt import until_interrupted
from reef_cli.output import JsonOption
from reef_cli.sources import ScenarioArgument, UrlOption, connect
from reef_core.client import Progress, ReefClient
from reef_core.errors import InvalidInput, ReefError

__all__ = ["SAYS", "evolve", "follow", "page_url", "print_outcome"]

_MAX_TEXT = 4000
SAYS = {
    "queued": "waiting for the learner",
    "proposing": "proposing a change",
    "checking": "running release checks",
    "settled": "settled",
}


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
        if not wait:
            if as_json:
                out.output.json(asked)
            else:
                out.output.console.print(f"asked {scenario}: {ask_id}", highlight=False)
                if asked.get("page_path"):
                    out.output.console.print(f"page: {client.url}{asked['page_path']}", highlight=False)
            return
        follow(client, scenario, ask_id, asked, timeout=timeout, as_json=as_json)


def follow(
    client: ReefClient, scenario: str, ask_id: str, asked: dict[str, Any], *, timeout: float, as_json: bool
) -> None:
    """Follow an ask (or a learn ticket) under a spinner until it settles; print its outcome."""
    started = time.monotonic()
    waiting = out.output.errors.status(f"{ask_id}: {SAYS['queued']}…")
    with until_interrupted() as stop, waiting as spinner:

        def show(progress: Progress) -> None:
            says = SAYS.get(progress.state, progress.state)
            spinner.update(f"{ask_id}: {says}… {time.monotonic() - started:.0f}s")

        progress = client.wait(scenario, ask_id, timeout=timeout, on_progress=show, stop=stop)
    if stop.is_set() and not progress.settled:  # the person stopped waiting, not the ask
        raise ReefError(f"stopped waiting; {ask_id} goes on in the daemon (see reef releases {scenario})")
    link = page_url(client.url, progress, asked)
    if as_json:
        out.output.json({**asked, "state": progress.state, "result": progress.result})
    if not progress.settled:
        raise ReefError(
            f"{ask_id} is still {progress.state} after {timeout:g}s; it goes on in the daemon "
            f"(see reef releases {scenario})"
        )
    if not as_json:
        print_outcome(scenario, ask_id, progress.result or {}, link)


def page_url(base: str, progress: Progress, asked: dict[str, Any]) -> str | None:
    path = (progress.result or {}).get("page_path") or asked.get("page_path")
    return f"{base}{path}" if path else None


def print_outcome(scenario: str, ask_id: str, result: dict[str, Any], page_url: str | None) -> None:
    console = out.output.console
    verdict = str(result.get("verdict") or "unknown")
    step = result.get("step")
    if result.get("release"):
        console.print(
            f"{ask_id}: [green]{escape(verdict)}[/] → {result['release']} now serves {scenario}",
            highlight=False,
        )
    elif verdict == "pending":
        name = f"c{step}" if step is not None else "the candidate"
        console.print(
            f"{ask_id}: [yellow]pending[/] → {name} changes code and waits for a person "
            f"(reef promote {scenario} {name} · reef reject {scenario} {name})",
            highlight=False,
        )
    else:
        console.print(f"{ask_id}: {escape(verdict)}; the current release keeps serving", highlight=False)
    if page_url:
        console.print(f"page: {page_url}", highlight=False)
