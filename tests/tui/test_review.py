"""``reef review`` driven with Textual's pilot: against a real daemon for the operations (checked
afterwards with the git CLI), and against the repositories alone for reading and live refresh."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
from textual.widgets import Static

from reef_cli.output import when
from reef_cli.review import make_app
from reef_cli.tui import ReviewApp
from reef_cli.tui.confirm import ConfirmScreen
from reef_cli.tui.model import Selection
from reef_cli.tui.score_line import ScoreLine
from reef_cli.tui.tree import ScenarioTree
from reef_core.client import approver
from reef_core.store import Store, build_tree
from tests.cli.support import reef
from tests.conftest import git
from tests.tui.conftest import V1, build_chain, pane_text, select, settle, status_text

SIZE = (120, 40)
C2 = Selection("s", "candidate", "c2")


@pytest.fixture
def daemon(make_reef):
    """A real daemon serving ``s``: v1, c1 → v2, c2 pending, c3 rejected by its checks."""
    running = make_reef()
    build_chain(running.state_dir, "s")
    return running


def run(coroutine) -> None:
    asyncio.run(coroutine)


def labels(app: ReviewApp) -> list[str]:
    tree = app.query_one(ScenarioTree)
    lines, stack = [], list(reversed(tree.root.children))
    while stack:
        node = stack.pop()
        lines.append(node.label.plain)
        stack.extend(reversed(node.children))
    return lines


def row(app: ReviewApp, name: str) -> str:
    """The tree line of candidate or release ``name`` (``c2``, ``v3``)."""
    return next(line for line in labels(app) if line.replace("●", " ").split()[0] == name)


def dialog_text(screen: ConfirmScreen) -> str:
    """The question and its consequence, as the dialog shows them."""
    return "\n".join(str(static.content) for static in screen.query(Static))


def tip(repo: str) -> str:
    return git("--git-dir", repo, "describe", "--tags", "--exact-match", "release").stdout.strip()


def test_approve_a_pending_candidate_after_reading_its_diff(daemon):
    repo = daemon.repo("s")

    async def scenario() -> None:
        app = make_app("s", url=daemon.url, state_dir=None, watch=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await select(pilot, Selection("s", "release", "v1"))
            await select(pilot, C2)
            shown = pane_text(app)
            assert "add a hook that formats files on save" in shown  # the ask
            assert "An extension runs the formatter after each tool call" in shown  # the design
            assert "✓ reviewer  it does what was asked" in shown  # a check verdict
            assert "built on v2" in shown
            assert "extensions/format.ts  added +3 −0" in shown
            assert '+  pi.on("tool_result", async () => { await pi.exec("ruff", ["format"]); });' in shown

            await pilot.press("a")
            assert isinstance(app.screen, ConfirmScreen)
            question = dialog_text(app.screen)
            assert "Approve c2 of s? It runs extensions/format.ts with your privileges." in question
            assert (
                "The harness runs this code with your privileges:\n  extensions/format.ts (new)" in question
            )
            assert "rules/format.md" not in question  # a rule runs nothing
            await pilot.press("n")  # changed my mind: nothing happens
            assert not isinstance(app.screen, ConfirmScreen)
            assert tip(repo) == "v2"

            await pilot.press("a")
            loads = app.loads
            await pilot.click("#yes")  # the mouse works too
            await settle(pilot, loads=loads + 1)
            assert "approved c2: v3 now serves s" in status_text(app)
            assert "✓ selected → v3" in row(app, "c2")
            assert row(app, "v3").startswith("● v3")
            v3 = Store(daemon.state_dir).reader("s").releases.get("v3")
            approved = f"approved by {approver('reef review')} at {when(v3.approved_at)}"
            shown = pane_text(app)  # c2, still selected
            assert f"built on v2 · published as v3 · {approved}" in shown
            assert "verdict: pending" not in shown
            await select(pilot, Selection("s", "release", "v3"))
            assert f"built on v2 · {approved}" in pane_text(app)

    run(scenario())
    assert tip(repo) == "v3"
    assert (
        f"Reef-Approved-By: {approver('reef review')}"
        in git("--git-dir", repo, "log", "-1", "release").stdout
    )
    assert git("--git-dir", repo, "show", "release:extensions/format.ts").stdout.startswith("export default")
    assert git("--git-dir", repo, "for-each-ref", "refs/reef/pending").stdout == ""


def test_reject_a_pending_candidate(daemon):
    repo = daemon.repo("s")

    async def scenario() -> None:
        app = make_app("s", url=daemon.url, state_dir=None, watch=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await select(pilot, C2)
            await pilot.press("x")
            assert isinstance(app.screen, ConfirmScreen)
            loads = app.loads
            await pilot.press("y")
            await settle(pilot, loads=loads + 1)
            assert "rejected c2" in status_text(app)
            assert "✗ turned down" in row(app, "c2")
            await pilot.press("a")  # nothing is pending any more: approve is off
            assert not isinstance(app.screen, ConfirmScreen)

    run(scenario())
    assert tip(repo) == "v2"
    assert git("--git-dir", repo, "for-each-ref", "--format=%(refname)", "refs/reef/").stdout.split() == [
        "refs/reef/candidates/1",
        "refs/reef/candidates/2",
        "refs/reef/candidates/3",
        "refs/reef/rejected/2",
    ]


def test_roll_back_to_an_earlier_release(daemon):
    repo = daemon.repo("s")

    async def scenario() -> None:
        app = make_app("s", url=daemon.url, state_dir=None, watch=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await select(pilot, Selection("s", "release", "v2"))
            await pilot.press("b")  # v2 already serves: there is nothing to roll back to
            assert not isinstance(app.screen, ConfirmScreen)
            await select(pilot, Selection("s", "release", "v1"))
            assert "-Answer in one short paragraph." not in pane_text(app)  # v1 is diffed against nothing
            await pilot.press("b")
            assert isinstance(app.screen, ConfirmScreen)
            loads = app.loads
            await pilot.press("y")
            await settle(pilot, loads=loads + 1)
            assert "rolled back s: v3 serves the content of v1 again" in status_text(app)
            assert row(app, "v3").startswith("● v3") and "rollback" in row(app, "v3")

    run(scenario())
    assert tip(repo) == "v3"
    assert git("--git-dir", repo, "show", "release:rules/style.md").stdout.encode() == V1["rules/style.md"]
    assert git("--git-dir", repo, "diff", "--stat", "v1", "v3").stdout == ""


def test_open_the_page_of_a_candidate_and_of_a_release(daemon):
    opened: list[str] = []

    async def scenario() -> None:
        app = make_app("s", url=daemon.url, state_dir=None, watch=False, browser=opened.append)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await select(pilot, C2)
            await pilot.press("o")
            await select(pilot, Selection("s", "release", "v1"))
            await pilot.press("o")

    run(scenario())
    assert opened == [
        f"{daemon.url}/reef/harness/releases/2/page?scenario=s",
        f"{daemon.url}/reef/harness/releases/v1/page?scenario=s",
    ]
    page = httpx.get(opened[0], timeout=10)
    assert page.status_code == 200 and "add a hook that formats files on save" in page.text


def test_without_a_daemon_it_reads_the_repository_and_operations_say_to_start_one(
    fixed_state: Path, no_daemon_by_default: str
):
    async def scenario() -> None:
        app = make_app(None, url=no_daemon_by_default, state_dir=fixed_state, watch=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert app.sub_title == "read-only: no daemon answers"
            assert app.selection == C2  # the cursor starts on what waits for a person
            assert [line.split()[0] for line in labels(app) if line.split()[0] in ("s", "t")] == ["s", "t"]
            await pilot.press("a")
            assert not isinstance(app.screen, ConfirmScreen)
            assert f"no reef daemon answers at {no_daemon_by_default}" in status_text(app)
            assert "start the daemon (reef serve) to approve" in status_text(app)
            await select(pilot, Selection("s", "candidate", "c3"))
            shown = pane_text(app)
            assert "verdict: rejected: politeness" in shown
            assert "✗ politeness  the rule insults the user" in shown
            assert "self-review: partially" in shown
            assert app.query_one(ScoreLine).scores == (("v1", 0.5), ("v2", 0.875))
            await select(pilot, Selection("t", "scenario"))
            assert "v1 serves t." in pane_text(app)
            assert app.query_one(ScoreLine).scores == ()

    run(scenario())
    assert [r.name for r in Store(fixed_state).reader("s").releases] == ["v2", "v1"]


def test_a_release_published_from_outside_appears_without_a_key_press(
    fixed_state: Path, no_daemon_by_default: str
):
    async def scenario() -> None:
        app = make_app("s", url=no_daemon_by_default, state_dir=fixed_state)  # watching
        async with app.run_test(size=SIZE) as pilot:
            deadline = time.monotonic() + 10
            while not app.watch_ready:
                assert time.monotonic() < deadline, "the watcher never took hold"
                await pilot.pause(0.05)
            await settle(pilot, loads=2)  # the first read, and the one once the watch held
            assert not any(line.startswith("● v3") for line in labels(app))
            loads = app.loads
            reader = Store(fixed_state).reader("s")
            chain = reader.releases
            chain.publish(
                build_tree(reader.handle.repo, {"rules/new.md": b"New.\n"}),
                expected=chain.tip().commit,
                operation="creation",
            )
            deadline = time.monotonic() + 10
            while not any(line.startswith("● v3") for line in labels(app)):
                assert time.monotonic() < deadline, "the new release never appeared"
                await pilot.pause(0.05)
            assert app.loads > loads
            assert "s  v3  1 pending" in labels(app)

    # the watcher lets the app exit: a watch that could not be stopped would hang it for ever
    run(asyncio.wait_for(scenario(), timeout=120))


def test_the_command_names_a_missing_scenario_and_starts_no_screen(fixed_state: Path):
    result = reef("review", "nope", "--state-dir", str(fixed_state))
    assert result.exit_code == 1
    assert "no scenario 'nope'" in result.output


def test_the_command_says_where_it_looked_when_there_is_neither_state_nor_daemon(tmp_path: Path):
    result = reef("review", "--state-dir", str(tmp_path / "nowhere"))
    assert result.exit_code == 1
    assert f"no reef state in {tmp_path / 'nowhere'}" in result.output
    assert "start the daemon (reef serve)" in result.output
