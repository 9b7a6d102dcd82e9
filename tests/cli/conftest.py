"""CLI tests: the daemon fixtures of tests/daemon, and no daemon at the default URL.

Every CLI test starts with ``REEF_URL`` pointing at a port nobody listens on, so a daemon a
developer happens to run on 127.0.0.1:8900 can never answer a test; tests that want a daemon
start one (``make_reef``) and pass its URL.
"""

from __future__ import annotations

import pytest

from tests.daemon.conftest import RunningReef, make_reef, upstream
from tests.fakes.upstream import free_port

__all__ = ["RunningReef", "make_reef", "upstream"]


@pytest.fixture(autouse=True)
def no_daemon_by_default(monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("REEF_URL", url)
    monkeypatch.delenv("REEF_TOKEN", raising=False)
    monkeypatch.delenv("REEF_STATE_DIR", raising=False)
    return url
