"""``reef learn SCENARIO``: a usage step now, on the sessions scored since the last one.

reefine learns from usage by itself once ``recipe.config.usage-min-sessions`` new scored
sessions exist; this asks for a step now (``POST /reef/scenarios/{s}/learn``) and, unless
``--no-wait``, follows it to its verdict like ``reef evolve --wait``: a new release, a candidate
waiting for a person, or why nothing was published (not enough evidence, the curator skipped…).
"""

from __future__ import annotations

import typer

from reef_cli.evolve import follow
from reef_cli.output import JsonOption
from reef_cli.sources import ScenarioArgument, UrlOption, connect

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
        filed = [f"learning on {scenario}: {ticket}"]
        follow(client, scenario, ticket, asked, filed=filed, wait=wait, timeout=timeout, as_json=as_json)
