"""Bare scenario repositories on disk: creation, the writer lock, recovery after a crash.

Only ``reef_core.store`` imports pygit2.  libgit2 objects must not cross threads, so code that
reads from several threads opens one :class:`pygit2.Repository` per thread (:class:`RepoHandle`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pygit2

from reef_core.errors import ConflictError, ScenarioLocked, StoreError
from reef_core.store.scratch import RefFiles, fsync_dir

__all__ = [
    "RepoHandle",
    "WriterLock",
    "blob_at",
    "clear_stale_ref_locks",
    "commit_at",
    "create_ref_exclusive",
    "init_bare",
    "repo_config",
    "signature",
    "swap_ref",
    "tree_at",
    "write_config",
]

_LOCK_FILE = "reef-writer.lock"
# A ref lock held by a live git process lasts milliseconds; one that survives this long
# unchanged belongs to a writer that died.
_STALE_GRACE_S = 0.25
_T = TypeVar("_T")
_REF_LOCK_WAIT_S = 2.0


def signature() -> pygit2.Signature:
    return pygit2.Signature("reef", "reef@localhost", int(time.time()), 0)


def init_bare(path: Path) -> bool:
    """Create a bare repository at ``path`` atomically; False if it already existed.

    The repository is built under a temporary name and renamed into place, so a crash never
    leaves a half-initialised scenario behind.
    """
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        repo = pygit2.init_repository(str(tmp), bare=True)
        config = repo.config
        # reef packs in the background itself; git's own auto-gc would race with it.
        config["gc.auto"] = 0
        config["core.logAllRefUpdates"] = False
        # a clone checks out the current release, the thing a person wants to look at
        repo.references.create("HEAD", "refs/heads/release", force=True)
        (tmp / "description").write_text(f"reef scenario {path.stem}\n")
        repo.free()
        os.rename(tmp, path)
        return True
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if path.exists():  # another process created it first
            return False
        raise StoreError(f"cannot create repository {path}: {exc}") from exc
    except pygit2.GitError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise StoreError(f"cannot create repository {path}: {exc}") from exc


class RepoHandle:
    """Hands each thread its own :class:`pygit2.Repository` for one path.

    A ``pygit2.Repository`` that has read objects sits in a reference cycle, so it is freed
    only when the cyclic collector runs, holding a pack's file open until then (measured:
    one open file per reader).  A daemon reading 1,000 scenarios in one status listing ran
    out of files that way; so the handle releases the repositories it made when it is itself
    freed or closed (``Repository.free``), which reference counting does at once.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._generation = 0
        self._made: weakref.WeakSet[pygit2.Repository] = weakref.WeakSet()
        if not (path / "HEAD").exists():
            raise StoreError(f"{path} is not a git repository")

    def close(self) -> None:
        """Release every repository this handle made (their files close); for when no thread
        uses the handle any more."""
        for repo in list(self._made):
            repo.free()
        self._made = weakref.WeakSet()

    def __del__(self) -> None:
        made = getattr(self, "_made", None)
        if made:
            self.close()

    @property
    def repo(self) -> pygit2.Repository:
        local = self._local
        repo = getattr(local, "repo", None)
        if repo is None or local.generation != self._generation:
            try:
                repo = pygit2.Repository(str(self.path))
            except pygit2.GitError as exc:
                raise StoreError(f"cannot open repository {self.path}: {exc}") from exc
            local.repo, local.generation = repo, self._generation
            self._made.add(repo)
        return repo

    def invalidate(self) -> None:
        """Make every thread reopen: after a repack, old packs are gone from disk, and a
        long-lived handle would keep them open (and their space in use) for ever."""
        self._generation += 1


class WriterLock:
    """An exclusive lock that makes one process the writer of a repository.

    ``flock`` is released by the kernel when the process dies, however it dies, so a crash
    never leaves the scenario locked.
    """

    def __init__(self, repo_path: Path) -> None:
        self.path = repo_path / _LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            holder = _read_holder(self.path)
            raise ScenarioLocked(
                f"scenario {self.path.parent.stem} is already open for writing{holder}"
            ) from exc
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None


def _read_holder(path: Path) -> str:
    try:
        pid = path.read_text().strip()
    except OSError:
        return ""
    return f" by process {pid}" if pid else ""


