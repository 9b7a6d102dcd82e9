"""Syncing scenario repositories with git remotes: a bare repository on disk, and git
http-backend on loopback (no LFS API).  Real git and git-lfs throughout."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from reef_core.errors import ConflictError
from reef_core.ids import parse_item_id
from reef_core.store import GITATTRIBUTES, RELEASE_REF, Scenario, Store, StoreOptions, build_tree, store_lfs
from reef_core.store.lfs import lfs_object_path
from reef_core.store.remotes import add_remote, get_remote, tracking_ref
from reef_core.store.repo import init_bare, read_ref
from reef_core.store.sync import RemotePublisher, push_release, read_state, remote_status, sync
from tests.conftest import LFS_CONFIG, git
from tests.fakes.git_http import GitHttpServer

needs_lfs = pytest.mark.skipif(shutil.which("git-lfs") is None, reason="git-lfs is not installed")


def _open(tmp_path: Path, name: str, node: str = "") -> Scenario:
    return Store(tmp_path / name, StoreOptions(pack_every=0)).open("s", create=True, node=node)


def _checkpoint_release(scenario: Scenario, payload: bytes) -> str:
    """A release whose tree holds a real LFS checkpoint; returns the checkpoint's oid."""
    repo = scenario.handle.repo
    blob, pointer = store_lfs(repo, scenario.path, payload)
    tree = build_tree(
        repo,
        {".gitattributes": GITATTRIBUTES, "weights/model.safetensors": blob, "weights/config.json": b"{}\n"},
    )
    tip = scenario.releases.tip()
    scenario.releases.publish(tree, expected=tip.commit if tip else None, operation="training")
    return pointer.oid


def _harness_release(scenario: Scenario, text: bytes) -> None:
    tree = build_tree(scenario.handle.repo, {"AGENTS.md": text})
    tip = scenario.releases.tip()
    scenario.releases.publish(tree, expected=tip.commit if tip else None, operation="evolve")


def _refs(path: Path) -> dict[str, str]:
    listed = git("-C", str(path), "for-each-ref", "--format=%(refname) %(objectname)").stdout
    return dict(line.split(" ") for line in listed.splitlines() if not line.startswith("refs/remotes/"))


@needs_lfs
def test_sync_to_a_file_remote_then_a_clone_gives_back_every_record_and_checkpoint(tmp_path: Path):
    remote = tmp_path / "remote.git"
    init_bare(remote)
    payload = os.urandom(256 * 1024 + 3)
    with _open(tmp_path, "a") as scenario:
        ids = [scenario.append_sync("record", {"n": n, "text": "hello"}) for n in range(3)]
        oid = _checkpoint_release(scenario, payload)
        _harness_release(scenario, b"be brief\n")
        candidate = scenario.releases.create_candidate(
            build_tree(scenario.handle.repo, {"AGENTS.md": b"be briefer\n"}),
            base=scenario.releases.tip(),
            verdict="selected",
        )
        scenario.releases.mark_pending(candidate.step)
        add_remote(scenario.path, "origin", str(remote))

        report = sync(scenario, "origin", admit=None)
        assert (report.outcome, report.lfs, report.error, report.warnings) == ("ok", "ok", None, [])
        local = _refs(scenario.path)
        assert _refs(remote) == local
        assert {"refs/heads/data", RELEASE_REF, "refs/tags/v1", "refs/tags/v2"} <= set(local)
        assert {"refs/reef/candidates/1", "refs/reef/pending/1"} <= set(local)
        assert lfs_object_path(remote, oid).read_bytes() == payload
        status = remote_status(scenario, get_remote(scenario.path, "origin"))
        assert (status["unpushed_releases"], status["unpushed_records"], status["lfs"]) == (0, 0, "ok")
        assert status["last_push"]["outcome"] == "ok"

        again = sync(scenario, "origin", admit=None)
        assert (again.outcome, again.pushed) == ("ok", {})
        records = {i: scenario.data.get(i) for i in ids}
        paths = {i: parse_item_id(i).path for i in ids}

    for side in (tmp_path / "a" / "scenarios" / "s.git", remote):
        git("-C", str(side), "fsck", "--no-dangling")
        git("-C", str(side), "lfs", "fsck", "refs/heads/release")

    clone = tmp_path / "clone"
    git("clone", "--quiet", "-b", "release", str(remote), str(clone))
    git("-C", str(clone), *LFS_CONFIG, "lfs", "install", "--local")
    git("-C", str(clone), "checkout", "--quiet", "v1")
    git("-C", str(clone), *LFS_CONFIG, "lfs", "pull")
    assert (clone / "weights" / "model.safetensors").read_bytes() == payload
    assert hashlib.sha256(payload).hexdigest() == oid
    for item_id, item in records.items():
        shown = git("-C", str(clone), "show", f"origin/data:{paths[item_id]}").stdout
        assert shown.encode() == _blob_bytes(tmp_path / "a" / "scenarios" / "s.git", paths[item_id])
        assert json.loads(shown)["n"] == item.data["n"]


