"""The review TUI's release pane shows how the release does in use: traffic through a real daemon
(tests/release/traffic.py), the pane read with Textual's pilot, against the hand computation."""

from __future__ import annotations

import asyncio

from reef_cli.review import make_app
from reef_cli.tui.model import Selection
from tests.release.traffic import SCENARIO, Served, by_hand, served
from tests.tui.conftest import pane_text, select, settle

__all__ = ["served"]


def _in_use(shown: str) -> list[str]:
    """The lines under the pane's "In use" heading, up to the next heading."""
    lines = shown.splitlines()
    start = lines.index("In use") + 1
    return lines[start : lines.index("Checks", start)]


def test_the_release_pane_shows_its_evidence(served: Served):
    hand = by_hand(served.records, served.reports)
    v1 = hand["v1"]

    async def scenario() -> list[str]:
        app = make_app(SCENARIO, url=served.daemon.url, state_dir=None, watch=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            await select(pilot, Selection(SCENARIO, "release", "v1"))
            return _in_use(pane_text(app))

    lines = asyncio.run(scenario())
    person, judge, errors = v1["person"], v1["judge"], v1["errors"]
    p50, p95 = v1["latency_ms"]["p50"], v1["latency_ms"]["p95"]
    assert lines == [
        f"{v1['sessions']} sessions · {v1['requests']} requests",
        f"person's score {person['mean']:.2f} [{person['interval'][0]:.2f}, {person['interval'][1]:.2f}]"
        f" over {person['count']} sessions",
        f"judge's score {judge['mean']:.2f} [{judge['interval'][0]:.2f}, {judge['interval'][1]:.2f}]"
        f" over {judge['count']} sessions",
        f"upstream latency p50 {p50:.0f} ms · p95 {p95:.0f} ms",
        f"tokens {v1['tokens']['in']} in · {v1['tokens']['out']} out ({v1['tokens']['requests']} answers)",
        f"errors {errors['count']} of {v1['requests']} ({100 * errors['rate']:.1f}%;"
        f" 95% {100 * errors['interval'][0]:.1f}–{100 * errors['interval'][1]:.1f}%)",
    ]