def clear_stale_ref_locks(repo_path: Path) -> list[Path]:
    """Remove ref lock files left by a writer that was killed mid-update.

    Call only while holding the :class:`WriterLock`.  A lock file is removed only if it is
    still there, unchanged, after a grace period: a live ``git`` command (a person running
    ``git tag`` beside the daemon) holds its lock for far less than that.
    """
    candidates = [p for p in (repo_path / "refs").rglob("*.lock")]
    packed = repo_path / "packed-refs.lock"
    if packed.exists():
        candidates.append(packed)
    if not candidates:
        return []
    seen = {p: _identity(p) for p in candidates}
    time.sleep(_STALE_GRACE_S)
    removed = []
    for lock, before in seen.items():
        if before is not None and _identity(lock) == before:
            try:
                lock.unlink()
                removed.append(lock)
            except FileNotFoundError:
                pass
    return removed


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns)


def commit_at(repo: pygit2.Repository, oid: pygit2.Oid | str) -> pygit2.Commit:
    obj = repo[oid]
    if not isinstance(obj, pygit2.Commit):
        raise StoreError(f"{oid} is not a commit")
    return obj


def tree_at(repo: pygit2.Repository, oid: pygit2.Oid | str) -> pygit2.Tree:
    obj = repo[oid]
    if not isinstance(obj, pygit2.Tree):
        raise StoreError(f"{oid} is not a tree")
    return obj


def blob_at(repo: pygit2.Repository, oid: pygit2.Oid | str) -> pygit2.Blob:
    obj = repo[oid]
    if not isinstance(obj, pygit2.Blob):
        raise StoreError(f"{oid} is not a blob")
    return obj


def move_ref(
    repo_path: Path,
    name: str,
    expected: str,
    new: str,
    *,
    fsync: bool = False,
    files: RefFiles | None = None,
) -> None:
    """Move loose ref ``name`` from ``expected`` to ``new`` with git's own lock protocol.

    ``<ref>.lock`` is created exclusively (as git and libgit2 do), the ref is read under it and
    compared, and the lock renamed over the ref.  Raises :class:`ConflictError` if the ref moved
    or another writer holds its lock.  libgit2's ``set_target`` does the same plus a lookup of
    the target in the object store, which right after a new pack means rescanning the pack
    directory: most of a data commit's cost, and redundant for a target the caller has just
    written.

    With ``files`` (the writer's ring, see ``scratch.py``) the lock is a file made ahead and
    *linked* into place (``link`` fails on an existing lock exactly as ``O_EXCL`` does), the
    comparison is a ``stat`` when the ref is still the file this ring put there (any other
    writer replaces the file), and the replaced file is not freed: a ref update creates and
    frees nothing.
    """
    path = os.path.join(repo_path, name)
    lock = path + ".lock"
    data = (new + "\n").encode()
    inode = None
    if files is None:
        try:
            fd = _with_directory(lambda: os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), lock)
        except FileExistsError as exc:
            raise ConflictError(f"{name} is locked by another writer") from exc
        try:
            _fill(fd, data, fsync)
        except BaseException:
            os.close(fd)
            os.unlink(lock)
            raise
        os.close(fd)
    else:
        fd, spare, inode = files.take()
        _fill(fd, data, fsync)
        try:
            _with_directory(lambda: os.link(spare, lock), lock)
        except FileExistsError as exc:
            raise ConflictError(f"{name} is locked by another writer") from exc
    try:
        placed = files.current if files is not None else None
        if placed is None or placed[1] != expected or not _is_file(path, placed[0]):
            current = read_ref(repo_path, name)
            if current != expected:
                raise ConflictError(f"{name} moved: expected {expected}, found {current}")
        os.replace(lock, path)
        if fsync:
            fsync_dir(os.path.dirname(path))
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)
        raise
    if files is not None:
        assert inode is not None
        files.current = (inode, new)


def _with_directory(make: Callable[[], _T], path: str) -> _T:
    """``make()``, which creates ``path``; if its directory is missing (``git pack-refs``
    removes the directories it empties, ``refs/reef/data/`` say), made first."""
    try:
        return make()
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return make()