def _blob_bytes(repo: Path, path: str) -> bytes:
    shown = subprocess.run(["git", "-C", str(repo), "show", f"data:{path}"], capture_output=True, check=True)
    return shown.stdout


@needs_lfs
def test_an_http_remote_takes_the_refs_and_says_checkpoints_were_not_pushed(tmp_path: Path):
    root = tmp_path / "srv"
    init_bare(root / "s.git")
    with GitHttpServer(root) as server, _open(tmp_path, "a") as scenario:
        scenario.append_sync("record", {"n": 1})
        oid = _checkpoint_release(scenario, b"weights" * 100)
        add_remote(scenario.path, "origin", server.url("s.git", user="alice"))
        report = sync(scenario, "origin", admit=None)
        assert (report.outcome, report.lfs) == ("ok", "unsupported")
        assert report.warnings == [
            f"checkpoints NOT pushed: origin has no git-lfs API (http://alice@127.0.0.1:{server.port}/s.git "
            "answered 404 on info/lfs/objects/batch)"
        ]
        assert read_ref(root / "s.git", RELEASE_REF) == read_ref(scenario.path, RELEASE_REF)
        assert read_ref(root / "s.git", "refs/heads/data") == read_ref(scenario.path, "refs/heads/data")
        assert not lfs_object_path(root / "s.git", oid).exists()
        assert read_state(scenario.path, "origin")["lfs"] == "unsupported"
        assert remote_status(scenario, get_remote(scenario.path, "origin"))["lfs"] == "unsupported"

        # another node cannot adopt that release: its checkpoint is nowhere to fetch
        with _open(tmp_path, "b", node="b") as other:
            add_remote(other.path, "origin", server.url("s.git"))
            seen = sync(other, "origin", admit=None)
            assert seen.adopted is None and other.releases.tip() is None
            assert any("v1 on origin lacks its checkpoint" in w for w in seen.warnings)
            assert seen.adopted_data == ["refs/heads/data"]


def test_remote_down_is_unreachable_and_nothing_is_lost(tmp_path: Path):
    root = tmp_path / "srv"
    init_bare(root / "s.git")
    server = GitHttpServer(root).start()
    try:
        with _open(tmp_path, "a") as scenario:
            add_remote(scenario.path, "origin", server.url("s.git", user="alice"))
            first = scenario.append_sync("record", {"n": 1})
            assert sync(scenario, "origin", admit=None).outcome == "ok"
            server.stop()
            second = scenario.append_sync("record", {"n": 2})
            _harness_release(scenario, b"v1\n")
            down = sync(scenario, "origin", admit=None)
            assert down.outcome == "unreachable"
            assert down.error is not None
            assert down.error.startswith(f"origin (http://alice@127.0.0.1:{server.port}/s.git): unreachable")
            assert scenario.data.get(first) and scenario.data.get(second)
            status = remote_status(scenario, get_remote(scenario.path, "origin"))
            assert (status["unpushed_releases"], status["unpushed_records"]) == (1, 1)
            assert status["last_fetch"]["outcome"] == "unreachable"

            server.start()
            back = sync(scenario, "origin", admit=None)
            assert back.outcome == "ok"
            assert read_ref(root / "s.git", "refs/heads/data") == read_ref(scenario.path, "refs/heads/data")
            assert read_ref(root / "s.git", RELEASE_REF) == read_ref(scenario.path, RELEASE_REF)
    finally:
        server.stop()


