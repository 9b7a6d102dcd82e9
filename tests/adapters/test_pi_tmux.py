"""The reef extension in an interactive pi, driven through tmux (send-keys, capture-pane).

pi runs in a tmux server of the test's own (its socket in ``tmp_path``), with a clean
environment: the installed ``reef-pi`` on PATH and HOME in ``tmp_path``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.adapters.conftest import SCENARIO, Machine
from tests.adapters.tmux import Pane, pane_in
from tests.fakes.upstream import ScriptedUpstream
from tests.reefine.conftest import evolve, extension, skill, step

pytestmark = pytest.mark.e2e


@pytest.fixture
def pane(tmp_path: Path) -> Iterator[Pane]:
    yield from pane_in(tmp_path, "pi")


def test_update_notice_versions_and_approving_a_pending_release_in_interactive_pi(
    reefine, upstream: ScriptedUpstream, machine: Machine, pane: Pane
):
    reef = reefine()
    machine.install(reef)
    upstream.script(*step(skill("failing-test-first", "Reproduce a bug with a failing test first.")))
    assert evolve(reef, SCENARIO, "reproduce bugs with a failing test first")["result"]["release"] == "v1"
    upstream.script(*step(extension("hello")))
    assert evolve(reef, SCENARIO, "add a /hello command")["result"]["verdict"] == "pending"

    env = [f"{k}={v}" for k, v in {**machine.env, "TERM": "xterm-256color"}.items()]
    started = pane.tmux(
        "new-session", "-d", "-s", "pi", "-x", "160", "-y", "50", "-c", str(machine.work), "env", "-i", *env,
        "reef-pi",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr

    # the update notice at session start
    shown = pane.wait_for(r"reef: v1 is available \(installed: none\)")
    assert "/versions v1 install, or reef-pi update" in shown
    assert "reef: c2 waits for approval" in shown

    pane.send("/versions", "Enter")
    shown = pane.wait_for(r"v1 +[0-9a-f]{7} +selected +current")
    assert re.search(r"c2 +- +pending +needs approval, on v1 +add a /hello command", shown)

    # a pending release: confirmed in pi's own dialog, promoted, installed
    pane.send("/versions c2 install", "Enter")
    shown = pane.wait_for(r"Approve c2 of dev\?")
    assert "Approve c2 of dev? It runs extensions/hello.ts with your privileges." in shown
    assert re.search(r"pi runs this code with your privileges:\s+extensions/hello\.ts \(new\)", shown)
    pane.send("Enter")  # "Yes" is selected
    pane.wait_for(r"reef: installed v2\. Type /reload", timeout=60)
    assert machine.sidecar()["release"] == "v2"
    v2 = httpx.get(f"{reef.url}/reef/scenarios/{SCENARIO}/releases").json()["releases"][0]
    assert v2["release"] == "v2" and v2["approved_by"].endswith(" via pi /versions") and v2["approved_at"]
    assert (machine.agent / "extensions" / "hello.ts").is_file()

    pane.send("/reload", "Enter")
    shown = pane.wait_for(r"hello\.ts, reef\.ts")
    assert "failing-test-first" in shown
