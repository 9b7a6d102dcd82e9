"""Remotes as an operator sets them up with the public commands: added while a daemon runs (it
publishes through them at once), a release made while the remote was away (its tag goes too),
and a new machine that joins with ``reef clone`` (it serves at once, with every record).

Real daemons on loopback, the real CLI (``reef remote add``, ``reef sync``, ``reef clone``), real
git: a bare repository on disk as the remote.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from reef_core.store import GITATTRIBUTES, Store, build_tree, store_lfs
from reef_core.store.lfs import lfs_object_path
from reef_core.store.repo import init_bare
from tests.cli.support import reef
from tests.conftest import git

S = "s"
H = {"x-reef-scenario": S}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _create(daemon) -> None:
    answer = httpx.post(f"{daemon.url}/reef/scenarios", json={"name": S}, timeout=10)
    assert answer.status_code in (200, 201), answer.text


def _publish_beside(daemon, files: dict[str, bytes]) -> None:
    """A release made beside the daemon (the store publishes without its lock), as ``reef
    import`` or a person's tool would."""
    reader = Store(daemon.state_dir).reader(S)
    tree = build_tree(reader.handle.repo, files)
    tip = reader.releases.tip()
    reader.releases.publish(tree, expected=tip.commit if tip else None, operation="creation")


def _rollback(daemon, target: str) -> str:
    answer = httpx.post(f"{daemon.url}/reef/scenarios/{S}/rollback", json={"release": target}, timeout=60)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["release"])


def _tags(remote: Path) -> dict[str, str]:
    listed = git(
        "--git-dir", str(remote), "for-each-ref", "--format=%(refname:short) %(*objectname)", "refs/tags"
    )
    return dict(line.split(" ") for line in listed.stdout.splitlines())


def _chain(remote: Path) -> list[str]:
    return git("--git-dir", str(remote), "rev-list", "--reverse", "--first-parent", "release").stdout.split()


def test_a_remote_added_while_the_daemon_runs_is_published_through_at_once(make_reef, tmp_path: Path):
    """Issue 29 (2): the daemon ignored a remote added after it opened the scenario."""
    daemon = make_reef("--storage.node", "a")
    _create(daemon)
    _publish_beside(daemon, {"rules/style.md": b"Be brief.\n"})
    remote = tmp_path / "remote.git"
    added = reef(
        "remote",
        "add",
        S,
        "origin",
        str(remote),
        "--create",
        "--state-dir",
        str(daemon.state_dir),
        "--url",
        daemon.url,
    )
    assert added.exit_code == 0, added.output
    assert "added by the daemon" in added.output and "synced: ok" in added.output
    assert sorted(_tags(remote)) == ["v1"]  # the first sync pushed what the scenario had
    assert _rollback(daemon, "v1") == "v2"  # no sync in between: the publish itself pushed it
    assert sorted(_tags(remote)) == ["v1", "v2"] and [_tags(remote)[t] for t in ("v1", "v2")] == _chain(
        remote
    )
    removed = reef("remote", "remove", S, "origin", "--state-dir", str(daemon.state_dir), "--url", daemon.url)
    assert removed.exit_code == 0, removed.output
    assert _rollback(daemon, "v1") == "v3"  # local now: the remote keeps v2
    assert sorted(_tags(remote)) == ["v1", "v2"]


def test_a_release_made_while_the_remote_was_away_gets_its_tag_there(make_reef, tmp_path: Path):
    """Issue 29 (1), with the public commands: remote added with the daemon stopped, v1 with the
    remote up, v2 with it away, v3 with it back, then ``reef sync``."""
    remote = tmp_path / "remote.git"
    init_bare(remote)
    first = make_reef("--storage.node", "a")
    _create(first)
    _publish_beside(first, {"rules/style.md": b"Be brief.\n"})
    state = first.state_dir
    first.stop()
    assert reef("remote", "add", S, "origin", str(remote), "--state-dir", str(state)).exit_code == 0
    again = make_reef("--storage.node", "a", "--storage.state-dir", str(state))
    assert _rollback(again, "v1") == "v2"  # pushed with v1 before it, a fast-forward
    remote.rename(tmp_path / "away.git")
    assert _rollback(again, "v1") == "v3"  # the remote is away: local
    (tmp_path / "away.git").rename(remote)
    assert _rollback(again, "v2") == "v4"  # pushed with v3's tag
    synced = reef("sync", S, "--state-dir", str(state), "--url", again.url)
    assert synced.exit_code == 0, synced.output
    tags = _tags(remote)
    assert sorted(tags) == ["v1", "v2", "v3", "v4"] and [tags[f"v{n}"] for n in range(1, 5)] == _chain(remote)