def test_nodes_adopt_each_others_data_and_releases_never_their_own(tmp_path: Path):
    remote = tmp_path / "remote.git"
    init_bare(remote)
    with _open(tmp_path, "a", node="a") as a, _open(tmp_path, "b", node="b") as b:
        for node in (a, b):
            add_remote(node.path, "origin", str(remote))
        b_old = b.append_sync("record", {"by": "b", "n": 0})
        assert sync(b, "origin", admit=None).outcome == "ok"
        b_new = b.append_sync("record", {"by": "b", "n": 1})  # not pushed yet: the remote is older
        by_a = a.append_sync("record", {"by": "a"})
        _harness_release(a, b"from a\n")
        candidate = a.releases.create_candidate(
            build_tree(a.handle.repo, {"AGENTS.md": b"x\n"}), base=None, verdict="selected"
        )
        assert sync(a, "origin", admit=None).outcome == "ok"
        assert read_ref(remote, f"refs/reef/nodes/a/candidates/{candidate.step}") == candidate.commit
        assert read_ref(remote, "refs/reef/candidates/1") is None

        own_before = read_ref(b.path, "refs/reef/data/b")
        report = sync(b, "origin", admit=None)
        assert report.outcome == "ok" and report.adopted == "v1"
        assert report.adopted_data == ["refs/reef/data/a"]
        assert read_ref(b.path, "refs/reef/data/b") == own_before  # the fetch never rewound it
        assert read_ref(b.path, tracking_ref("origin", "refs/reef/data/b")) == own_before
        assert b.data.get(by_a).data["by"] == "a"
        assert b.data.get(b_new) and b.data.get(b_old)
        assert b.releases.tip() == a.releases.tip()
        assert read_ref(b.path, "refs/tags/v1") == read_ref(a.path, "refs/tags/v1")


def test_two_writers_of_refs_heads_data_are_a_conflict(tmp_path: Path):
    remote = tmp_path / "remote.git"
    init_bare(remote)
    with _open(tmp_path, "a") as a, _open(tmp_path, "b") as b:
        for node in (a, b):
            add_remote(node.path, "origin", str(remote))
            node.append_sync("record", {"n": 1})
        assert sync(a, "origin", admit=None).outcome == "ok"
        report = sync(b, "origin", admit=None)
        assert report.outcome == "conflict"
        assert "two daemons write refs/heads/data; give each its own storage.node" in report.warnings[0]


