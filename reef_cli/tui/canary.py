"""A scenario's canary as the review TUI shows it: how each candidate's canary went, and the
lines the pane shows, from the daemon or from the repository.

The repository keeps the canary's state (``refs/reef/canary``: which candidate, against which
release, its share, how it ended), and the TUI reads it with everything else.  How the test
stands while it runs only the daemon knows (it tallies the sessions' scores on each look), so
with a daemon the pane shows its answer to ``GET /reef/scenarios/{s}/canary``; without one, the
stored state and a word that stopping and promoting need the daemon.  The wording is ``reef
canary S status``'s (:func:`reef_cli.canary.describe`): rich markup, what a step wrote escaped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from reef_cli.canary import describe
from reef_cli.tui.operator import Operator
from reef_core.errors import ReefError
from reef_core.store.canary import CanaryRef

__all__ = ["RUNNING", "CanaryShown", "is_running", "kept", "show", "step_state"]

RUNNING = "running"


def is_running(state: Mapping[str, Any] | None) -> TypeGuard[Mapping[str, Any]]:
    return state is not None and state.get("state") == RUNNING


def kept(ref: CanaryRef) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """The canary as git keeps it (running, or the last; None: never one), and each candidate
    that was a canary (``c2``) → ``running`` or how its canary ended."""
    record = ref.read()
    if record is None:
        return None, {}
    found: dict[str, str] = {}
    for state in ref.history():  # newest first: the last word on each canary
        name = state.get("name")
        if isinstance(name, str) and name not in found:
            found[name] = str(state.get("state") or "")
    return record.state, found


def step_state(outcome: str | None) -> str:
    """The state a candidate whose verdict is ``canary`` and that became no release shows:
    ``canary`` while it serves, else how it ended (``retired``, ``stopped``, …)."""
    if outcome == RUNNING:
        return "canary"
    return outcome or "canary ended"  # its canary fell out of the history kept


@dataclass(frozen=True)
class CanaryShown:
    """What the pane shows of one canary."""

    state: str  # "running", or how it ended
    lines: tuple[str, ...]  # rich markup, as ``reef canary S status`` prints them
    note: str  # where the lines come from, when not from the daemon, and what needs it


def show(operator: Operator, scenario: str, stored: Mapping[str, Any]) -> CanaryShown:
    """The canary of ``scenario``: the daemon's account when one answers, else ``stored`` (the
    state the repository keeps).  Blocks on the daemon: call it from a worker."""
    state: Mapping[str, Any] = stored
    plan: Mapping[str, Any] | None = None
    note = ""
    if operator.live:
        try:
            body = operator.canary(scenario)
        except ReefError as exc:  # the daemon's worker not up yet, a recipe that runs no canary
            note = f"the daemon did not say how the test stands ({exc.message}): this is the state git keeps"
        else:
            state = body.get("canary") or stored
            plan = body.get("plan")
    elif is_running(stored):
        note = (
            "read-only: this is the state git keeps; the daemon says how the test stands, "
            "and stopping (s) or promoting (p) the canary needs it (reef serve)"
        )
    lines = tuple(describe(dict(state), dict(plan) if plan else None))
    if is_running(state) and operator.live:
        lines += ("stop it (s), or promote it now (p)",)
    return CanaryShown(str(state.get("state") or ""), lines, note)
