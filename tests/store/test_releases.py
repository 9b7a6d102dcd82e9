"""The release chain: compare-and-swap publishing, tags, rollback, candidates, pending."""

from __future__ import annotations

import pygit2
import pytest

from reef_core.errors import ConflictError, InvalidInput, NotFound
from reef_core.store import ReleaseChain, build_tree
from reef_core.store.repo import RepoHandle
from tests.conftest import git


def _tree(scenario, files):
    return build_tree(scenario.handle.repo, {k: v.encode() for k, v in files.items()})


def test_publish_builds_a_linear_tagged_chain(scenario):
    chain = scenario.releases
    v1 = chain.publish(_tree(scenario, {"rules/a.md": "A"}), expected=None, operation="creation")
    v2 = chain.publish(
        _tree(scenario, {"rules/a.md": "A2", "skills/t/SKILL.md": "S"}),
        expected=v1.commit,
        operation="evolve",
        ask="reproduce bugs\nwith a failing test",
        verdict="selected",
    )
    assert (v1.number, v2.number) == (1, 2)
    assert [r.name for r in chain] == ["v2", "v1"]
    assert chain.get("v2") == v2 and chain.get(1) == v1
    assert v2.ask == "reproduce bugs\nwith a failing test"
    path = str(scenario.path)
    assert git("-C", path, "rev-parse", "v2^{commit}").stdout.strip() == v2.commit
    assert git("-C", path, "cat-file", "-t", "v1").stdout.strip() == "tag"  # annotated
    tag = git("-C", path, "cat-file", "-p", "v2").stdout
    assert "ask: reproduce bugs" in tag and "verdict: selected" in tag and "Reef-Operation: evolve" in tag
    diff = git("-C", path, "diff", "--stat", "v1", "v2").stdout
    assert "rules/a.md" in diff and "skills/t/SKILL.md" in diff
    assert git("-C", path, "log", "--format=%s", "release").stdout.splitlines() == [
        'v2 evolve: "reproduce bugs with a failing test"',
        "v1 creation",
    ]
    git("-C", path, "fsck", "--strict", "--no-dangling")


def test_a_stale_expected_tip_is_a_conflict_and_writes_nothing(scenario):
    chain = scenario.releases
    v1 = chain.publish(_tree(scenario, {"a": "1"}), expected=None, operation="creation")
    chain.publish(_tree(scenario, {"a": "2"}), expected=v1.commit, operation="evolve")
    with pytest.raises(ConflictError):
        chain.publish(_tree(scenario, {"a": "3"}), expected=v1.commit, operation="evolve")
    with pytest.raises(ConflictError):
        chain.publish(_tree(scenario, {"a": "3"}), expected=None, operation="creation")
    assert [r.number for r in chain] == [2, 1]
    assert git("-C", str(scenario.path), "tag").stdout.split() == ["v1", "v2"]


def test_rollback_publishes_old_content_as_a_new_release(scenario):
    chain = scenario.releases
    v1 = chain.publish(_tree(scenario, {"a": "1"}), expected=None, operation="creation")
    v2 = chain.publish(_tree(scenario, {"a": "2"}), expected=v1.commit, operation="evolve")
    v3 = chain.rollback("v1", expected=v2.commit)
    assert v3.number == 3 and v3.operation == "rollback" and v3.source == "v1"
    assert v3.tree == v1.tree
    assert chain.files(v3) == {"a": b"1"}
    assert [r.number for r in chain] == [3, 2, 1]  # history kept, nothing rewritten
    with pytest.raises(NotFound):
        chain.rollback("v9", expected=v3.commit)
    with pytest.raises(InvalidInput):
        chain.rollback("latest", expected=v3.commit)


def test_a_release_published_with_when_keeps_that_moment(scenario):
    """A migrated release keeps the time it was first published, on its commit and its tag."""
    chain = scenario.releases
    v1 = chain.publish(
        _tree(scenario, {"rules/a.md": "A"}), expected=None, operation="creation", when=1_700_000_000
    )
    assert v1.created_at == 1_700_000_000
    path = str(scenario.path)
    assert git("-C", path, "log", "-1", "--format=%ct %at", "release").stdout.split() == ["1700000000"] * 2
    assert "> 1700000000 +0000" in git("-C", path, "cat-file", "-p", "v1").stdout


def test_missing_tag_after_a_crash_is_repaired(scenario):
    chain = scenario.releases
    v1 = chain.publish(_tree(scenario, {"a": "1"}), expected=None, operation="creation")
    v2 = chain.publish(_tree(scenario, {"a": "2"}), expected=v1.commit, operation="evolve", ask="x")
    scenario.handle.repo.references.delete("refs/tags/v2")  # as if killed between ref and tag
    assert chain.get("v2") == v2  # still found by walking the chain
    assert chain.repair_tags() == [2]
    assert git("-C", str(scenario.path), "rev-parse", "v2^{commit}").stdout.strip() == v2.commit


