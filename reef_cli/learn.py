"""``reef learn SCENARIO``: a usage step now, on the sessions scored since the last one.

reefine learns from usage by itself once ``recipe.config.usage-min-sessions`` new scored
sessions exist; this asks for a step now (``POST /reef/scenarios/{s}/learn``) and, unless
``--no-wait``, follows it to its verdict like ``reef evolve --wait``: a new release, a candidate
waiting for a person, or why nothing was published (not enough evidence, the curator skipped…).
"""

from __future__ import annotations

import time

import typer

from reef_cli import output as out
from reef_cli.evolve import SAYS, page_url, print_outcome
from reef_cli.interrupt import until_interrupted
from reef_cli.output import JsonOption
from reef_cli.sources import ScenarioArgument, UrlOption, connect
from reef_core.client import Progress
from reef_core.errors import ReefError

__all__ = ["learn"]


def learn(
    scenario: str = ScenarioArgument,
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Follow the step until it settles."),
    timeout: float = typer.Option(900.0, "--timeout", min=0, help="Give up waiting after this many seconds."),
    url: str = UrlOption,
    as_json: bool = JsonOption,
) -> None:
    """Learn from the scenario's recorded sessions now (reefine); follow the step to its verdict."""
    with connect(url) as client:
        asked = client.learn(scenario)
        ticket = asked["ticket"]
        if not wait:
            if as_json:
                out.output.json(asked)
            else:
                out.output.console.print(f"learning on {scenario}: {ticket}", highlight=False)
            return
        started = time.monotonic()
        waiting = out.output.errors.status(f"{ticket}: {SAYS['queued']}…")
        with until_interrupted() as stop, waiting as spinner:

            def show(progress: Progress) -> None:
                says = SAYS.get(progress.state, progress.state)
                spinner.update(f"{ticket}: {says}… {time.monotonic() - started:.0f}s")

            progress = client.wait(scenario, ticket, timeout=timeout, on_progress=show, stop=stop)
        if stop.is_set() and not progress.settled:
            raise ReefError(f"stopped waiting; {ticket} goes on in the daemon (see reef releases {scenario})")
        link = page_url(client.url, progress, asked)
    if as_json:
        out.output.json({**asked, "state": progress.state, "result": progress.result})
    if not progress.settled:
        raise ReefError(
            f"{ticket} is still {progress.state} after {timeout:g}s; it goes on in the daemon "
            f"(see reef releases {scenario})"
        )
    if not as_json:
        print_outcome(scenario, ticket, progress.result or {}, link)
