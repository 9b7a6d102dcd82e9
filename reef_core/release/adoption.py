"""Releases from a remote meet the rules local ones do: the store asks (``reef_core.store.adopt``
vets each release a remote's chain brings, oldest first, before the chain moves), this module
answers with :func:`admit`.

A release from a remote is

* **refused** (never served; the chain stops before it) when its files fail the screens a local
  release passes (:mod:`reef_core.release.screens`: credentials, instruction overrides, chat
  template tokens), or when it is not a well-formed harness tree (:func:`tree_problems`: any
  file under a harness kind's folder makes the whole tree a harness tree, held to
  :class:`~reef_core.harness.tree.HarnessTree`); a tree with none of those folders is another
  recipe's artifact (weights), screened only;
* **held as pending** when, against the release before it, it changes what runs code
  (:func:`~reef_core.harness.tree.approval_changes`, the rule a local step is held by:
  extensions, and config keys that run programs) and nobody this node trusts approved it;
* **served** otherwise.

Trust is explicit, one of: the remote is marked trusted (``reef remote add --trusted``, or
``git config remote.<name>.reefTrusted true`` in the scenario repository); a person approved
that very commit here (``reef promote`` of the pending step); or a signature by a key the
scenario's allowed signers list (``reef_core.store.approvals``: a signed ``reef-approved/…`` tag
on the remote naming the release commit, or a signed release commit).  What a release's own
trailers say (``Reef-Approved-By``) is never trusted: any node can write them.
"""

from __future__ import annotations

from collections.abc import Mapping

from reef_core.harness.tree import KINDS, HarnessTree, TreeError, approval_changes
from reef_core.release.screens import screen_files
from reef_core.store import Release, Scenario
from reef_core.store.approvals import approval_here, signed_approval
from reef_core.store.remotes import Remote
from reef_core.store.sync import Admission

__all__ = ["admit", "harness_folders", "tree_problems"]


def harness_folders() -> tuple[str, ...]:
    """The folders of a harness tree (``skills/``, ``rules/``, ``extensions/``, …)."""
    return tuple(f"{kind}s/" for kind in KINDS)


def tree_problems(files: Mapping[str, bytes]) -> list[str]:
    """Why ``files`` is not a harness tree fit to serve, one line each (empty: it is one).  A
    tree with no harness folder is another recipe's artifact (weights), which no harness
    writes out: nothing here to validate (:func:`admit` screens one from a remote)."""
    if not _is_harness(files):
        return []
    try:
        tree = HarnessTree.from_files(files)
    except TreeError as exc:
        return [exc.message]
    return tree.problems()


def _is_harness(files: Mapping[str, bytes]) -> bool:
    return any(path.startswith(harness_folders()) for path in files)


def _tree_or_none(files: Mapping[str, bytes]) -> HarnessTree | None:
    try:
        return HarnessTree.from_files(files)
    except TreeError:
        return None


def admit(scenario: Scenario, remote: Remote, base: Release | None, release: Release) -> Admission:
    """Whether ``release`` of ``remote``'s chain, built on ``base``, may be served here (see the
    module's docstring)."""
    chain = scenario.releases
    files = chain.files(release)
    hits = screen_files(files)
    if hits:
        found = "; ".join(f"{hit.description} in {hit.where}" for hit in hits[:3])
        return Admission(False, reason=f"fails the release screens ({found})")
    if not _is_harness(files):
        return Admission(True)  # another recipe's artifact (weights): no harness runs its files
    problems = tree_problems(files)
    if problems:
        return Admission(False, reason=f"is not a well-formed harness tree ({'; '.join(problems[:3])})")
    before = _tree_or_none(chain.files(base)) if base is not None else None
    changes = approval_changes(before, HarnessTree.from_files(files))
    if not changes:
        return Admission(True)
    if remote.trusted:
        return Admission(True)
    repo = scenario.handle.repo
    if approval_here(repo, release.commit) is not None:
        return Admission(True)
    if signed_approval(scenario.path, repo, remote.name, release.commit) is not None:
        return Admission(True)
    return Admission(
        False,
        pending=True,
        reason=f"changes code that runs ({', '.join(changes)}) and nobody this node trusts approved it",
    )
