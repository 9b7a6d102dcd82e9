"""The install route remembers which adapters a scenario is installed for, across restarts,
without a commit."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from reef_core.errors import InvalidInput
from reef_core.store import Store
from tests.conftest import git
from tests.daemon.conftest import RunningReef
from tests.fakes.upstream import ScriptedUpstream


def _install(reef: RunningReef, adapter: str, scenario: str = "dev") -> httpx.Response:
    return httpx.get(
        f"{reef.url}/reef/harness/install", params={"adapter": adapter, "scenario": scenario}, timeout=30
    )


def _daemon(root: Path, upstream: ScriptedUpstream, *flags: str) -> RunningReef:
    return RunningReef(root, "--inference.upstream-url", upstream.url, *flags).start()


def test_the_adapters_served_are_remembered_across_a_restart(tmp_path, upstream):
    reef = _daemon(tmp_path, upstream)
    try:
        assert _install(reef, "claude_code").status_code == 200  # before the scenario's first request
        assert _install(reef, "claude_code").status_code == 200  # again: still one adapter
        assert reef.reader("dev").installed_adapters() == {"claude_code"}
        assert _install(reef, "pi").status_code == 200
    finally:
        reef.stop()

    again = _daemon(tmp_path, upstream)
    try:
        assert again.reader("dev").installed_adapters() == {"claude_code", "pi"}
        # the note is config and one ref per adapter at the empty blob, not history: no branch, no commit
        repo = again.repo("dev")
        refs = git("--git-dir", repo, "for-each-ref", "--format=%(objecttype) %(refname)").stdout.split("\n")
        assert [r for r in refs if r] == [
            "blob refs/reef/installed/claude_code",
            "blob refs/reef/installed/pi",
        ]
        keys = git("--git-dir", repo, "config", "--get-regexp", r"^reef-adapter\.").stdout.split("\n")
        assert sorted(line.split()[0] for line in keys if line) == [
            "reef-adapter.claude_code.installed",
            "reef-adapter.pi.installed",
        ]
    finally:
        again.stop()


def test_a_refused_install_notes_nothing(tmp_path, upstream):
    reef = _daemon(tmp_path, upstream)
    try:
        assert _install(reef, "emacs").status_code == 400
        assert not Store(reef.state_dir).exists("dev")
    finally:
        reef.stop()


def test_without_implicit_scenarios_a_missing_scenario_is_not_created(tmp_path, upstream):
    reef = _daemon(tmp_path, upstream, "--reef.implicit-scenarios", "false")
    try:
        assert _install(reef, "claude_code").status_code == 200  # the empty tree, as before
        assert not Store(reef.state_dir).exists("dev")
    finally:
        reef.stop()


def test_store_notes_and_reads_installs(store):
    store.create("demo")
    assert store.reader("demo").installed_adapters() == frozenset()
    store.note_install("demo", "pi")
    with store.open("demo") as opened:  # an open scenario sees it, and takes notes too
        assert opened.installed_adapters() == {"pi"}
        store.note_install("demo", "claude_code")
        assert opened.installed_adapters() == {"pi", "claude_code"}
    with pytest.raises(InvalidInput, match="not an adapter name"):
        store.note_install("demo", 'x"]\n[core')