def _checkpoint_release(daemon, payload: bytes) -> str:
    """A weights release beside the daemon: a real LFS checkpoint in its tree; its oid."""
    reader = Store(daemon.state_dir).reader(S)
    repo = reader.handle.repo
    blob, pointer = store_lfs(repo, reader.path, payload)
    files = {
        ".gitattributes": GITATTRIBUTES,
        "weights/model.safetensors": blob,
        "weights/config.json": b"{}\n",
    }
    tip = reader.releases.tip()
    reader.releases.publish(
        build_tree(repo, files), expected=tip.commit if tip else None, operation="training"
    )
    return pointer.oid


def test_a_new_machine_joins_with_reef_clone_and_serves_at_once(make_reef, tmp_path: Path):
    """Issue 29 (4): a node whose state dir lacked the scenario could not join."""
    remote = tmp_path / "remote.git"
    origin = make_reef()  # the first machine: no storage.node, it writes refs/heads/data
    _create(origin)
    receipts = [
        httpx.post(f"{origin.url}/v1/chat/completions", headers=H, json=CHAT, timeout=10).headers[
            "x-reef-agent-record-id"
        ]
        for _ in range(3)
    ]
    installed = httpx.post(
        f"{origin.url}/reef/harness/installed", json={"adapter": "claude_code"}, headers=H, timeout=30
    )
    assert installed.status_code == 200, installed.text
    _publish_beside(origin, {"rules/style.md": b"Be brief.\n"})
    checkpoint = _checkpoint_release(origin, b"weights " * 512)
    added = reef(
        "remote",
        "add",
        S,
        "origin",
        str(remote),
        "--create",
        "--state-dir",
        str(origin.state_dir),
        "--url",
        origin.url,
    )
    assert added.exit_code == 0, added.output

    joining = tmp_path / "joining"
    # remote add on a scenario this state dir lacks says how to join
    missing = reef("remote", "add", S, "origin", str(remote), "--state-dir", str(joining))
    assert missing.exit_code == 1 and f"reef clone {remote} {S}" in missing.output
    # without a node name of its own it would write the first machine's data ref: refused, nothing left
    clash = reef("clone", str(remote), S, "--state-dir", str(joining))
    assert clash.exit_code == 3 and "refs/heads/data" in clash.output and "--node" in clash.output
    assert not Store(joining).exists(S) and not list((joining / "scenarios").glob(".*"))
    cloned = reef("clone", str(remote), S, "--node", "b", "--state-dir", str(joining), "--json")
    assert cloned.exit_code == 0, cloned.output
    made = json.loads(cloned.output)
    assert (made["scenario"], made["release"], made["records"]) == (S, "v2", 3)
    path = Store(joining).path_of(S)
    assert lfs_object_path(path, checkpoint).exists()  # the newest release's checkpoint came with it
    assert Store(joining).reader(S).installed_adapters() == {"claude_code"}  # the install note travelled
    git("--git-dir", str(path), "fsck", "--no-dangling")

    node = make_reef("--storage.node", "b", "--storage.state-dir", str(joining))
    served = httpx.post(f"{node.url}/v1/chat/completions", headers=H, json=CHAT, timeout=10)
    assert served.status_code == 200 and served.headers["x-reef-release-id"] == "v2"
    listed = httpx.get(f"{node.url}/reef/scenarios/{S}/records", params={"limit": 100}, timeout=10).json()
    assert set(receipts) <= {row["id"] for row in listed["records"]}
    again = reef("clone", str(remote), S, "--node", "b", "--state-dir", str(joining))
    assert again.exit_code == 2 and "exists" in again.output
