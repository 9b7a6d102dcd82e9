"""Taking from a remote: the fetch into tracking refs, and adopting from them by compare-and-swap.

Steps 1 and 2 of a sync (``sync.py`` says the whole order), and what a publish whose lease was
lost does before it gives up (``push.py``):

* :func:`_fetch`: everything the remote has, into ``refs/remotes/<r>/…`` only;
* :func:`_adopt_data`: other nodes' data refs, fast-forwarded, never the node's own;
* :func:`_adopt_release`: the remote's release chain, when the local one is an ancestor of it
  and the new tip's LFS objects could be fetched (else the node keeps serving what it can);
* :func:`_supersede`: the remote's chain, when the two diverged because this node published
  while the remote was away: the remote wins, and each release of this node it replaces is kept
  (under ``refs/reef/superseded/`` and as a pending candidate) before the chain moves;
* :func:`_adopt_tags`: the remote's tag objects for releases that lack a tag here, then every
  tag still missing, derived from the chain (``ReleaseChain.repair_tags``).

Releases from a remote meet the rules local ones do: with an :data:`Admit` (the daemon's and
the CLI's is ``reef_core.release.adoption.admit``; the store cannot tell what a release means),
each release the remote's chain holds beyond this node's is vetted oldest first, against the
one before it, before the chain moves.  The chain moves only as far as the last release
admitted (:func:`_admitted`); the first one held waits here as a pending candidate whose record
says where it came from (``{"adopted": {"remote", "release", "commit"}}``: :func:`_hold`, once
per commit), and one refused is only reported.  A person's ``reef promote`` of that candidate
moves the chain to the very commit (``ReleaseChain.promote``), so every ``vN`` stays one
release everywhere; a later sync that finds it admitted (signed, or the remote now trusted)
adopts it and clears its pending mark (:func:`_settle_held`).  With ``None`` for it every
release is taken as it is (the store's own tests); every caller passes one, so none can forget.

The steps keep their leading underscore: they are the sync's own, called by ``sync.py`` and
``push.py`` alone, and under these names the fault model (``tests/store/chain_model.py``)
kills a sync on entering or leaving one.  Each is safe to be killed anywhere and run again:
a held release's candidate is found again by its commit, and is marked pending after it is made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pygit2

from reef_core.errors import ConflictError
from reef_core.store.data import DATA_REF, NODE_DATA_PREFIX
from reef_core.store.lfs import lfs_object_path, lfs_pointers
from reef_core.store.lineage import (
    chain_tags,
    fetched_ref,
    is_ancestor,
    new_commits,
    refs_under,
    tag_target,
    tree_of,
)
from reef_core.store.packer import repack_lock
from reef_core.store.releases import (
    PENDING_PREFIX,
    RELEASE_REF,
    SUPERSEDED_PREFIX,
    Release,
    ReleaseChain,
    step_name,
)
from reef_core.store.remotes import Outcome, Progress, Remote, classify, lfs_fetch, run_git, tracking_ref
from reef_core.store.repo import create_ref_exclusive, move_ref, read_ref
from reef_core.store.scenarios import Scenario
from reef_core.store.sync_state import SyncReport

__all__ = ["Admission", "Admit"]  # the steps are sync.py's and push.py's (see above)


@dataclass(frozen=True)
class Admission:
    """Whether a release from a remote may be served here: ``serve``; else held as
    ``pending`` for a person (its change runs code nobody this node trusts approved), or
    refused (it fails the screens or is not a well-formed tree); ``reason`` says which, for a
    person."""

    serve: bool
    pending: bool = False
    reason: str = ""


#: vets one release of a remote's chain, against the release before it (None: the first):
#: ``admit(scenario, remote, base, release)``
Admit = Callable[[Scenario, Remote, Release | None, Release], Admission]


def _fetch(scenario: Scenario, remote: Remote, timeout: float, progress: Progress | None) -> Outcome:
    arguments = [
        "-c",
        "pack.writeReverseIndex=true",
        "-c",
        "transfer.unpackLimit=1",
        "fetch",
        "--progress" if progress else "-q",
        "--prune",
        "--no-write-fetch-head",
        remote.name,
    ]
    # the packer's lock (packer.py): a fetch that ran during a failed repack could lose its
    # tmp_pack_* to the packer's clean-up of git leftovers, so a fetch takes it too
    with repack_lock(scenario.path):
        result = run_git(scenario.path, arguments, timeout=timeout, progress=progress)
    scenario.handle.invalidate()  # new packs: every thread's repository rescans
    return classify(result)


def _adopt_data(scenario: Scenario, remote: Remote, report: SyncReport) -> None:
    """Other nodes' data refs, fast-forwarded to the remote's by compare-and-swap."""
    repo = scenario.handle.repo
    own = scenario.data_ref
    tracking = {tracking_ref(remote.name, DATA_REF): DATA_REF}
    prefix = tracking_ref(remote.name, NODE_DATA_PREFIX)
    for name in refs_under(repo, (prefix,)):
        tracking[name] = NODE_DATA_PREFIX + name[len(prefix) :]
    for source, local in tracking.items():
        theirs = read_ref(scenario.path, source)
        if local == own or theirs is None:
            continue  # never the node's own: it holds records the remote may not have yet
        mine = read_ref(scenario.path, local)
        if mine == theirs:
            continue
        if mine is not None and not repo.descendant_of(theirs, mine):
            report.warnings.append(f"{local} on {remote.name} is not a fast-forward of ours: left as it is")
            continue
        try:
            if mine is None:
                if not create_ref_exclusive(repo, local, pygit2.Oid(hex=theirs), f"sync from {remote.name}"):
                    continue
            else:
                move_ref(scenario.path, local, mine, theirs)
        except ConflictError:
            continue  # moved meanwhile (another sync): the next one looks again
        report.adopted_data.append(local)


def _admitted(
    scenario: Scenario,
    remote: Remote,
    report: SyncReport,
    admit: Admit | None,
    known: str | None,
    theirs: str,
) -> str | None:
    """The newest release of the remote's chain ``theirs`` past ``known`` that may be served
    here with every one before it (None: not even the first); the first held one waits as a
    pending candidate, the first refused one is reported (see the module's docstring)."""
    if admit is None:
        return theirs
    chain = scenario.releases
    base = chain.release_at(known) if known is not None else None
    last = None
    for commit in reversed(new_commits(scenario.handle.repo, theirs, known)):
        release = chain.release_at(commit)
        verdict = admit(scenario, remote, base, release)
        if verdict.serve:
            last, base = commit, release
            continue
        if verdict.pending:
            step = _hold(chain, release, base, remote.name, verdict.reason)
            report.held.append(f"{release.name} as {step_name(step)}")
            report.warnings.append(
                f"{release.name} on {remote.name} {verdict.reason}: not served here; it waits as pending "
                f"{step_name(step)} for a person (reef review, reef promote {step_name(step)})"
            )
        else:
            report.warnings.append(
                f"{release.name} on {remote.name} is refused: {verdict.reason}; "
                "the release served stays the one this node has"
            )
        break
    return last


def _hold(chain: ReleaseChain, release: Release, base: Release | None, remote: str, reason: str) -> int:
    """The candidate that keeps ``release`` (from ``remote``, built on ``base``) for a person:
    the one an earlier sync made (pending again unless a person rejected it), else a new one."""
    for candidate in chain.candidates():
        if (candidate.record.get("adopted") or {}).get("commit") == release.commit:
            step = int(candidate.step)
            if step not in chain.pending() and step not in chain.rejected():
                chain.mark_pending(step)  # an earlier sync died between the two
            return step
    record = {"adopted": {"remote": remote, "release": release.name, "commit": release.commit}}
    made = chain.create_candidate(
        release.tree,
        base=base,
        verdict=f"pending: {release.name} from {remote} {reason}",
        ask=release.ask,
        record=record,
    )
    chain.mark_pending(made.step)
    return int(made.step)


def _settle_held(scenario: Scenario) -> None:
    """Clear the pending mark of every held release the chain now holds (adopted since:
    approved by a signature, or from a remote marked trusted meanwhile)."""
    repo = scenario.handle.repo
    chain = scenario.releases
    tip = read_ref(scenario.path, RELEASE_REF)
    if tip is None:
        return
    for step in chain.pending():
        commit = (chain.candidate(step).record.get("adopted") or {}).get("commit")
        if isinstance(commit, str) and commit in repo and is_ancestor(repo, commit, tip):
            ref = repo.references.get(f"{PENDING_PREFIX}{step}")
            if ref is not None:
                ref.delete()


def _adopt_release(
    scenario: Scenario, remote: Remote, report: SyncReport, timeout: float, admit: Admit | None
) -> None:
    """The remote's release chain, when ours is an ancestor of it and its checkpoint fetched, as
    far as ``admit`` lets it (see the module's docstring)."""
    repo = scenario.handle.repo
    theirs = fetched_ref(scenario, remote.name, RELEASE_REF)
    with scenario.publish_lock:
        mine = read_ref(scenario.path, RELEASE_REF)
        if theirs is None or mine == theirs or (mine is not None and not is_ancestor(repo, mine, theirs)):
            return
        theirs = _admitted(scenario, remote, report, admit, mine, theirs)
        if theirs is None:
            return
        new = new_commits(repo, theirs, mine)
        tip_name = scenario.releases.release_at(theirs).name
        if _checkpoint_missing(scenario, remote, report, new, timeout, tip=tip_name):
            return
        try:
            if mine is None:
                if not create_ref_exclusive(
                    repo, RELEASE_REF, pygit2.Oid(hex=theirs), f"sync from {remote.name}"
                ):
                    return
            else:
                move_ref(scenario.path, RELEASE_REF, mine, theirs)
        except ConflictError:
            return  # a local publish won the chain meanwhile: the push below tells
        _adopt_tags(scenario, remote)
        _settle_held(scenario)
        report.adopted = tip_name


def _adopt_tags(scenario: Scenario, remote: Remote) -> None:
    """The remote's tag objects for releases of the local chain that lack a tag here (adopted
    from it, perhaps by a sync that died before their tags), so a later push of them is a
    no-op; then every release still without its tag, or with a tag naming another commit, gets
    one derived from the chain (``repair_tags``)."""
    repo = scenario.handle.repo
    tip = read_ref(scenario.path, RELEASE_REF)
    for name, _ in chain_tags(scenario, tip, None, untagged=True) if tip else []:
        theirs = fetched_ref(scenario, remote.name, f"refs/tags/{name}")
        release = scenario.releases.get(name)
        if theirs is not None and tag_target(repo, theirs) == release.commit:
            create_ref_exclusive(repo, f"refs/tags/{name}", pygit2.Oid(hex=theirs), "sync")
    scenario.releases.repair_tags()


def _checkpoint_missing(
    scenario: Scenario,
    remote: Remote,
    report: SyncReport,
    commits: list[str],
    timeout: float,
    *,
    tip: str,
    diverged: bool = False,
) -> bool:
    """Whether the newest of ``commits`` (releases on the remote, the newest named ``tip``)
    cannot be served here even after fetching its LFS objects; if so the report says so, and
    the chain is not adopted."""
    repo = scenario.handle.repo
    needed = lfs_pointers(repo, [tree_of(repo, commits[0])])
    missing = [oid for oid in needed if not lfs_object_path(scenario.path, oid).exists()]
    if not missing:
        return False
    fetched = lfs_fetch(scenario.path, remote.name, commits, timeout=timeout)
    if all(lfs_object_path(scenario.path, oid).exists() for oid in missing):
        return False
    why = "" if fetched.ok else f" ({fetched.describe()})"
    lead = "the release chains diverged and " if diverged else ""
    report.warnings.append(
        f"{lead}{tip} on {remote.name} lacks its checkpoint{why}: not adopted, "
        "the release served stays the one this node has"
    )
    return True


def _supersede(
    scenario: Scenario, remote: Remote, report: SyncReport, timeout: float, admit: Admit | None
) -> None:
    """Releases published here while the remote could not be reached, on a chain the remote
    moved past meanwhile (another node published): the remote's chain wins, so that every
    ``vN`` is one release everywhere.  This node's chain moves to the remote's (the one place a
    local release ref moves back: those releases were never pushed, so no other node or client
    of the remote knows them), its tags of those numbers become the remote's, and each
    superseded release is kept twice: its commit under ``refs/reef/superseded/``, and its
    content as a pending candidate on the new tip, for a person to review and promote.  The
    remote's chain wins only as far as ``admit`` lets it: when not even its first release past
    the fork may be served, this node keeps its own.
    """
    repo = scenario.handle.repo
    theirs = fetched_ref(scenario, remote.name, RELEASE_REF)
    with scenario.publish_lock:
        mine = read_ref(scenario.path, RELEASE_REF)
        if (
            theirs is None
            or mine is None
            or is_ancestor(repo, mine, theirs)
            or is_ancestor(repo, theirs, mine)
        ):
            return
        base = repo.merge_base(mine, theirs)
        known = None if base is None else str(base)
        admitted = _admitted(scenario, remote, report, admit, known, theirs)
        if admitted is None and known is None:
            # no release in common, and the remote's first one may not be served: this node keeps
            # its own chain, and the push reports the divergence until a person decides
            return
        # not even the remote's first release past the fork may be served: this node's own
        # releases past it still give way (never two releases under one number), and it serves
        # the fork's release until the held one is approved
        theirs = admitted or str(known)
        chain = scenario.releases
        ours = [chain.release_at(commit) for commit in reversed(new_commits(repo, mine, known))]
        new = new_commits(repo, theirs, known)
        tip = chain.release_at(theirs)
        if new and _checkpoint_missing(scenario, remote, report, new, timeout, tip=tip.name, diverged=True):
            return
        # each superseded release is kept (its commit, and a pending candidate) *before* the
        # chain moves, and tags are fixed after: a process killed anywhere in between loses
        # nothing, a sync that runs again finds what is done already, and repair_tags (at the
        # next open or sync) retags a chain moved under stale tags
        steps = []
        for release in ours:
            create_ref_exclusive(
                repo,
                f"{SUPERSEDED_PREFIX}{release.name}-{release.commit[:12]}",
                pygit2.Oid(hex=release.commit),
                "sync",
            )
            steps.append(step_name(_pending_for(chain, release, tip, remote.name)))
        try:
            move_ref(scenario.path, RELEASE_REF, mine, theirs)
        except ConflictError:
            return  # a local publish moved the chain meanwhile: the next sync looks again
        for release in ours:
            tag = f"refs/tags/{release.name}"
            held = repo.references.get(tag)
            if held is not None and str(held.peel(pygit2.Commit).id) == release.commit:
                held.delete()
        _adopt_tags(scenario, remote)
        _settle_held(scenario)
        report.adopted = tip.name
        names = ", ".join(release.name for release in ours)
        serves = f"{remote.name}'s chain" if new else f"{tip.name}, where the two chains forked"
        report.warnings.append(
            f"{names} were published here while {remote.name} could not be reached, and {remote.name} "
            f"moved on meanwhile: this node now serves {serves}; what {names} "
            f"held waits for review as pending {', '.join(steps)} (reef review, reef promote)"
        )


def _pending_for(chain: ReleaseChain, release: Release, tip: Release, remote: str) -> int:
    """The pending candidate that keeps a superseded ``release`` for review on ``tip``: the one
    an earlier (interrupted) sync made, else a new one; its step."""
    for candidate in chain.candidates():
        if (candidate.record.get("superseded") or {}).get("commit") == release.commit:
            return int(candidate.step)
    verdict = (
        f"pending: {release.name} was published here while {remote} could not be reached, "
        f"and {remote} moved to {tip.name} meanwhile"
    )
    record = {"superseded": {"release": release.name, "commit": release.commit, "by": tip.name}}
    made = chain.create_candidate(release.tree, base=tip, verdict=verdict, ask=release.ask, record=record)
    chain.mark_pending(made.step)
    return int(made.step)
