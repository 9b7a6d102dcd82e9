"""Another user of the same machine: the daemon's state directory is its user's alone.

Every recorded prompt and answer lives under the state directory, so a daemon makes it 0700,
and closes one it finds open to others (a directory made by hand, or by an older reef).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tests.cli.support import chat
from tests.daemon.conftest import RunningReef


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_state_dir_is_private(make_reef, upstream):
    reef = make_reef()
    chat(reef, "s")
    assert _mode(reef.state_dir) == 0o700


def test_an_open_state_dir_is_closed_at_start(tmp_path: Path, upstream):
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, 0o755)
    reef = RunningReef(tmp_path, "--inference.upstream-url", upstream.url).start()
    try:
        chat(reef, "s")
    finally:
        reef.stop()
    assert _mode(state) == 0o700
