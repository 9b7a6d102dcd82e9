"""Issue 44 (4) under the sync's faults: a release held for a person's approval keeps the chain
one chain (never two releases under one number), and a sync that died half way through holding
one, run again, holds it once.  Two real nodes on one bare file remote, vetted by the daemon's
own ``admit``."""

from __future__ import annotations

from pathlib import Path

from reef_core.release.adoption import admit
from reef_core.store import RELEASE_REF, Scenario, Store, StoreOptions, build_tree
from reef_core.store.remotes import add_remote
from reef_core.store.repo import init_bare, read_ref
from reef_core.store.sync import sync
from tests.conftest import git

CODE = b"export default function (pi) {}\n"


def _open(tmp_path: Path, node: str) -> Scenario:
    scenario = Store(tmp_path / node, StoreOptions(pack_every=0)).open("s", create=True, node=node)
    add_remote(scenario.path, "origin", str(tmp_path / "remote.git"))
    return scenario


def _publish(scenario: Scenario, files: dict[str, bytes]) -> str:
    tree = build_tree(scenario.handle.repo, files)
    tip = scenario.releases.tip()
    return scenario.releases.publish(tree, expected=tip.commit if tip else None, operation="evolve").commit


def test_a_node_whose_release_diverged_from_a_held_one_serves_the_fork_not_a_second_v2(tmp_path: Path):
    init_bare(tmp_path / "remote.git")
    with _open(tmp_path, "a") as a, _open(tmp_path, "b") as b:
        v1 = _publish(a, {"rules/style.md": b"Be brief.\n"})
        assert sync(a, "origin", admit=admit).outcome == "ok"
        assert sync(b, "origin", admit=admit).adopted == "v1"
        theirs = _publish(a, {"rules/style.md": b"Be brief.\n", "extensions/x.ts": CODE})
        assert sync(a, "origin", admit=admit).outcome == "ok"  # a's v2 (code) is on the remote
        mine = _publish(b, {"rules/style.md": b"Be terse.\n"})  # b's own v2, never pushed
        report = sync(b, "origin", admit=admit)
        # b cannot serve a's v2 (nobody b trusts approved its code), and may not keep its own v2
        # beside it: it serves v1, where the chains forked, and both v2s wait for a person
        assert read_ref(b.path, RELEASE_REF) == v1 and report.held == ["v2 as c1"]
        assert report.adopted == "v1" and any("where the two chains forked" in w for w in report.warnings)
        assert read_ref(b.path, f"refs/reef/superseded/v2-{mine[:12]}") == mine
        held = {c.step: c.record for c in b.releases.candidates()}
        assert held[1]["adopted"]["commit"] == theirs and held[2]["superseded"]["commit"] == mine
        assert sorted(b.releases.pending()) == [1, 2]
        assert read_ref(b.path, "refs/tags/v2") is None  # no v2 here at all
        again = sync(b, "origin", admit=admit)  # held again, the same candidate
        assert again.held == ["v2 as c1"] and len(b.releases.candidates()) == 2
        # a person here approves a's v2: b moves to that very commit
        approved = b.releases.promote(1, expected=v1, approved_by="alice")
        assert approved.commit == theirs and read_ref(b.path, RELEASE_REF) == theirs
        assert sync(b, "origin", admit=admit).outcome == "ok"
        assert (
            git("--git-dir", str(tmp_path / "remote.git"), "rev-parse", "v2^{commit}").stdout.strip()
            == theirs
        )
        git("--git-dir", str(b.path), "fsck", "--no-dangling")


def test_a_sync_that_died_between_keeping_a_held_release_and_marking_it_pending_holds_it_once(
    tmp_path: Path,
):
    init_bare(tmp_path / "remote.git")
    with _open(tmp_path, "a") as a, _open(tmp_path, "b") as b:
        _publish(a, {"rules/style.md": b"Be brief.\n"})
        theirs = _publish(a, {"rules/style.md": b"Be brief.\n", "extensions/x.ts": CODE})
        assert sync(a, "origin", admit=None).outcome == "ok"
        # what a sync of b killed after making the held release's candidate leaves behind
        git("--git-dir", str(b.path), "fetch", "-q", "origin", "+refs/heads/*:refs/remotes/origin/heads/*")
        parent = git("--git-dir", str(b.path), "rev-parse", f"{theirs}^").stdout.strip()
        b.releases.create_candidate(
            b.releases.release_at(theirs).tree,
            base=b.releases.release_at(parent),
            verdict="pending",
            record={"adopted": {"remote": "origin", "release": "v2", "commit": theirs}},
        )
        assert b.releases.pending() == []
        report = sync(b, "origin", admit=admit)
        assert report.adopted == "v1" and report.held == ["v2 as c1"]
        assert b.releases.pending() == [1] and len(b.releases.candidates()) == 1
