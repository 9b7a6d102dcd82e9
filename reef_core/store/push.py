"""Giving to a remote: LFS objects, this node's refs, and the release chain, never forced.

Steps 3 to 5 of a sync (``sync.py`` says the whole order), and the publish path:

* :func:`_push_lfs`: the LFS objects of release and candidate trees the remote lacks;
* :func:`_push_refs`: the node's own data ref (never forced) and its step refs (candidates,
  pending, rejected; under ``refs/reef/nodes/<node>/`` with ``storage.node`` set);
* :func:`_push_chain`: the chain when the local one is ahead, and every tag of the shared chain
  the remote lacks; a tag the remote holds for another commit is a conflict, reported and left
  alone;
* :class:`RemotePublisher` (the chain's ``publisher``): each new release goes to the remote
  *before* the local chain moves, leased on the remote's chain as last fetched
  (:func:`push_release`); a lost lease adopts the remote's chain (``adopt.py``) and fails the
  publish, so every ``vN`` is one release everywhere.

The chain and its tags always go in one atomic push (:func:`_chain_push`): the remote takes
the chain only as a fast-forward and a tag only where it has none, all or nothing, so it never
keeps a release without its tag, and a chain or a tag another node pushed there is never
overwritten.  The steps keep their leading underscore: they are the sync's own, and under
these names the fault model (``tests/store/chain_model.py``) kills a sync or a publish on
entering or leaving one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2

from reef_core.errors import ConflictError, StoreError
from reef_core.store.adopt import Admit, _adopt_release, _fetch, _supersede
from reef_core.store.installs import INSTALLED_PREFIX
from reef_core.store.lfs import lfs_object_path, lfs_pointers
from reef_core.store.lineage import (
    chain_tags,
    fetched_ref,
    is_ancestor,
    new_commits,
    node_of,
    refs_under,
    remote_step_ref,
    tag_target,
    tree_of,
)
from reef_core.store.releases import CANDIDATES_PREFIX, PENDING_PREFIX, REJECTED_PREFIX, RELEASE_REF, Release
from reef_core.store.remotes import (
    DEFAULT_TIMEOUT_S,
    GitResult,
    Outcome,
    Progress,
    Remote,
    classify,
    get_remote,
    lfs_push,
    run_git,
    tracking_ref,
)
from reef_core.store.repo import read_ref
from reef_core.store.scenarios import Scenario, ScenarioReader
from reef_core.store.sync_state import SyncReport

__all__ = [
    "ReleasePush",
    "RemotePublisher",
    "push_release",
]

_STEP_PREFIXES = (CANDIDATES_PREFIX, PENDING_PREFIX, REJECTED_PREFIX)


@dataclass(frozen=True)
class ReleasePush:
    """What :func:`push_release` came to: ``ok``, ``lease-lost`` (the remote's chain or tag moved
    first: fetch, rebuild, retry) or ``unreachable`` (keep the release local, push it later);
    ``lfs`` as in :class:`~reef_core.store.sync_state.SyncReport`."""

    outcome: str
    message: str = ""
    lfs: str = "none"


def _push_lfs(
    scenario: Scenario, remote: Remote, report: SyncReport, state: dict[str, Any], timeout: float
) -> None:
    """The LFS objects of release and candidate trees the remote does not have yet (all of them
    after a sync whose LFS push did not go through)."""
    repo = scenario.handle.repo
    everything = state.get("lfs") not in ("ok", "none")
    trees = []
    mine = read_ref(scenario.path, RELEASE_REF)
    theirs = fetched_ref(scenario, remote.name, RELEASE_REF)
    if mine is not None:
        known = None if everything or theirs is None or not is_ancestor(repo, theirs, mine) else theirs
        trees += [tree_of(repo, commit) for commit in new_commits(repo, mine, known)]
    node = node_of(scenario.data_ref)
    for ref, target in refs_under(repo, (CANDIDATES_PREFIX,)).items():
        if everything or fetched_ref(scenario, remote.name, remote_step_ref(ref, node)) != target:
            trees.append(tree_of(repo, target))
    pointers = lfs_pointers(repo, trees)
    present = [oid for oid in pointers if lfs_object_path(scenario.path, oid).exists()]
    if not present:
        report.lfs = state.get("lfs", "none")  # nothing to push: the last verdict stands
        return
    outcome = lfs_push(scenario.path, remote.name, present, timeout=timeout)
    if outcome.ok:
        report.lfs = "ok"
    elif outcome.kind == "no_lfs":
        report.lfs = "unsupported"
        report.warnings.append(
            f"checkpoints NOT pushed: {remote.name} has no git-lfs API "
            f"({remote.shown_url} answered 404 on info/lfs/objects/batch)"
        )
    else:
        report.lfs = "failed"
        report.warnings.append(f"checkpoints NOT pushed to {remote.name}: {outcome.describe()}")


def _push_refs(
    scenario: Scenario, remote: Remote, report: SyncReport, timeout: float, progress: Progress | None
) -> Outcome:
    """The own data ref and the step refs, if any differs from what the remote has."""
    repo = scenario.handle.repo
    node = node_of(scenario.data_ref)
    specs = []
    own = read_ref(scenario.path, scenario.data_ref)
    if own is not None and own != fetched_ref(scenario, remote.name, scenario.data_ref):
        specs.append(f"{scenario.data_ref}:{scenario.data_ref}")  # never forced
    local = refs_under(repo, _STEP_PREFIXES)
    remote_prefixes = tuple(tracking_ref(remote.name, remote_step_ref(p, node)) for p in _STEP_PREFIXES)
    tracked = refs_under(repo, remote_prefixes)
    wanted = {tracking_ref(remote.name, remote_step_ref(ref, node)): target for ref, target in local.items()}
    if wanted != tracked:
        specs += [f"{prefix}*:{remote_step_ref(prefix, node)}*" for prefix in _STEP_PREFIXES]
    for ref in refs_under(repo, (INSTALLED_PREFIX,)):  # named one by one: never pruned there
        if fetched_ref(scenario, remote.name, ref) is None:
            specs.append(f"{ref}:{ref}")
    if not specs:
        return Outcome("ok")
    arguments = ["push", "--porcelain", "--no-verify", "--prune"]
    if progress:
        arguments.append("--progress")
    result = run_git(scenario.path, [*arguments, remote.name, *specs], timeout=timeout, progress=progress)
    outcome = classify(result)
    for row in result.rows:
        report.pushed[row.destination] = row.summary
    if outcome.kind == "rejected" and any(
        row.rejected and row.destination == scenario.data_ref for row in result.rows
    ):
        report.warnings.append(
            f"{scenario.data_ref} on {remote.name} has records this node does not: two daemons write "
            f"{scenario.data_ref}; give each its own storage.node"
        )
    return outcome


def _missing_tags(
    scenario: Scenario, remote: Remote, tip: str, report: SyncReport
) -> tuple[list[tuple[str, str]], list[str]]:
    """The tags of the chain up to ``tip`` the remote lacks (to push), and those the remote
    holds for another commit (a conflict: reported, never forced)."""
    repo = scenario.handle.repo
    lacking, clashing = [], []
    for name, oid in chain_tags(scenario, tip, None):
        there = fetched_ref(scenario, remote.name, f"refs/tags/{name}")
        if there is None:
            lacking.append((name, oid))
        elif tag_target(repo, there) != tag_target(repo, oid):
            clashing.append(name)
    if clashing:
        report.warnings.append(
            f"{remote.name} has tag(s) {', '.join(clashing)} for other commits than this node's "
            "releases of those numbers: not forced (a person must decide which release is which)"
        )
    return lacking, clashing


def _push_chain(
    scenario: Scenario, remote: Remote, report: SyncReport, timeout: float, progress: Progress | None
) -> Outcome:
    """The release chain when ours is ahead of the remote's, and every tag of the shared chain
    the remote lacks (a release pushed while its tag was not: a publish that died between the
    two, or a tag lost on the remote).  A tag the remote holds for another commit is a
    conflict, never forced; the chain is pushed only as a fast-forward."""
    repo = scenario.handle.repo
    mine = read_ref(scenario.path, RELEASE_REF)
    theirs = fetched_ref(scenario, remote.name, RELEASE_REF)
    if mine is None:
        return Outcome("ok")
    if theirs is not None and theirs != mine and not is_ancestor(repo, theirs, mine):
        local = scenario.releases.release_at(mine).name
        if is_ancestor(repo, mine, theirs):
            return Outcome("ok")  # behind (its checkpoint could not be adopted): nothing to push
        there = scenario.releases.release_at(theirs).name
        report.warnings.append(
            f"the release chains diverged: this node is at {local}, {remote.name} at {there}; "
            "releases not pushed"
        )
        return Outcome(
            "rejected", "diverged", f"release chains diverged ({local} here, {there} on {remote.name})"
        )
    lacking, clashing = _missing_tags(scenario, remote, mine, report)
    if clashing:
        return Outcome("rejected", "tag", f"tag(s) {', '.join(clashing)} name other commits on {remote.name}")
    if mine == theirs and not lacking:
        return Outcome("ok")
    result = _chain_push(scenario.path, remote, mine, lacking, timeout, progress)
    for row in result.rows:
        report.pushed[row.destination] = row.summary
    return classify(result)


def _chain_push(
    path: Path,
    remote: Remote,
    commit: str,
    tags: list[tuple[str, str]],
    timeout: float,
    progress: Progress | None = None,
) -> GitResult:
    """One atomic push of the release chain's tip ``commit`` and ``tags``, never forced: the
    remote takes it only as a fast-forward of its chain, and only tags it does not hold (or
    holds for the same object), so a chain or tag that another node pushed there is never
    overwritten and the push is all or nothing."""
    arguments = ["push", "--atomic", "--porcelain", "--no-verify"]
    if progress:
        arguments.append("--progress")
    specs = [f"{commit}:{RELEASE_REF}", *(f"{oid}:refs/tags/{name}" for name, oid in tags)]
    return run_git(path, [*arguments, remote.name, *specs], timeout=timeout, progress=progress)


def push_release(
    scenario: ScenarioReader,
    remote: str,
    commit: str,
    tag: str,
    *,
    tag_oid: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> ReleasePush:
    """Push release ``commit`` with its tag ``tag`` (``"v7"``; the tag object ``tag_oid``, by
    default the local ``refs/tags/<tag>``) to ``remote`` in one atomic push, with the tags of
    the releases before it the remote lacks, as a fast-forward of the remote's chain (the
    push is never forced).

    ``lease-lost`` when the remote's chain, as last fetched, is not an ancestor of ``commit``
    (it holds releases this one was not built on), or when the remote refuses the push (its
    chain moved, or it holds one of the tags for another commit).  The LFS objects of the
    release's tree go first (a remote without a git-lfs API is noted in ``lfs``, not a
    failure).  Moves no local ref but the tracking refs git moves itself.
    """
    config = get_remote(scenario.path, remote)
    oid = tag_oid or read_ref(scenario.path, f"refs/tags/{tag}")
    if oid is None:
        raise StoreError(f"no tag {tag} to push with release {commit}")
    repo = scenario.handle.repo
    theirs = fetched_ref(scenario, config.name, RELEASE_REF)
    if theirs is not None and theirs != commit and not is_ancestor(repo, theirs, commit):
        there = scenario.releases.release_at(theirs).name
        return ReleasePush(
            "lease-lost", f"{config.name} holds {there}, which {tag} was not built on: not a fast-forward"
        )
    pointers = lfs_pointers(repo, [tree_of(repo, commit)])
    present = [p for p in pointers if lfs_object_path(scenario.path, p).exists()]
    lfs = "none"
    if present:
        pushed = lfs_push(scenario.path, config.name, present, timeout=timeout)
        lfs = {"ok": "ok", "no_lfs": "unsupported"}.get(pushed.kind, "failed")
        if pushed.kind in ("unreachable", "auth"):
            return ReleasePush("unreachable", f"{config.name} ({config.shown_url}): {pushed.describe()}", lfs)
    parent = repo[commit].peel(pygit2.Commit).parents
    earlier = chain_tags(scenario, str(parent[0].id), theirs) if parent else []
    outcome = classify(_chain_push(scenario.path, config, commit, [*earlier, (tag, oid)], timeout))
    if outcome.ok:
        return ReleasePush("ok", "", lfs)
    message = f"{config.name} ({config.shown_url}): {outcome.describe()}"
    if outcome.kind == "rejected":
        return ReleasePush("lease-lost", message, lfs)
    return ReleasePush("unreachable", message, lfs)


class RemotePublisher:
    """Publishing with a remote (``ReleaseChain.publisher``): each release is pushed to the
    remote, with its tag and a lease on the remote's chain, *before* the local chain moves.

    * pushed: the local chain follows (a fast-forward), so no node ever serves a ``vN`` the
      remote does not have.  The push carries the release's tag and those of the releases
      before it the remote lacks (made while it was away), and is never forced: the remote
      takes it only as a fast-forward of its chain, so a release is only ever published on
      top of the remote's chain, never beside it;
    * the lease was lost (another node published first, or the remote's chain as last
      fetched holds releases this one was not built on): the remote's chain is fetched and
      adopted here, and the publish fails with :class:`ConflictError`; the caller finds the
      tip moved and rebuilds its change on it (the recipe's ``rebase``) or records a conflict,
      as in a race between two publishers of one machine;
    * the remote cannot be reached: the release is published locally all the same, unpushed,
      and the next sync pushes it (``remote_status`` counts it meanwhile).

    Pushing first, not after the local swap, is what keeps one release per number everywhere
    without ever moving a published local release or tag back.  ``on_adopt`` is told the name
    of a release adopted after a lost lease (the daemon serves it).
    """

    def __init__(
        self,
        scenario: Scenario,
        remote: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        on_adopt: Callable[[str], None] | None = None,
        admit: Admit | None,
    ) -> None:
        self.scenario = scenario
        self.remote = get_remote(scenario.path, remote)
        self.timeout = timeout
        self.on_adopt = on_adopt
        self.admit = admit
        self.last: ReleasePush | None = None

    def __call__(self, release: Release, tag: str, expected: str | None) -> None:
        name = self.remote.name
        pushed = push_release(
            self.scenario, name, release.commit, release.name, tag_oid=tag, timeout=self.timeout
        )
        self.last = pushed
        if pushed.outcome != "lease-lost":
            return  # pushed, or unreachable: published here, pushed by a later sync
        report = SyncReport(scenario=self.scenario.name, remote=name, url=self.remote.shown_url)
        if _fetch(self.scenario, self.remote, self.timeout, None).ok:
            _adopt_release(self.scenario, self.remote, report, self.timeout, self.admit)
            _supersede(self.scenario, self.remote, report, self.timeout, self.admit)
        if report.adopted and self.on_adopt is not None:
            self.on_adopt(report.adopted)
        now = report.adopted or "a chain this node cannot follow yet"
        held = (
            f"; {', '.join(report.held)} from {name} waits here for a person's approval"
            if report.held
            else ""
        )
        raise ConflictError(
            f"the release chain moved on {name} (now {now}){held}; {release.name} was not published"
        )
