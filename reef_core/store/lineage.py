"""What a sync compares, read from this repository and its tracking refs; nothing here moves a ref.

What a remote held at a ref when last fetched, which commits one tip of the release chain has
that another lacks (its first parents: the chain is linear), which of those releases carry
their tag here, the tree of a commit, the refs under some prefixes, and where this node's step
refs go on a remote (``refs/reef/nodes/<node>/`` when ``storage.node`` is set, since step
numbers are each repository's own counter).  ``adopt.py``, ``push.py``, ``sync.py`` and
``sync_state.py`` read through these.
"""

from __future__ import annotations

import pygit2

from reef_core.store.data import NODE_DATA_PREFIX
from reef_core.store.remotes import tracking_ref
from reef_core.store.repo import commit_at, read_ref
from reef_core.store.scenarios import ScenarioReader

__all__ = [
    "chain_tags",
    "fetched_ref",
    "is_ancestor",
    "new_commits",
    "node_of",
    "refs_under",
    "remote_step_ref",
    "tag_target",
    "tree_of",
]


def fetched_ref(scenario: ScenarioReader, remote: str, ref: str) -> str | None:
    """What ``remote`` held at ``ref`` when last fetched (its tracking ref's target), or None."""
    return read_ref(scenario.path, tracking_ref(remote, ref))


def node_of(data_ref: str) -> str:
    """The node whose data ref ``data_ref`` is ("" for ``refs/heads/data``)."""
    return data_ref[len(NODE_DATA_PREFIX) :] if data_ref.startswith(NODE_DATA_PREFIX) else ""


def remote_step_ref(ref: str, node: str) -> str:
    """Where a candidate, pending or rejected ref goes on the remote."""
    return f"refs/reef/nodes/{node}/{ref.removeprefix('refs/reef/')}" if node else ref


def refs_under(repo: pygit2.Repository, prefixes: tuple[str, ...]) -> dict[str, str]:
    """Every ref whose name starts with one of ``prefixes``, with its target."""
    found = {}
    for ref in repo.references.iterator():
        if ref.name.startswith(prefixes):
            found[ref.name] = str(ref.target)
    return found


def is_ancestor(repo: pygit2.Repository, old: str, new: str) -> bool:
    """``old`` is ``new`` or one of its ancestors."""
    return old == new or repo.descendant_of(new, old)


def new_commits(repo: pygit2.Repository, tip: str, known: str | None) -> list[str]:
    """First-parent commits from ``tip`` back to (not including) ``known``, newest first."""
    found = []
    commit: pygit2.Commit | None = commit_at(repo, tip)
    while commit is not None and str(commit.id) != known:
        found.append(str(commit.id))
        commit = commit.parents[0] if commit.parents else None
    return found


def tree_of(repo: pygit2.Repository, commit: str) -> str:
    return str(repo[commit].peel(pygit2.Commit).tree_id)


def tag_target(repo: pygit2.Repository, oid: str) -> str:
    """The commit a tag (object or ref target) names."""
    return str(repo[oid].peel(pygit2.Commit).id)


def chain_tags(
    scenario: ScenarioReader, tip: str, since: str | None, *, untagged: bool = False
) -> list[tuple[str, str]]:
    """``(vN, tag object)`` of each release after ``since`` up to ``tip``, oldest first (a
    release without a local tag is left out: ``repair_tags`` makes it), or with ``untagged``
    ``(vN, "")`` of those whose local tag is missing or names another commit."""
    repo = scenario.handle.repo
    tags = []
    for commit in reversed(new_commits(repo, tip, since)):
        name = scenario.releases.release_at(commit).name
        oid = read_ref(scenario.path, f"refs/tags/{name}")
        right = oid is not None and tag_target(repo, oid) == commit
        if untagged and not right:
            tags.append((name, ""))
        elif not untagged and right and oid is not None:
            tags.append((name, oid))
    return tags
