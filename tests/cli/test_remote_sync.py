"""``reef remote add|list|remove`` and ``reef sync`` on a state directory, with real git remotes."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from reef_core.store import Store, StoreOptions, build_tree
from reef_core.store.repo import init_bare, read_ref
from tests.cli.support import reef
from tests.conftest import git
from tests.fakes.git_http import GitHttpServer


def _state(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    with Store(state, StoreOptions(pack_every=0)).open("s", create=True) as scenario:
        scenario.append_sync("record", {"n": 1})
        tree = build_tree(scenario.handle.repo, {"AGENTS.md": b"be brief\n"})
        scenario.releases.publish(tree, expected=None, operation="creation")
    return state


def test_remote_add_list_sync_remove(tmp_path: Path):
    state = _state(tmp_path)
    remote = tmp_path / "remote.git"
    added = reef("remote", "add", "s", "origin", str(remote), "--create", "--state-dir", str(state))
    assert added.exit_code == 0, added.output
    assert f"s: remote origin → {remote}" in added.output

    listed = reef("remote", "list", "--json", "--state-dir", str(state))
    row = json.loads(listed.output)[0]
    assert (row["scenario"], row["name"], row["url"]) == ("s", "origin", str(remote))
    assert (row["unpushed_releases"], row["unpushed_records"], row["last_push"]) == (1, 1, None)

    synced = reef("sync", "s", "--json", "--state-dir", str(state))
    assert synced.exit_code == 0, synced.output
    (report,) = json.loads(synced.output)["remotes"]
    assert (report["remote"], report["outcome"], report["error"]) == ("origin", "ok", None)
    path = state / "scenarios" / "s.git"
    assert read_ref(remote, "refs/heads/release") == read_ref(path, "refs/heads/release")
    assert read_ref(remote, "refs/heads/data") == read_ref(path, "refs/heads/data")

    shown = reef("remote", "list", "s", "--state-dir", str(state))
    assert shown.exit_code == 0 and "origin" in shown.output and "0 releases" in shown.output

    removed = reef("remote", "remove", "s", "origin", "--state-dir", str(state))
    assert removed.exit_code == 0 and "remote origin removed" in removed.output
    assert json.loads(reef("remote", "list", "--json", "--state-dir", str(state)).output) == []


def test_a_password_is_refused_and_never_shown(tmp_path: Path):
    state = _state(tmp_path)
    refused = reef(
        "remote", "add", "s", "origin", "https://alice:s3cret@forge.example/s.git", "--state-dir", str(state)
    )
    assert refused.exit_code == 2
    assert "reef keeps no passwords" in refused.output and "s3cret" not in refused.output
    # one written by hand, with git, is shown redacted
    path = state / "scenarios" / "s.git"
    git("-C", str(path), "config", "remote.hand.url", "https://alice:s3cret@forge.example/s.git")
    listed = reef("remote", "list", "s", "--json", "--state-dir", str(state))
    assert json.loads(listed.output)[0]["url"] == "https://alice:***@forge.example/s.git"
    assert "s3cret" not in listed.output


def test_sync_to_http_without_lfs_and_down_and_held_by_a_daemon(tmp_path: Path):
    state = _state(tmp_path)
    root = tmp_path / "srv"
    init_bare(root / "s.git")
    with GitHttpServer(root) as server:
        url = server.url("s.git")
        assert reef("remote", "add", "s", "web", url, "--state-dir", str(state)).exit_code == 0
        synced = reef("sync", "--state-dir", str(state))
        assert synced.exit_code == 0, synced.output
        assert f"s ↔ web ({url}): ok" in synced.output

        with Store(state).open("s"):
            held = reef("sync", "s", "--state-dir", str(state))
        assert held.exit_code == 3
        assert "scenario s is already open for writing" in held.output
        assert "no daemon answers at" in held.output and "stop what holds s" in held.output

        server.stop()
        down = reef("sync", "s", "--remote", "web", "--state-dir", str(state))
        assert down.exit_code == 1
        assert f"web ({url}): unreachable" in down.output

    missing = reef("sync", "s", "--remote", "nope", "--state-dir", str(state))
    assert missing.exit_code == 2 and "scenario s has no remote 'nope'" in missing.output


def test_sync_of_a_scenario_a_daemon_holds_goes_through_that_daemon(make_reef, tmp_path: Path):
    daemon = make_reef()
    assert httpx.post(f"{daemon.url}/reef/scenarios", json={"name": "s"}, timeout=10).status_code == 201
    remote = tmp_path / "remote.git"
    init_bare(remote)
    state = str(daemon.state_dir)
    added = reef("remote", "add", "s", "origin", str(remote), "--state-dir", state, "--url", daemon.url)
    assert added.exit_code == 0, added.output
    httpx.post(
        f"{daemon.url}/v1/chat/completions",
        headers={"x-reef-scenario": "s"},
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    )
    synced = reef("sync", "s", "--state-dir", state, "--url", daemon.url)
    assert synced.exit_code == 0, synced.output
    assert f"s ↔ origin ({remote}): ok" in synced.output
    local = git("--git-dir", daemon.repo("s"), "rev-parse", "refs/heads/data").stdout
    assert git("--git-dir", str(remote), "rev-parse", "refs/heads/data").stdout == local
    httpx.post(
        f"{daemon.url}/v1/chat/completions",
        headers={"x-reef-scenario": "s"},
        json={"model": "m", "messages": [{"role": "user", "content": "again"}]},
        timeout=10,
    )
    shown = reef("status", "--url", daemon.url)
    assert shown.exit_code == 0, shown.output
    assert f"s ↔ origin ({remote}): last push" in shown.output
    assert "not pushed: 1 record" in shown.output
