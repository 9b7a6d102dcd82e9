"""``reef demo --canary``: each candidate that passes its checks first answers a share of new
sessions, and the view shows both arms as their scores come in.

The daemon runs with ``recipe.config.canary-share`` and bounds small enough that a canary ends
within a demo's minutes (:data:`MIN_SESSIONS`, :data:`MAX_SESSIONS`); the simulated user asks
each answer in a session of its own (``DemoUser(sessions=True)``), so the canary's weights
answer its share of them, the release the rest, and the user's scores decide between the two.
While a canary runs reef does not train: the next candidate waits for it to end.

The board reads the running canary's test from the daemon (``GET /reef/scenarios/{s}/canary``)
and how each canary ended from the scenario's repository (``refs/reef/canary``, read-only), so
a canary that ended between two looks is shown too.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from reef_cli.demo_user import DemoUser
from reef_core.errors import InvalidInput
from reef_core.store import ScenarioReader

__all__ = ["MAX_SESSIONS", "MIN_SESSIONS", "SHARE", "CanaryBoard", "check_share", "serve_flags"]

SHARE = 0.5  # the default --canary-share
#: scored sessions each arm needs before the test may decide: the daemon's default (10), as few
#: as keep a lucky streak from deciding
MIN_SESSIONS = 10
#: canary sessions after which an undecided canary ends (``expired``): with the embedded model
#: answering about eight sessions a second, 120 at an even share is about half a minute
MAX_SESSIONS = 120
_BAR = 24


def check_share(share: float) -> float:
    if not 0 < share < 1:
        raise InvalidInput(
            f"--canary-share must be above 0 and below 1 (the share of new sessions the canary "
            f"answers), not {share}",
            field="canary-share",
        )
    return share


def serve_flags(share: float) -> list[str]:
    """The ``reef serve`` settings of a canary demo."""
    return [
        "--recipe.config.canary-share",
        str(share),
        "--recipe.config.canary-min-sessions",
        str(MIN_SESSIONS),
        "--recipe.config.canary-max-sessions",
        str(MAX_SESSIONS),
    ]


def _outcome(state: dict[str, Any]) -> str:
    how = str(state.get("state"))
    if how == "promoted" and state.get("release"):
        return f"promoted as {state['release']}"
    return "still running when the demo stopped" if how == "running" else how


def _test(state: dict[str, Any]) -> dict[str, Any] | None:
    return state.get("test") or state.get("decision")


def _difference(test: dict[str, Any] | None) -> str:
    if not test or not test["canary"]["n"] or not test["control"]["n"]:
        return "no difference yet"
    low, high = test["interval"]
    return f"difference {test['difference']:+.2f} ({low:+.2f} to {high:+.2f})"


@dataclass
class CanaryBoard:
    """The canaries of one demo scenario: the running one with its test, and those that ended."""

    repo: Path
    scenario: str
    share: float
    running: dict[str, Any] | None = None  # the daemon's running canary, with its ``test``
    ended: list[dict[str, Any]] = field(default_factory=list)  # their last states, oldest first

    async def poll(self, user: DemoUser) -> None:
        state = (await user.canary()).get("canary")
        self.ended = await asyncio.to_thread(self.read_ended)
        done = {c["name"] for c in self.ended}
        running = state is not None and state.get("state") == "running" and state["name"] not in done
        self.running = state if running else None

    def settle(self) -> None:
        """Once the daemon stopped: how each canary ended, as the repository has it."""
        self.ended = self.read_ended()
        if self.running is not None and self.running["name"] in {c["name"] for c in self.ended}:
            self.running = None

    def read_ended(self) -> list[dict[str, Any]]:
        """Each canary's last state from ``refs/reef/canary``, the ended ones, oldest first."""
        reader = ScenarioReader(self.scenario, self.repo)
        try:
            history = reader.canary.history(limit=1000)  # newest first
        finally:
            reader.handle.close()
        last: dict[str, dict[str, Any]] = {}
        for state in history:
            last.setdefault(state["name"], state)
        return sorted((s for s in last.values() if s.get("state") != "running"), key=lambda s: int(s["step"]))

    def serving(self, release: str) -> str:
        if self.running is None:
            return release
        return f"{self.running['base']} and canary {self.running['name']}"

    def render(self) -> RenderableType:
        lines: list[RenderableType] = []
        state = self.running
        if state is None:
            lines.append(
                Text(
                    f"canaries: a candidate that passes its checks first answers {self.share:.0%} "
                    "of new sessions",
                    style="dim",
                )
            )
        else:
            lines.append(
                Text.assemble(
                    ("canary ", "bold"),
                    (state["name"], "bold magenta"),
                    (f" against {state['base']}: {float(state['share']):.0%} of new sessions ", ""),
                    (
                        f"(decides at {state['min_sessions']}+ sessions an arm, "
                        f"ends by {state['max_sessions']})",
                        "dim",
                    ),
                )
            )  # the console does not wrap (soft_wrap): each line fits 100 columns
            test = _test(state)
            arms = Table(box=None, pad_edge=False, show_header=True, header_style="dim")
            arms.add_column("arm")
            arms.add_column("scored sessions", justify="right")
            arms.add_column("mean score")
            arms.add_column("", justify="right")
            for label, arm, style in (
                (f"{state['base']} (release)", (test or {}).get("control"), "cyan"),
                (f"{state['name']} (canary)", (test or {}).get("canary"), "magenta"),
            ):
                n, mean = (arm["n"], arm["mean"]) if arm else (0, 0.0)
                filled = round(mean * _BAR)
                bar = Text("█" * filled, style=style)
                bar.append("░" * (_BAR - filled), style="dim")
                arms.add_row(label, str(n), bar, f"{mean:.2f}" if n else "—")
            lines.append(arms)
            evidence = (
                f" (evidence {max(0.0, test['statistic']):.1f} of the {test['threshold']:.1f} that decides)"
                if test
                else ""
            )
            lines.append(
                Text(f"{_difference(test)} · test: {(test or {}).get('state', 'running')}{evidence}")
            )
        if self.ended:
            table = Table(box=None, pad_edge=False, show_header=True, header_style="dim")
            for column in ("canary", "against", "outcome", "scored sessions", "difference"):
                table.add_column(column)
            for ended in self.ended[-6:]:
                test = _test(ended)
                sessions = (
                    f"{ended['base']} {test['control']['n']}, {ended['name']} {test['canary']['n']}"
                    if test
                    else "—"
                )
                outcome = _outcome(ended)
                style = "green" if outcome.startswith("promoted") else "yellow"
                table.add_row(
                    ended["name"], ended["base"], Text(outcome, style=style), sessions,
                    _difference(test).removeprefix("difference "),
                )  # fmt: skip
            lines.append(table)
        return Group(*lines)

    def canaries(self) -> list[dict[str, Any]]:
        """Every canary, ended or running, oldest first."""
        return [*self.ended, *([self.running] if self.running else [])]

    def summary(self) -> list[str]:
        """One line per canary: its name, base, outcome, sessions per arm and difference."""
        lines = []
        for state in self.canaries():
            test = _test(state)
            sessions = (
                f"{state['base']} {test['control']['n']} and {state['name']} {test['canary']['n']} "
                "scored sessions"
                if test
                else "no scored sessions"
            )
            lines.append(
                f"canary {state['name']} against {state['base']}: {_outcome(state)} · {sessions} · "
                f"{_difference(test)}"
            )
        return lines or [f"no canary: no candidate passed its checks (share {self.share:.0%})"]

    def to_json(self) -> list[dict[str, Any]]:
        rows = []
        for state in self.canaries():
            test = _test(state)
            rows.append(
                {
                    "name": state["name"],
                    "base": state["base"],
                    "outcome": state["state"],
                    "release": state.get("release"),
                    "sessions": {"control": test["control"]["n"], "canary": test["canary"]["n"]}
                    if test
                    else None,
                    "difference": test["difference"] if test else None,
                    "interval": test["interval"] if test else None,
                }
            )
        return rows
