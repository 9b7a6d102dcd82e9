"""SVG snapshots of the review TUI's main screens (pytest-textual-snapshot).

The repository content is fixed (tests/tui/conftest.py), the terminal is 120×36, and nothing on
these screens carries a time, an id or a hash.  The one moving part, the daemon's port in the
confirmation's header, is masked.  After a deliberate change to what a screen shows, look at
the report, then update with ``pytest tests/tui --snapshot-update``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot

from reef_cli.review import make_app
from reef_cli.tui.model import Selection
from tests.tui.conftest import build_chain, select, settle

SIZE = (120, 36)


def showing(target: Selection | None = None, *keys: str, sub_title: str | None = None):
    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)
        if target is not None:
            await select(pilot, target)
        if sub_title is not None:
            pilot.app.sub_title = sub_title
        await pilot.press(*keys)
        await settle(pilot, loads=pilot.app.loads)

    return run_before


@pytest.fixture
def read_only(fixed_state: Path, no_daemon_by_default: str):
    return make_app(None, url=no_daemon_by_default, state_dir=fixed_state, watch=False)


def test_a_pending_candidate_with_its_diff(snap_compare, read_only):
    assert snap_compare(read_only, terminal_size=SIZE, run_before=showing())


def test_a_candidate_its_checks_rejected(snap_compare, read_only):
    target = Selection("s", "candidate", "c3")
    assert snap_compare(read_only, terminal_size=SIZE, run_before=showing(target))


def test_the_serving_release_and_the_score_line(snap_compare, read_only):
    target = Selection("s", "release", "v2")
    assert snap_compare(read_only, terminal_size=SIZE, run_before=showing(target))


def test_the_question_before_approving(snap_compare, make_reef):
    daemon = make_reef()
    build_chain(daemon.state_dir, "s")
    app = make_app("s", url=daemon.url, state_dir=None, watch=False)
    masked = "daemon at http://127.0.0.1:8900"  # the test daemon's port changes every run
    assert snap_compare(app, terminal_size=SIZE, run_before=showing(None, "a", sub_title=masked))
