"""CLI tests: the daemon fixtures of tests/daemon, and no daemon at the default URL.

Every CLI test starts with ``REEF_URL`` pointing at a port nobody listens on, so a daemon a
developer happens to run on 127.0.0.1:8900 can never answer a test; tests that want a daemon
start one (``make_reef``) and pass its URL. The port stays bound (not listening) for the whole
test: a port picked and let go could be handed to the test's own daemon, which would then answer
at the "nobody" URL (CI saw it once).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.daemon.conftest import RunningReef, make_reef, upstream

__all__ = ["RunningReef", "make_reef", "upstream"]


@pytest.fixture(autouse=True)
def no_daemon_by_default(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with socket.socket() as held:  # bound, never listening: a connect is refused
        held.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{held.getsockname()[1]}"
        monkeypatch.setenv("REEF_URL", url)
        monkeypatch.delenv("REEF_TOKEN", raising=False)
        monkeypatch.delenv("REEF_STATE_DIR", raising=False)
        yield url