def test_two_repositories_racing_push_release_exactly_one_wins(tmp_path: Path):
    remote = tmp_path / "remote.git"
    init_bare(remote)
    with _open(tmp_path, "a") as a, _open(tmp_path, "b", node="b") as b:
        for node in (a, b):
            add_remote(node.path, "origin", str(remote))
        _harness_release(a, b"v1\n")
        assert sync(a, "origin", admit=None).outcome == "ok"
        assert sync(b, "origin", admit=None).adopted == "v1"
        for node, text in ((a, b"a\n"), (b, b"b\n")):
            _harness_release(node, text)  # each made its own v2 on v1
        results: dict[str, str] = {}
        start = threading.Barrier(2)

        def push(node: Scenario, name: str) -> None:
            start.wait()
            tip = node.releases.tip()
            assert tip is not None
            results[name] = push_release(node, "origin", tip.commit, "v2").outcome

        threads = [threading.Thread(target=push, args=(node, name)) for node, name in ((a, "a"), (b, "b"))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(results.values()) == ["lease-lost", "ok"]
        winner = a if results["a"] == "ok" else b
        assert read_ref(remote, RELEASE_REF) == read_ref(winner.path, RELEASE_REF)
        assert read_ref(remote, "refs/tags/v2") == read_ref(winner.path, "refs/tags/v2")
        loser = b if winner is a else a
        lost = loser.releases.tip()
        assert lost is not None
        # diverged: the loser's v2 was never pushed, so the remote's chain wins there too, and
        # the loser's v2 is kept, as a commit and as a pending candidate on the winner's v2
        report = sync(loser, "origin", admit=None)
        assert (report.outcome, report.adopted) == ("ok", "v2")
        assert "waits for review as pending c1" in report.warnings[0]
        assert read_ref(loser.path, RELEASE_REF) == read_ref(remote, RELEASE_REF)
        assert read_ref(loser.path, "refs/tags/v2") == read_ref(remote, "refs/tags/v2")
        assert read_ref(loser.path, f"refs/reef/superseded/v2-{lost.commit[:12]}") == lost.commit
        (pending,) = loser.releases.pending()
        candidate = loser.releases.candidate(pending)
        assert candidate.tree == lost.tree and candidate.base == read_ref(remote, RELEASE_REF)
        assert candidate.record["superseded"] == {"release": "v2", "commit": lost.commit, "by": "v2"}
        git("--git-dir", str(loser.path), "fsck", "--no-dangling")


def _publish(scenario: Scenario, text: bytes):
    tree = build_tree(scenario.handle.repo, {"AGENTS.md": text})
    tip = scenario.releases.tip()
    return scenario.releases.publish(tree, expected=tip.commit if tip else None, operation="evolve")


def test_publishing_pushes_first_and_the_loser_adopts_the_winners_release(tmp_path: Path):
    remote = tmp_path / "remote.git"
    init_bare(remote)
    a, b = _open(tmp_path, "a", node="a"), _open(tmp_path, "b", node="b")
    try:
        for scenario in (a, b):
            add_remote(scenario.path, "origin", str(remote))
        _publish(a, b"v1\n")
        assert sync(a, "origin", admit=None).outcome == "ok" and sync(b, "origin", admit=None).adopted == "v1"
        adopted: list[str] = []
        a.releases.publisher = RemotePublisher(a, "origin", admit=None)
        b.releases.publisher = RemotePublisher(b, "origin", on_adopt=adopted.append, admit=None)
        assert _publish(a, b"a's change\n").name == "v2"
        assert (
            git("--git-dir", str(remote), "rev-parse", "v2^{commit}").stdout.strip()
            == a.releases.tip().commit
        )
        with pytest.raises(ConflictError, match="moved on origin \\(now v2\\)"):
            _publish(b, b"b's change\n")  # built on v1: the remote's v2 came first
        assert adopted == ["v2"] and b.releases.tip().commit == a.releases.tip().commit
        retried = _publish(b, b"b's change\n")  # rebuilt on the new tip: the next number
        assert retried.name == "v3"
        chain = git("--git-dir", str(remote), "log", "--format=%s", "--first-parent", "release").stdout
        assert chain.split("\n")[:3] == ["v3 evolve", "v2 evolve", "v1 evolve"]
        for n in (1, 2, 3):  # every tag on the remote at its place in one linear chain
            count = git("--git-dir", str(remote), "rev-list", "--count", f"v{n}^{{commit}}").stdout
            assert int(count) == n
        assert not git("--git-dir", str(remote), "rev-list", "--min-parents=2", "release").stdout
    finally:
        a.close()
        b.close()


def test_publishing_while_the_remote_is_down_is_local_and_pushed_by_the_next_sync(tmp_path: Path):
    server = GitHttpServer(tmp_path / "srv")
    init_bare(tmp_path / "srv" / "s.git")
    server.start()
    try:
        with _open(tmp_path, "a") as scenario:
            add_remote(scenario.path, "origin", server.url("s.git"))
            scenario.releases.publisher = RemotePublisher(scenario, "origin", timeout=30, admit=None)
            assert _publish(scenario, b"one\n").name == "v1"  # pushed
            server.stop()
            assert _publish(scenario, b"two\n").name == "v2"  # the remote is down: local
            assert scenario.releases.publisher.last.outcome == "unreachable"
            status = remote_status(scenario, get_remote(scenario.path, "origin"))
            assert status["unpushed_releases"] == 1
            server.start()
            assert sync(scenario, "origin", admit=None).outcome == "ok"
            tags = git("--git-dir", str(tmp_path / "srv" / "s.git"), "tag").stdout.split()
            assert tags == ["v1", "v2"]
    finally:
        server.stop()


def test_a_release_made_while_the_remote_was_away_gives_way_to_the_one_published_there(tmp_path: Path):
    remote = tmp_path / "remote.git"
    init_bare(remote)
    a, b = _open(tmp_path, "a", node="a"), _open(tmp_path, "b", node="b")
    try:
        for scenario in (a, b):
            add_remote(scenario.path, "origin", str(remote))
            scenario.releases.publisher = RemotePublisher(scenario, "origin", admit=None)
        _publish(a, b"v1\n")
        assert sync(b, "origin", admit=None).adopted == "v1"
        remote.rename(tmp_path / "away.git")  # a cannot reach it
        offline = _publish(a, b"a, offline\n")
        assert a.releases.publisher.last.outcome == "unreachable" and offline.name == "v2"
        (tmp_path / "away.git").rename(remote)
        assert _publish(b, b"b\n").name == "v2"  # pushed: origin's v2
        with pytest.raises(ConflictError, match="now v2"):
            _publish(a, b"a, back\n")  # the lease fails: a takes origin's chain
        assert a.releases.tip().commit == b.releases.tip().commit
        assert [a.releases.candidate(n).tree for n in a.releases.pending()] == [offline.tree]
        assert _publish(a, b"a, back\n").name == "v3"
        assert sync(b, "origin", admit=None).adopted == "v3"
        tags = git(
            "--git-dir", str(remote), "for-each-ref", "--format=%(refname:short) %(*objectname)", "refs/tags"
        )
        assert len(tags.stdout.splitlines()) == 3
    finally:
        a.close()
        b.close()


def _remote_tags(remote: Path) -> dict[str, str]:
    """The remote's tags and the commit each names."""
    listed = git(
        "--git-dir", str(remote), "for-each-ref", "--format=%(refname:short) %(*objectname)", "refs/tags"
    )
    return dict(line.split(" ") for line in listed.stdout.splitlines())


def _chain(remote: Path) -> list[str]:
    """The remote's release chain, oldest first (commits)."""
    return git("--git-dir", str(remote), "rev-list", "--reverse", "--first-parent", "release").stdout.split()


def test_a_release_made_while_the_remote_was_away_reaches_it_with_its_tag(tmp_path: Path):
    """Issue 29 (1): v1 pushed, v2 while the remote was away, v3 with it back: v2's tag went
    nowhere, and no later sync added it."""
    remote = tmp_path / "remote.git"
    init_bare(remote)
    with _open(tmp_path, "a", node="a") as a:
        add_remote(a.path, "origin", str(remote))
        a.releases.publisher = RemotePublisher(a, "origin", admit=None)
        _publish(a, b"one\n")
        remote.rename(tmp_path / "away.git")
        _publish(a, b"two\n")
        assert a.releases.publisher.last.outcome == "unreachable"
        (tmp_path / "away.git").rename(remote)
        _publish(a, b"three\n")  # pushed with v2's tag: a fast-forward from v1 to v3
        tags = _remote_tags(remote)
        assert sorted(tags) == ["v1", "v2", "v3"] and [tags[f"v{n}"] for n in (1, 2, 3)] == _chain(remote)
        # a tag lost on the remote (or a publish that died between push and tag) is pushed by a sync
        git("--git-dir", str(remote), "tag", "-d", "v2")
        assert sync(a, "origin", admit=None).outcome == "ok"
        assert sorted(_remote_tags(remote)) == ["v1", "v2", "v3"]
        assert read_ref(remote, "refs/tags/v2") == read_ref(a.path, "refs/tags/v2")


def test_a_tag_the_remote_holds_for_another_commit_is_a_conflict_never_forced(tmp_path: Path):
    remote = tmp_path / "remote.git"
    init_bare(remote)
    with _open(tmp_path, "a", node="a") as a:
        add_remote(a.path, "origin", str(remote))
        _publish(a, b"one\n")
        _publish(a, b"two\n")
        assert sync(a, "origin", admit=None).outcome == "ok"
        v1 = _chain(remote)[0]
        git("--git-dir", str(remote), "tag", "-f", "v2", v1)  # someone moved v2 there by hand
        moved = read_ref(remote, "refs/tags/v2")
        report = sync(a, "origin", admit=None)
        assert report.outcome == "conflict"
        assert "tag(s) v2 for other commits" in report.warnings[0]
        assert read_ref(remote, "refs/tags/v2") == moved  # never forced back


def test_a_node_that_fetched_a_rival_v2_never_pushes_its_v3_over_it(tmp_path: Path):
    """Issue 29 (3): the lease was on the tracking ref, so a v3 built on this node's own v2 was
    forced over the remote's v2 by another node: two releases under one number."""
    remote = tmp_path / "remote.git"
    init_bare(remote)
    a, b = _open(tmp_path, "a", node="a"), _open(tmp_path, "b", node="b")
    try:
        for scenario in (a, b):
            add_remote(scenario.path, "origin", str(remote))
            scenario.releases.publisher = RemotePublisher(scenario, "origin", admit=None)
        _publish(a, b"v1\n")
        assert sync(b, "origin", admit=None).adopted == "v1"
        remote.rename(tmp_path / "away.git")
        offline = _publish(a, b"a's v2, offline\n")
        (tmp_path / "away.git").rename(remote)
        theirs = _publish(b, b"b's v2\n")  # pushed: origin's v2
        git("-C", str(a.path), "fetch", "-q", "origin")  # a sync's first step, before its supersede
        with pytest.raises(ConflictError, match="now v2"):
            _publish(a, b"a's v3\n")  # built on a's own v2: not a fast-forward of origin's chain
        assert _chain(remote)[-1] == theirs.commit and _remote_tags(remote)["v2"] == theirs.commit
        assert "v3" not in _remote_tags(remote)
        assert a.releases.tip().commit == theirs.commit  # a took origin's chain
        assert [a.releases.candidate(n).tree for n in a.releases.pending()] == [offline.tree]
        assert _publish(a, b"a's v3\n").name == "v3"  # rebuilt on origin's v2, pushed
        tags = _remote_tags(remote)
        assert [tags[f"v{n}"] for n in (1, 2, 3)] == _chain(remote)
    finally:
        a.close()
        b.close()
