"""``reef canary SCENARIO status|stop|promote``: the scenario's canary release.

``status`` shows the running canary (or the last one, and how it ended): the candidate and the
release it competes with, its share of new sessions, each arm's scored sessions and mean, the
difference with its always-valid interval, and what the sequential test says now.  ``stop``
ends it unpublished; ``promote`` publishes it now as the next release (by compare-and-swap on
the release it was tested against: a 409 if the chain moved).  All three go through the daemon
(``GET/POST /reef/scenarios/{s}/canary…``), which holds the canary's sessions.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import typer
from rich.markup import escape

from reef_cli import output as out
from reef_cli.output import JsonOption
from reef_cli.sources import ScenarioArgument, UrlOption, connect
from reef_core.client import approver

__all__ = ["canary"]


class Action(StrEnum):
    status = "status"
    stop = "stop"
    promote = "promote"


def canary(
    scenario: str = ScenarioArgument,
    action: Action = typer.Argument(Action.status, help="status (default), stop or promote."),
    url: str = UrlOption,
    as_json: bool = JsonOption,
) -> None:
    """Show, stop or promote the scenario's canary release."""
    with connect(url) as client:
        if action is Action.status:
            body = client.canary(scenario)
        elif action is Action.stop:
            body = client.canary_stop(scenario, by=approver("reef canary"))
        else:
            body = client.canary_promote(scenario, by=approver("reef canary"))
    if as_json:
        out.output.json(body)
        return
    for line in describe(body.get("canary"), body.get("plan")):
        out.output.console.print(line, highlight=False)


def describe(state: dict[str, Any] | None, plan: dict[str, Any] | None = None) -> list[str]:
    """The lines ``reef canary S status`` prints (the review TUI shows the same)."""
    if state is None:
        if plan:
            share = f"{plan['share']:.0%}"
            return [f"no canary yet: candidates that pass their checks serve {share} of new sessions first"]
        return ["no canary: recipe.config.canary-share is 0, so a selected candidate is published at once"]
    name, base = state["name"], state["base"]
    lines = [f"canary {name} against {base}: [bold]{escape(state['state'])}[/]" + _released(state)]
    lines.append(
        f"  share {float(state['share']):.0%} of new sessions · decides at {state['min_sessions']}+ scored "
        f"sessions an arm · ends by {state['max_sessions']} canary sessions · alpha {state['alpha']}"
    )
    if state.get("ask"):
        lines.append(f"  ask: {escape(str(state['ask']))}")
    test = state.get("test") or state.get("decision")
    if test:
        control, trial = test["control"], test["canary"]
        low, high = test["interval"]
        lines.append(f"  {base}: {control['n']} scored sessions, mean {control['mean']:.3f}")
        lines.append(f"  {name}: {trial['n']} scored sessions, mean {trial['mean']:.3f}")
        lines.append(
            f"  difference {test['difference']:+.3f} ({low:+.3f} to {high:+.3f}) · test: {test['state']}"
        )
        if test.get("why"):
            lines.append(f"  {escape(test['why'])}")
    if state.get("why"):
        lines.append(f"  ended: {escape(state['why'])}")
    return lines


def _released(state: dict[str, Any]) -> str:
    return f" as [green]{state['release']}[/]" if state.get("release") else ""
