"""A scenario's canary in ``reef review``, driven with Textual's pilot against a real reefine
daemon and the scripted model: what a person sees of it (its row, its test as the daemon tells
it, or the state git keeps when no daemon answers), and stopping and promoting it with the keys,
checked afterwards against the daemon."""

from __future__ import annotations

import re

import httpx

from reef_cli.review import make_app
from reef_cli.tui import ReviewApp
from reef_cli.tui.confirm import ConfirmScreen
from reef_cli.tui.model import Selection
from reef_core.client import approver
from tests.reefine.conftest import reefine
from tests.reefine.test_canary import S, canary, only_chats, run_session, start_canary
from tests.tui.conftest import pane_text, select, settle, status_text
from tests.tui.test_review import SIZE, dialog_text, labels, row, run

__all__ = ["reefine"]

CANARY = Selection(S, "canary", "canary")


def releases(reef) -> list[str]:
    listing = httpx.get(f"{reef.url}/reef/scenarios/{S}/releases", timeout=10).json()
    return [r["release"] for r in listing["releases"]]


def canary_row(app: ReviewApp) -> str:
    return next(line for line in labels(app) if line.startswith("canary "))


def footer(app: ReviewApp) -> dict[str, bool]:
    """The keys the footer shows, description → whether it is live (False: dimmed)."""
    shown = app.screen.active_bindings.values()
    return {binding.description: enabled for _, binding, enabled, _ in shown if binding.show}


