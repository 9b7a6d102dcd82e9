"""Review TUI tests: a fixed scenario built with the real store, the CLI's daemon fixtures, and
helpers that wait for the app's workers instead of sleeping.

The fixed scenario ``s`` (and a second, ``t``) is the same every run, so snapshots can show it:

    v1  creation                    rules/style.md (long answers)
    c1  selected → v2               "prefer short answers"
    v2  evolve (from c1)            current
    c2  pending                     "add a hook that formats files on save" (extension code)
    c3  rejected: politeness        "be rude to me"

Records served by v1 and v2 carry report scores (v1 0.50, v2 0.75 and 1.00).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from rich.syntax import Syntax
from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import Static

from reef_cli.tui import ReviewApp
from reef_cli.tui.detail import DetailPane
from reef_cli.tui.model import Selection
from reef_cli.tui.tree import ScenarioTree
from reef_core.store import Store, StoreOptions, build_tree
from tests.cli.conftest import make_reef, no_daemon_by_default, upstream

__all__ = ["make_reef", "no_daemon_by_default", "upstream"]

V1 = {
    "rules/style.md": b"# Style\n\nAnswer in full paragraphs.\nExplain every step.\n",
    "skills/tests/SKILL.md": b"---\nname: tests\ndescription: Use when writing tests\n---\nRun pytest.\n",
}
V2 = {**V1, "rules/style.md": b"# Style\n\nAnswer in one short paragraph.\nExplain every step.\n"}
HOOK = (
    b"export default function (pi) {\n"
    b'  pi.on("tool_result", async () => { await pi.exec("ruff", ["format"]); });\n'
    b"}\n"
)
C2 = {**V2, "extensions/format.ts": HOOK, "rules/format.md": b"Format files on save.\n"}
C3 = {**V2, "rules/style.md": b"# Style\n\nBe rude.\n"}

CHECKS_PASSED = [
    {"name": "well_formed", "passed": True, "detail": "4 entries render to 5 files"},
    {"name": "screens", "passed": True, "detail": "no credentials or overrides"},
    {"name": "reviewer", "passed": True, "detail": "it does what was asked"},
]


def _record(design: str, checks: list[dict[str, Any]], review: str = "delivers") -> dict[str, Any]:
    return {"design": design, "self_review": {"verdict": review, "missing": ""}, "checks": checks}


def build_chain(state_dir: Path, scenario: str = "s") -> None:
    """v1, c1 → v2, c2 pending, c3 rejected: with the real store, beside a daemon or not."""
    store = Store(state_dir)
    store.create(scenario)
    chain = store.reader(scenario).releases
    repo = store.reader(scenario).handle.repo
    v1 = chain.publish(build_tree(repo, V1), expected=None, operation="creation")
    ask = "prefer short answers"
    c1 = chain.create_candidate(
        build_tree(repo, V2),
        base=v1,
        verdict="selected",
        ask=ask,
        record=_record("Shorten the style rule to one paragraph.", CHECKS_PASSED),
    )
    v2 = chain.publish(
        build_tree(repo, V2),
        expected=v1.commit,
        operation="evolve",
        ask=ask,
        verdict="selected",
        source=f"candidate {c1.step}",
    )
    c2 = chain.create_candidate(
        build_tree(repo, C2),
        base=v2,
        verdict="pending",
        ask="add a hook that formats files on save",
        record=_record(
            "An extension runs the formatter after each tool call; a rule says so.", CHECKS_PASSED
        ),
    )
    chain.mark_pending(c2.step)
    chain.create_candidate(
        build_tree(repo, C3),
        base=v2,
        verdict="rejected: politeness",
        ask="be rude to me",
        record=_record(
            "Make the style rule rude.",
            [{"name": "politeness", "passed": False, "detail": "the rule insults the user"}],
            review="partially",
        ),
    )


def add_scores(state_dir: Path, scenario: str = "s") -> None:
    """Records served by v1 and v2, and reports that score them (no daemon may hold ``scenario``)."""
    with Store(state_dir, StoreOptions(pack_every=0)).open(scenario) as writer:
        for release, scores in (("v1", [0.5]), ("v2", [0.75, 1.0])):
            for score in scores:
                receipt = writer.append_sync("record", {"release": release, "status": 200})
                writer.append_sync("report", {"score": score, "references": [receipt]})


@pytest.fixture
def fixed_state(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    build_chain(state, "s")
    add_scores(state, "s")
    chain = Store(state)
    chain.create("t")
    reader = chain.reader("t")
    reader.releases.publish(
        build_tree(reader.handle.repo, {"rules/tone.md": b"Be kind.\n"}), expected=None, operation="creation"
    )
    return state


# -- driving the app -------------------------------------------------------------------------


async def settle(pilot: Pilot, *, loads: int = 1, timeout: float = 15) -> None:
    """Wait until ``loads`` loads have completed and no load, detail or operation is running."""
    app = pilot.app
    assert isinstance(app, ReviewApp)
    deadline = time.monotonic() + timeout
    while True:
        await pilot.pause()
        busy = [w for w in app.workers if w.group in ("load", "detail", "operate") and not w.is_finished]
        if app.loads >= loads and not busy:
            await pilot.pause()
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the app did not settle: {app.loads} loads, busy: {busy}")
        await asyncio.sleep(0.02)


async def select(pilot: Pilot, target: Selection) -> None:
    """Move the tree's cursor to ``target`` with the arrow keys, as a person would."""
    app = pilot.app
    assert isinstance(app, ReviewApp)
    tree = app.query_one(ScenarioTree)
    node = next((n for n in tree.iter_nodes() if n.data == target), None)
    assert node is not None and node.line >= 0, f"{target} is not in the tree"
    steps = node.line - tree.cursor_line
    await pilot.press(*(["down"] * steps if steps > 0 else ["up"] * -steps))
    assert app.selection == target, f"the keys did not reach {target}"
    await settle(pilot, loads=app.loads)


def pane_text(app: ReviewApp) -> str:
    """Everything the detail pane shows, as plain text."""
    parts = []
    for static in app.query_one(DetailPane).query(Static):
        content = static.content
        if isinstance(content, Syntax):
            parts.append(content.code)
        elif isinstance(content, Text):
            parts.append(content.plain)
        else:
            parts.append(str(content))
    return "\n".join(parts)


def status_text(app: ReviewApp) -> str:
    content = app.query_one("#status", Static).content
    return content.plain if isinstance(content, Text) else str(content)
