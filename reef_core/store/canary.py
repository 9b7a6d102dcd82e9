"""A scenario's canary, kept in git: ``refs/reef/canary``.

The ref points at a commit whose tree holds one file, ``canary.json``: the canary as the
learning side last wrote it (which candidate, against which release, its share of new
sessions, its bounds, its state and, once it ended, the decision).  Each change is a new commit
whose parent is the one before, moved by compare-and-swap like the release chain, so ``git log
refs/reef/canary`` is the canary's whole history and two writers (the learning worker and a
person's ``reef canary S stop``) can never both win.

What the canary *means* (arms, assignment, the sequential test) is not here: see
:mod:`reef_core.learning.canary`.  The counts are not here either: they are computed from the
data branch (the records say which release served each session), so a daemon killed
mid-canary resumes with the same arms, assignments and counts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pygit2

from reef_core.errors import StoreError
from reef_core.store.repo import RepoHandle, blob_at, commit_at, signature, swap_ref
from reef_core.store.trees import build_tree

__all__ = ["CANARY_FILE", "CANARY_REF", "CanaryRecord", "CanaryRef"]

CANARY_REF = "refs/reef/canary"
CANARY_FILE = "canary.json"


@dataclass(frozen=True)
class CanaryRecord:
    """The state document and the commit that holds it (what the next write must expect)."""

    state: dict[str, Any]
    commit: str


class CanaryRef:
    def __init__(self, handle: RepoHandle) -> None:
        self._handle = handle

    def read(self) -> CanaryRecord | None:
        """The canary as last written, or None when the scenario never had one."""
        repo = self._handle.repo
        ref = repo.references.get(CANARY_REF)
        if ref is None:
            return None
        commit = commit_at(repo, ref.target)
        return CanaryRecord(_state_of(repo, commit), str(commit.id))

    def write(self, state: dict[str, Any], *, expected: str | None, subject: str) -> CanaryRecord:
        """Record ``state`` as the canary's next state if the ref is still at ``expected`` (None:
        no canary was ever written); raises :class:`~reef_core.errors.ConflictError` when
        another writer moved it first, and nothing visible is written."""
        repo = self._handle.repo
        data = (json.dumps(state, indent=1, sort_keys=True) + "\n").encode()
        tree = build_tree(repo, {CANARY_FILE: data})
        parents = [] if expected is None else [pygit2.Oid(hex=expected)]
        sig = signature()
        message = " ".join(subject.split())[:200] + "\n"
        commit = repo.create_commit(None, sig, sig, message, tree, parents)
        swap_ref(repo, CANARY_REF, expected, commit, message=subject[:200])
        return CanaryRecord(state, str(commit))

    def history(self, limit: int = 50) -> list[dict[str, Any]]:
        """The canary's states, newest first."""
        repo = self._handle.repo
        ref = repo.references.get(CANARY_REF)
        out: list[dict[str, Any]] = []
        if ref is None:
            return out
        for commit in repo.walk(ref.target, pygit2.enums.SortMode.TOPOLOGICAL):
            try:
                out.append(_state_of(repo, commit))
            except StoreError:
                continue
            if len(out) >= limit:
                break
        return out


def _state_of(repo: pygit2.Repository, commit: pygit2.Commit) -> dict[str, Any]:
    """The state one commit of the ref holds."""
    try:
        state = json.loads(blob_at(repo, commit.tree[CANARY_FILE].id).data)
    except (KeyError, ValueError) as exc:
        raise StoreError(f"{CANARY_REF} at {commit.id} holds no readable {CANARY_FILE}") from exc
    if not isinstance(state, dict):
        raise StoreError(f"{CANARY_REF} at {commit.id}: {CANARY_FILE} is not an object")
    return state