def test_a_running_canary_shows_its_test_and_the_stop_key_ends_it(reefine, upstream):
    reef = start_canary(reefine, upstream)
    only_chats(upstream, [])
    for i in range(6):
        run_session(reef, f"t{i}", 1.0 if i % 2 else 0.0)
    test = canary(reef)["canary"]["test"]
    control, trial = test["control"], test["canary"]
    assert control["n"] + trial["n"] == 6

    async def scenario() -> None:
        app = make_app(S, url=reef.url, state_dir=None, watch=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert f"{S}  v1  canary c2" in labels(app)
            assert canary_row(app) == "canary c2 vs v1  ◐ running"
            assert "◐ canary" in row(app, "c2")  # the candidate that serves as the canary
            await select(pilot, CANARY)
            shown = pane_text(app)
            assert "team · canary  ◐ running" in shown
            assert "canary c2 against v1: running" in shown
            assert "share 50% of new sessions · decides at 5+ scored sessions an arm" in shown
            assert "ask: keep diffs small" in shown
            assert f"v1: {control['n']} scored sessions, mean {control['mean']:.3f}" in shown
            assert f"c2: {trial['n']} scored sessions, mean {trial['mean']:.3f}" in shown
            assert re.search(
                r"difference [+-]\d\.\d{3} \([+-]\d\.\d{3} to [+-]\d\.\d{3}\) · test: running", shown
            )
            assert "stop it (s), or promote it now (p)" in shown
            assert footer(app)["Stop canary"] and footer(app)["Promote canary"]

            await pilot.press("s")
            assert isinstance(app.screen, ConfirmScreen)
            question = dialog_text(app.screen)
            assert "Stop canary c2 of team?" in question
            assert "is not published: v1 serves them all again" in question
            await pilot.press("n")  # changed my mind: nothing happens
            assert not isinstance(app.screen, ConfirmScreen)
            assert canary(reef)["canary"]["state"] == "running"

            await pilot.press("s")
            loads = app.loads
            await pilot.press("y")
            await settle(pilot, loads=loads + 1)
            assert "stopped canary c2: v1 serves every new session of team" in status_text(app)
            assert canary_row(app) == "canary c2 vs v1  ■ stopped"
            assert "■ stopped" in row(app, "c2")
            assert "canary c2" not in labels(app)[0]  # the scenario runs no canary any more
            shown = pane_text(app)  # the canary row, still selected
            assert "canary c2 against v1: stopped" in shown
            assert f"ended: stopped by {approver('reef review')}" in shown
            assert "stop it (s)" not in shown
            assert not footer(app)["Stop canary"] and not footer(app)["Promote canary"]  # dimmed
            await pilot.press("p")  # nothing runs: promote is off
            assert not isinstance(app.screen, ConfirmScreen)

    run(scenario())
    ended = canary(reef)["canary"]
    assert ended["state"] == "stopped" and "release" not in ended, ended
    assert ended["why"] == f"stopped by {approver('reef review')}"
    assert releases(reef) == ["v1"]


def test_the_promote_key_publishes_the_canary_as_the_next_release(reefine, upstream):
    reef = start_canary(reefine, upstream)
    only_chats(upstream, [])

    async def scenario() -> None:
        app = make_app(S, url=reef.url, state_dir=None, watch=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await select(pilot, Selection(S, "scenario"))
            shown = pane_text(app)  # the scenario's summary, then its canary
            assert "v1 serves team." in shown
            assert "Canary\ncanary c2 against v1: running" in shown
            assert "v1: 0 scored sessions, mean 0.000" in shown

            await pilot.press("p")
            assert isinstance(app.screen, ConfirmScreen)
            question = dialog_text(app.screen)
            assert "Promote canary c2 of team now?" in question
            assert "c2 is published now as team's next release" in question
            assert "Ask: keep diffs small" in question
            loads = app.loads
            await pilot.press("y")
            await settle(pilot, loads=loads + 1)
            assert "promoted canary c2: v2 now serves team" in status_text(app)
            assert row(app, "v2").startswith("● v2")
            assert "✓ selected → v2" in row(app, "c2")
            assert canary_row(app) == "canary c2 vs v1  ✓ promoted → v2"
            assert "canary c2 against v1: promoted as v2" in pane_text(app)

    run(scenario())
    ended = canary(reef)["canary"]
    assert (ended["state"], ended["release"]) == ("promoted", "v2"), ended
    assert ended["why"] == f"promoted by {approver('reef review')}"
    assert releases(reef) == ["v2", "v1"]


def test_a_canary_ended_elsewhere_before_the_answer_is_said_readably(reefine, upstream):
    reef = start_canary(reefine, upstream)
    only_chats(upstream, [])

    async def scenario() -> None:
        app = make_app(S, url=reef.url, state_dir=None, watch=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await select(pilot, CANARY)
            await pilot.press("p")
            assert isinstance(app.screen, ConfirmScreen)
            # someone else stops it while the question is open
            stopped = httpx.post(f"{reef.url}/reef/scenarios/{S}/canary/stop", json={"by": "bob"}, timeout=10)
            assert stopped.status_code == 200, stopped.text
            loads = app.loads
            await pilot.press("y")  # the daemon answers 404: no canary runs
            await settle(pilot, loads=loads + 1)
            assert "could not promote canary c2 of team: no canary is running" in status_text(app)
            assert canary_row(app) == "canary c2 vs v1  ■ stopped"  # reloaded: as it stands now
            assert "ended: stopped by bob" in pane_text(app)

    run(scenario())
    assert canary(reef)["canary"]["state"] == "stopped"
    assert releases(reef) == ["v1"]


def test_without_a_daemon_it_shows_the_state_git_keeps_and_the_keys_say_to_start_one(
    reefine, upstream, no_daemon_by_default: str
):
    reef = start_canary(reefine, upstream)  # still running: the TUI reads its repositories beside it

    async def scenario() -> None:
        app = make_app(S, url=no_daemon_by_default, state_dir=reef.state_dir, watch=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert app.sub_title == "read-only: no daemon answers"
            assert canary_row(app) == "canary c2 vs v1  ◐ running"
            await select(pilot, CANARY)
            shown = pane_text(app)
            assert "canary c2 against v1: running" in shown
            assert "share 50% of new sessions" in shown
            assert "test: running" not in shown and "mean" not in shown  # only the daemon tallies the test
            assert "read-only: this is the state git keeps" in shown
            assert "stopping (s) or promoting (p) the canary needs it (reef serve)" in shown
            await pilot.press("s")
            assert not isinstance(app.screen, ConfirmScreen)
            assert f"no reef daemon answers at {no_daemon_by_default}" in status_text(app)
            assert "start the daemon (reef serve) to stop a canary" in status_text(app)
            await pilot.press("p")
            assert not isinstance(app.screen, ConfirmScreen)
            assert "start the daemon (reef serve) to promote a canary" in status_text(app)

    run(scenario())
    assert canary(reef)["canary"]["state"] == "running"
    assert releases(reef) == ["v1"]
