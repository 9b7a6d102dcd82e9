"""A harness in a tmux session of the test's own (its socket in ``tmp_path``): keys in, the pane's
text out.  For the interactive tests of pi and Claude Code."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["Pane", "pane_in"]


class Pane:
    """One tmux session, ``session``, on a tmux server of the test's own."""

    def __init__(self, socket: Path, session: str) -> None:
        self.socket = socket
        self.session = session

    def tmux(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["tmux", "-S", str(self.socket), *args], capture_output=True, text=True, timeout=30
        )

    def text(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-300", "-t", self.session).stdout

    def send(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.session, *keys)

    def wait_for(self, pattern: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.text()
            if re.search(pattern, text):
                return text
            if time.monotonic() > deadline:
                pytest.fail(f"the pane never showed /{pattern}/ in {timeout}s; it shows:\n{text}")
            time.sleep(0.25)

    def wait_closed(self, timeout: float = 60) -> None:
        """Until the session's command (and with it the session and the server) has exited."""
        deadline = time.monotonic() + timeout
        while self.tmux("has-session", "-t", self.session).returncode == 0:
            if time.monotonic() > deadline:
                pytest.fail(f"the session did not end in {timeout}s; it shows:\n{self.text()}")
            time.sleep(0.25)


def pane_in(tmp_path: Path, session: str, *tools: str) -> Iterator[Pane]:
    """A fixture's body: the pane, after checking ``tmux`` and ``tools`` are installed; the
    test's own tmux server is killed afterwards (its own socket only)."""
    for tool in ("tmux", *tools):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed: run scripts/setup.sh --dev", pytrace=False)
    pane = Pane(tmp_path / "tmux.sock", session)
    yield pane
    pane.tmux("kill-server")
