"""A git repository reef does not own, read and never written: another program's, such as the
artifact repository of the original Reef that ``reef import --from-reef-infra`` migrates.

Nothing here takes a lock, moves a ref or writes an object; the repository may belong to a
program that is running.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pygit2

from reef_core.errors import NotFound, StoreError
from reef_core.store.trees import iter_files

__all__ = ["ForeignCommit", "ForeignRepo"]


@dataclass(frozen=True)
class ForeignCommit:
    sha: str
    parents: tuple[str, ...]
    time: int  # the committer's time, seconds since the epoch
    message: str


class ForeignRepo:
    """Refs, commits and files of a repository opened read-only."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self._repo = pygit2.Repository(str(self.path))
        except (pygit2.GitError, OSError) as exc:
            raise StoreError(f"{self.path}: not a git repository ({exc})") from exc

    def refs(self, prefix: str) -> dict[str, str]:
        """Refs under ``prefix`` (their names without it) → the commit each points at."""
        found = {}
        try:
            for name in self._repo.references:
                if name.startswith(prefix):
                    found[name[len(prefix) :]] = str(self._repo.references[name].peel(pygit2.Commit).id)
        except (pygit2.GitError, ValueError) as exc:
            raise StoreError(f"{self.path}: cannot read its refs: {exc}") from exc
        return found

    def commit(self, sha: str) -> ForeignCommit:
        commit = self._object(sha)
        if not isinstance(commit, pygit2.Commit):
            raise NotFound(f"{self.path}: {sha} is not a commit", field="commit")
        return ForeignCommit(
            sha=str(commit.id),
            parents=tuple(str(p) for p in commit.parent_ids),
            time=commit.commit_time,
            message=commit.message,
        )

    def files(self, sha: str) -> dict[str, bytes]:
        """Every file of a commit's tree, path → content (LFS pointers as they are stored)."""
        commit = self._object(sha)
        if not isinstance(commit, pygit2.Commit):
            raise NotFound(f"{self.path}: {sha} is not a commit", field="commit")
        try:
            return {path: blob.data for path, blob in iter_files(self._repo, commit.tree)}
        except (pygit2.GitError, KeyError) as exc:
            raise StoreError(f"{self.path}: cannot read the tree of {sha}: {exc}") from exc

    def file(self, sha: str, path: str) -> bytes | None:
        """One file of a commit's tree, or None if it has none at ``path``."""
        commit = self._object(sha)
        if not isinstance(commit, pygit2.Commit):
            raise NotFound(f"{self.path}: {sha} is not a commit", field="commit")
        try:
            entry = commit.tree[path]
        except KeyError:
            return None
        blob = self._repo.get(entry.id)
        return blob.data if isinstance(blob, pygit2.Blob) else None

    def _object(self, sha: str) -> object:
        try:
            return self._repo.get(sha)
        except (pygit2.GitError, ValueError) as exc:
            raise StoreError(f"{self.path}: cannot read {sha}: {exc}") from exc

    def close(self) -> None:
        self._repo.free()