def _is_file(path: str, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except FileNotFoundError:
        return False


def _fill(fd: int, data: bytes, fsync: bool) -> None:
    """Write ``data`` as the whole content of the open file ``fd``."""
    os.pwrite(fd, data, 0)
    if os.fstat(fd).st_size != len(data):
        os.ftruncate(fd, len(data))
    if fsync:
        os.fsync(fd)


def read_ref(repo_path: Path, name: str) -> str | None:
    """The object id ``name`` points at, read as git reads it: the loose file, else packed-refs."""
    try:
        fd = os.open(os.path.join(repo_path, name), os.O_RDONLY)
    except FileNotFoundError:
        value = ""
    else:
        try:
            value = os.read(fd, 4096).decode().strip()
        finally:
            os.close(fd)
    if value:
        return None if value.startswith("ref: ") else value
    try:
        packed = (repo_path / "packed-refs").read_text()
    except FileNotFoundError:
        return None
    for line in packed.splitlines():
        oid, _, ref = line.partition(" ")
        if ref == name:
            return oid
    return None


def ref_names(repo_path: Path, prefix: str) -> list[str]:
    """The names of the refs under ``prefix`` (``"refs/reef/"``), loose or packed, read from the
    files (no repository opened: cheap enough for a look each learning step)."""
    names: set[str] = set()
    root = repo_path / prefix
    if root.is_dir():
        for file in root.rglob("*"):
            if file.is_file() and not file.name.endswith(".lock"):
                names.add(file.relative_to(repo_path).as_posix())
    try:
        packed = (repo_path / "packed-refs").read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        packed = ""
    for line in packed.splitlines():
        parts = line.split(" ", 1)
        if len(parts) == 2 and not line.startswith(("#", "^")) and parts[1].startswith(prefix):
            names.add(parts[1].strip())
    return sorted(names)


def create_ref_exclusive(repo: pygit2.Repository, name: str, target: pygit2.Oid, message: str = "") -> bool:
    """Create ``name`` pointing at ``target`` unless it exists; False if it already did.

    libgit2's ``force=False`` checks for the ref before taking its lock, so two processes can
    both "create" it and the second silently overwrites the first.  Here the lock is taken
    first (an ``O_EXCL`` lock file), then the check, then the write: exactly one creator wins.
    """
    deadline = time.monotonic() + _REF_LOCK_WAIT_S
    while True:
        try:
            with repo.transaction() as txn:
                txn.lock_ref(name)
                if repo.references.get(name) is not None:
                    return False  # leaving the block unlocks without writing
                txn.set_target(name, target, message=message or None)
            return True
        except (pygit2.GitError, OSError) as exc:
            if "lock" in str(exc).lower() and time.monotonic() < deadline:
                time.sleep(0.002)  # another process is writing this ref: wait, then look again
                continue
            raise StoreError(f"cannot create {name}: {exc}") from exc


def swap_ref(
    repo: pygit2.Repository, name: str, expected: str | None, new: pygit2.Oid, *, message: str
) -> None:
    """Move ``name`` from ``expected`` (None: it must not exist yet) to ``new``, or raise
    :class:`ConflictError`: the compare-and-swap every chain-like ref (the release chain, a
    canary's state) moves by.  libgit2 compares the old value under the ref's lock; a lock held
    by another writer is waited out for a moment, then the value is compared again."""
    deadline = time.monotonic() + _REF_LOCK_WAIT_S
    while True:
        ref = repo.references.get(name)
        current = None if ref is None else str(ref.target)
        if current != expected:
            raise ConflictError(f"{name} moved: expected {expected or 'nothing'}, found {current}")
        if ref is None:
            if not create_ref_exclusive(repo, name, new, message):
                raise ConflictError(f"{name} was created by someone else first")
            return
        try:
            ref.set_target(new, message)
            return
        except (pygit2.GitError, OSError) as exc:
            if "lock" in str(exc).lower() and time.monotonic() < deadline:
                time.sleep(0.002)  # another writer holds the ref lock: see who won
                continue
            raise ConflictError(f"{name} moved while it was being set: {exc}") from exc


# -- the repository's own config file ---------------------------------------------------------

_CONFIG_WAIT_S = 2.0
_config_writing = threading.Lock()  # this process's config writers take turns


def repo_config(path: Path) -> pygit2.Config:
    """The repository's own config file alone (no global or system levels)."""
    try:
        return pygit2.Config(str(path / "config"))
    except pygit2.GitError as exc:
        raise StoreError(f"cannot read {path / 'config'}: {exc}") from exc


def write_config(path: Path, write: Callable[[pygit2.Config], None], *, what: str) -> None:
    """Apply ``write`` to the repository's config; while another process (a person's ``git
    config``) holds ``config.lock``, wait and try again, for a while.  ``what`` names the change
    in the error when it cannot be made."""
    deadline = time.monotonic() + _CONFIG_WAIT_S
    with _config_writing:
        while True:
            try:
                write(repo_config(path))
                return
            except pygit2.GitError as exc:
                if "lock" in str(exc).lower() and time.monotonic() < deadline:
                    time.sleep(0.005)
                    continue
                raise StoreError(f"cannot {what} in {path / 'config'}: {exc}") from exc
