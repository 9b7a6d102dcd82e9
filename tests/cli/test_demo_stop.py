"""``reef demo`` stopped by SIGTERM (a timeout, a supervisor, ``kill``) stops its daemon too: the
daemon runs in a session of its own, so nothing else would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.cli.support import demo_state
from tests.conftest import wait_for
from tests.recipes.conftest import TEST_PRETRAIN_SECONDS
from tests.store.procs import alive, descendants


def _daemons(pid: int) -> list[int]:
    """The ``reef serve`` processes below ``pid``."""
    return [p for p in descendants(pid) if "serve" in _command(p)]


def _command(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    except OSError:  # it ended while listed (a git the daemon ran)
        return []


def test_a_terminated_demo_stops_its_daemon(tmp_path: Path):
    state = demo_state(tmp_path)
    demo = subprocess.Popen(
        [sys.executable, "-m", "reef_cli", "demo", "--json", "--time-limit", "240", "--state-dir", state],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "REEF_TINY_PRETRAIN_SECONDS": TEST_PRETRAIN_SECONDS},
    )
    daemon = None
    try:
        log = state / "daemon.log"
        assert wait_for(lambda: log.exists() and "serving on" in log.read_text(), timeout=300), (
            log.read_text() if log.exists() else "no daemon.log"
        )
        (daemon,) = _daemons(demo.pid)
        assert alive(daemon)
        demo.send_signal(signal.SIGTERM)
        demo.communicate(timeout=90)
        assert demo.returncode == 128 + signal.SIGTERM
        assert wait_for(lambda: not alive(daemon), timeout=60), "the daemon outlived the demo"
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait(30)
        if daemon is not None and alive(daemon):  # the failure this test is for: leave no orphan
            os.kill(daemon, signal.SIGKILL)
