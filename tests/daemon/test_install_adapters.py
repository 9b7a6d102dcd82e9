"""A scenario remembers which adapters it is installed for (noted by ``POST
/reef/harness/installed`` once a script ran, or by a harness's first recorded request), across
restarts, without a commit; fetching the script notes and creates nothing."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from reef_core.errors import InvalidInput
from reef_core.store import Store
from tests.conftest import git
from tests.daemon.conftest import RunningReef
from tests.fakes.upstream import ScriptedUpstream


def _script(reef: RunningReef, adapter: str, scenario: str = "dev") -> httpx.Response:
    return httpx.get(
        f"{reef.url}/reef/harness/install", params={"adapter": adapter, "scenario": scenario}, timeout=30
    )


def _install(reef: RunningReef, adapter: str, scenario: str = "dev") -> httpx.Response:
    """What ``reef install`` does: fetch the script (run it), then say it ran."""
    assert _script(reef, adapter, scenario).status_code == 200
    return httpx.post(
        f"{reef.url}/reef/harness/installed",
        params={"scenario": scenario},
        json={"adapter": adapter},
        timeout=30,
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
        assert _script(reef, "emacs").status_code == 400
        said = httpx.post(
            f"{reef.url}/reef/harness/installed", params={"scenario": "dev"}, json={"adapter": "emacs"}
        )
        assert said.status_code == 400 and "adapter must be one of pi" in said.text
        assert not Store(reef.state_dir).exists("dev")
    finally:
        reef.stop()


def test_without_implicit_scenarios_a_missing_scenario_is_not_created(tmp_path, upstream):
    reef = _daemon(tmp_path, upstream, "--reef.implicit-scenarios", "false")
    try:
        answered = _install(reef, "claude_code")  # the script is the empty tree, as before
        assert answered.status_code == 200 and answered.json()["noted"] is False
        assert not Store(reef.state_dir).exists("dev")
    finally:
        reef.stop()


def test_fetching_the_script_changes_nothing(tmp_path, upstream):
    """Issue 44: an ``<img src>`` on any web page sends this GET; it created the scenario and
    marked the harness installed, so later candidates failed ``health`` for a missing binary."""
    reef = _daemon(tmp_path, upstream)
    try:
        for adapter in ("claude_code", "codex"):
            assert _script(reef, adapter, "fresh").status_code == 200
        assert not Store(reef.state_dir).exists("fresh")
        httpx.post(f"{reef.url}/reef/scenarios", json={"name": "dev"}).raise_for_status()
        assert _script(reef, "codex").status_code == 200
        assert reef.reader("dev").installed_adapters() == frozenset()
    finally:
        reef.stop()


def test_a_harness_first_recorded_request_notes_its_install(tmp_path, upstream):
    """A ``curl … | sh`` install says nothing back; its launcher's first session does."""
    reef = _daemon(tmp_path, upstream)
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    try:
        plain = httpx.post(f"{reef.url}/v1/chat/completions", json=chat, headers={"x-reef-scenario": "dev"})
        assert plain.status_code == 200 and reef.reader("dev").installed_adapters() == frozenset()
        unrecorded = {"x-reef-scenario": "dev", "x-reef-harness": "codex", "x-reef-capture": "false"}
        assert httpx.post(f"{reef.url}/v1/chat/completions", json=chat, headers=unrecorded).status_code == 200
        assert reef.reader("dev").installed_adapters() == frozenset()  # a health check's run: not a use
        for _ in range(2):
            sent = httpx.post(
                f"{reef.url}/v1/chat/completions",
                json=chat,
                headers={"x-reef-scenario": "dev", "x-reef-harness": "pi"},
            )
            assert sent.status_code == 200
        assert reef.reader("dev").installed_adapters() == {"pi"}
    finally:
        reef.stop()


def test_a_scenario_archived_and_made_again_notes_its_harness_again(tmp_path, upstream):
    """What this daemon remembered it noted goes with the scenario it archives."""
    reef = _daemon(tmp_path, upstream)
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"x-reef-scenario": "dev", "x-reef-harness": "pi"}
    try:
        assert httpx.post(f"{reef.url}/v1/chat/completions", json=chat, headers=headers).status_code == 200
        assert reef.reader("dev").installed_adapters() == {"pi"}
        httpx.delete(f"{reef.url}/reef/scenarios/dev").raise_for_status()
        assert httpx.post(f"{reef.url}/v1/chat/completions", json=chat, headers=headers).status_code == 200
        assert reef.reader("dev").installed_adapters() == {"pi"}  # the new dev is noted too
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
