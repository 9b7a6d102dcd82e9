"""Which file changes make the review TUI read again: the refs, never objects or lock files."""

from __future__ import annotations

from pathlib import Path

import pytest
from watchfiles import Change

from reef_cli.tui.watch import RefFilter

ROOT = Path("/state/scenarios")


@pytest.mark.parametrize(
    ("path", "wanted"),
    [
        ("s.git/refs/heads/release", True),
        ("s.git/refs/heads/data", True),
        ("s.git/refs/reef/data/node-a", True),  # a node's data ref (storage.node)
        ("s.git/refs/reef/data/node-a.lock", False),
        ("s.git/refs/tags/v3", True),
        ("s.git/refs/reef/pending/2", True),
        ("s.git/packed-refs", True),
        ("s.git", True),  # a scenario created (renamed into place) or archived
        ("s.git/refs/heads/release.lock", False),
        ("s.git/packed-refs.lock", False),
        ("s.git/objects/ab/cdef", False),
        ("s.git/objects/pack/pack-1.pack", False),
        ("s.git/reef-writer.lock", False),
        (".s.git.tmp-12-34/refs/heads/release", False),  # a scenario still being made
        ("notes.txt", False),
    ],
)
def test_only_ref_changes_count(path: str, wanted: bool):
    assert RefFilter(ROOT)(Change.modified, str(ROOT / path)) is wanted


def test_changes_outside_the_scenarios_directory_do_not_count():
    assert RefFilter(ROOT)(Change.added, "/state/archive/s-1.git/refs/heads/release") is False