def test_candidates_pending_promote_and_reject(scenario):
    chain = scenario.releases
    v1 = chain.publish(_tree(scenario, {"a": "1"}), expected=None, operation="creation")
    c1 = chain.create_candidate(
        _tree(scenario, {"a": "1", "extensions/x.ts": "export default 1"}),
        base=v1,
        verdict="selected",
        ask="add an extension",
        record={"design": "one extension", "checks": {"health": "pass"}},
    )
    c2 = chain.create_candidate(
        _tree(scenario, {"a": "junk"}), base=v1, verdict="rejected: reviewer", ask="junk"
    )
    assert (c1.step, c2.step) == (1, 2)
    assert c1.record["checks"]["health"] == "pass" and c1.base == v1.commit
    path = str(scenario.path)
    assert (
        "extensions/x.ts"
        in git("-C", path, "diff", "--name-only", "refs/reef/candidates/1^", "refs/reef/candidates/1").stdout
    )

    chain.mark_pending(1)
    with pytest.raises(ConflictError):
        chain.mark_pending(1)
    assert chain.pending() == [1]
    v2 = chain.promote(1, expected=v1.commit)
    assert v2.operation == "promote" and v2.tree == c1.tree and v2.source == "candidate 1"
    assert chain.pending() == []
    with pytest.raises(NotFound):
        chain.promote(1, expected=v2.commit)

    chain.mark_pending(2)
    chain.reject(2)
    assert chain.pending() == [] and chain.rejected() == [2]
    assert [r.number for r in chain] == [2, 1]
    git("-C", path, "fsck", "--strict", "--no-dangling")


def test_promote_records_who_approved_and_when_where_git_shows_it(scenario):
    chain = scenario.releases
    v1 = chain.publish(_tree(scenario, {"a": "1"}), expected=None, operation="creation")
    c = chain.create_candidate(
        _tree(scenario, {"extensions/x.ts": "export default 1"}), base=v1, verdict="pending"
    )
    chain.mark_pending(c.step)
    for bad in ("", "   ", "alice\nReef-Release: 9", "x" * 201, 7):
        with pytest.raises(InvalidInput, match="approved_by must name who approved") as caught:
            chain.promote(c.step, expected=v1.commit, approved_by=bad)  # type: ignore[arg-type]
        assert caught.value.field == "approved_by"
    assert chain.pending() == [c.step] and [r.name for r in chain] == ["v1"]  # nothing written

    v2 = chain.promote(c.step, expected=v1.commit, approved_by="  alice via reef review ")
    assert v2.approved_by == "alice via reef review"
    commit = git("-C", str(scenario.path), "show", "-s", "--format=%B%n%ct", "release").stdout
    assert "Reef-Approved-By: alice via reef review" in commit
    at = commit.split("Reef-Approved-At: ")[1].split()[0]
    assert v2.approved_at == int(commit.split()[-1]) == v2.created_at  # the moment it was published
    assert at.endswith("Z") and "T" in at
    tag = git("-C", str(scenario.path), "cat-file", "-p", "v2").stdout
    assert f"approved by alice via reef review at {at}" in tag
    assert chain.get("v2") == v2 and chain.tip() == v2
    assert v1.approved_by is None and v1.approved_at is None


def test_promote_against_a_moved_chain_conflicts_and_keeps_it_pending(scenario):
    chain = scenario.releases
    v1 = chain.publish(_tree(scenario, {"a": "1"}), expected=None, operation="creation")
    c = chain.create_candidate(_tree(scenario, {"a": "c"}), base=v1, verdict="selected")
    chain.mark_pending(c.step)
    chain.publish(_tree(scenario, {"a": "2"}), expected=v1.commit, operation="evolve")
    with pytest.raises(ConflictError):
        chain.promote(c.step, expected=v1.commit)
    assert chain.pending() == [c.step]


def test_candidate_numbers_are_never_reused(scenario):
    chain = scenario.releases
    repo = scenario.handle.repo
    tree = _tree(scenario, {"a": "1"})
    first = chain.create_candidate(tree, base=None, verdict="selected")
    # another worker grabbed the next number between our look and our write
    repo.references.create("refs/reef/candidates/2", pygit2.Oid(hex=first.commit))
    chain._next_step = lambda: 2  # type: ignore[method-assign]
    second = chain.create_candidate(tree, base=None, verdict="selected")
    assert second.step == 3


def test_a_candidate_or_release_of_a_tree_that_does_not_exist_is_refused(scenario):
    chain = scenario.releases
    missing = "0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(InvalidInput, match="not a tree"):
        chain.create_candidate(missing, base=None, verdict="selected")
    with pytest.raises(InvalidInput, match="not a tree"):
        chain.publish(missing, expected=None, operation="evolve")
    assert chain.candidates() == [] and chain.tip() is None


def test_the_tip_follows_moves_made_elsewhere_by_another_chain_or_by_git(scenario):
    served = scenario.releases
    assert served.tip() is None
    elsewhere = ReleaseChain(RepoHandle(scenario.path))  # as another process would hold it
    v1 = elsewhere.publish(_tree(scenario, {"rules/a.md": "A"}), expected=None, operation="creation")
    assert served.tip() == v1
    v2 = elsewhere.publish(_tree(scenario, {"rules/a.md": "B"}), expected=v1.commit, operation="evolve")
    assert served.tip() == v2 and served.tip() == v2  # read, then remembered
    git("--git-dir", str(scenario.path), "update-ref", "refs/heads/release", v1.commit)
    assert served.tip() == v1
    git("--git-dir", str(scenario.path), "pack-refs", "--all")  # now only in packed-refs
    assert served.tip() == v1
