"""Files made before a commit needs them, so its critical path creates and frees nothing.

On ext4 (what these machines and most Linux hosts run) the slow steps of a small commit are
not writing bytes but creating a file (20-70 us) and replacing one (150-200 us: the replaced
file's blocks are freed there and then, and a replacing file whose data is not yet allocated
is flushed first).  A one-item commit used to create three files and replace one.  Here:

* :class:`Spares` holds empty files made ahead (by the writer thread, while it is idle); a
  pack and its index are written into two of them and renamed into ``objects/pack``;
* :class:`RefFiles` is a ring of small files, each keeping a name of its own here, that a
  ref's value is written into in turn.  The one in use is linked as the ref's lock and
  renamed over the ref; the file it replaces still has its name here, so nothing is freed,
  and it is rewritten only ``count - 1`` updates later, so a reader that opened the ref just
  before it was replaced still reads the value it opened.

Everything lives in ``<repo>/reef-scratch/``, which git never reads (spare files in
``objects/pack`` would be "garbage" to ``git fsck``); a writer killed at any point leaves
only files there, and the next writer empties it (:func:`clear_scratch`).
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections import deque
from pathlib import Path

__all__ = ["SCRATCH_DIR", "RefFiles", "Spares", "clear_scratch", "fsync_dir"]

SCRATCH_DIR = "reef-scratch"


def clear_scratch(repo_path: Path) -> None:
    """Remove what a previous writer left.  Call only while holding the writer lock."""
    shutil.rmtree(repo_path / SCRATCH_DIR, ignore_errors=True)


def _directory(repo_path: Path) -> Path:
    directory = repo_path / SCRATCH_DIR
    directory.mkdir(exist_ok=True)
    return directory


class Spares:
    """Empty files made ahead of need, kept by name (a large stock holds no descriptors).

    Making a file is the one step of a commit whose cost this file system does not bound: 30 us
    on a quiet machine, 0.3-0.8 ms while the journal is busy, and made by a thread beside the
    commits it slows them down further (the thread and the committer trade the GIL at every
    system call, and the new inode and the renames out of this directory share its lock).  So
    the stock is filled while the writer is idle (:attr:`low`), a few files at a time, sized
    to the last burst (:meth:`plan`); only a stock run down to ``floor`` is topped up under
    load (:attr:`short`).

    :meth:`take` is called by whoever holds the writer's commit lock, :meth:`restock` by the
    writer thread without it: it only appends to the stock.
    """

    def __init__(self, repo_path: Path, kind: str, *, count: int, floor: int) -> None:
        self.directory = _directory(repo_path)
        self._prefix = str(self.directory / f"{kind}-{os.getpid()}-")
        self._numbers = itertools.count()  # next() on it is atomic
        self._most = count
        self._floor = min(floor, count)
        self._want = min(2 * floor, count)
        self._taken = 0  # since the last :meth:`plan`
        self._stock: deque[str] = deque()

    @property
    def low(self) -> bool:
        """Below the stock aimed at: worth topping up when the writer is idle."""
        return len(self._stock) < self._want

    @property
    def short(self) -> bool:
        """Down to the floor: top up now, even under load."""
        return len(self._stock) < self._floor

    def plan(self) -> None:
        """At the start of an idle moment: aim the stock at twice the files taken since the
        last one (the floor twice at least, ``count`` at most), so a scenario written now and
        then keeps a few dozen files and a busy one enough for its bursts."""
        self._want = max(min(2 * self._floor, self._most), min(2 * self._taken, self._most))
        self._taken = 0

    def take(self) -> tuple[int, str]:
        """An empty file open for writing, and its path; the caller closes the fd and renames
        the file away (or unlinks it)."""
        self._taken += 1
        try:
            path = self._stock.popleft()
        except IndexError:
            path = self._make()
        return os.open(path, os.O_WRONLY), path

    def restock(self, most: int | None = None) -> None:
        """Make up to ``most`` files (all that are missing by default)."""
        missing = self._want - len(self._stock)
        for _ in range(missing if most is None else min(most, missing)):
            self._stock.append(self._make())

    def close(self) -> None:
        self._want = self._most = 0
        while self._stock:
            _unlink(self._stock.popleft())

    def _make(self) -> str:
        path = f"{self._prefix}{next(self._numbers)}"
        # 0644, not git's 0444: the file is opened again to be written
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        return path


class RefFiles:
    """A ring of files that one ref's values are written into, in turn (see the module)."""

    def __init__(self, repo_path: Path, name: str, *, count: int = 8, size: int = 41) -> None:
        assert count >= 2, "the file in place is never rewritten, so a ring needs two"
        directory = _directory(repo_path)
        stem = name.replace("/", "-")
        self._files: list[tuple[int, str, int]] = []
        for n in range(count):
            path = str(directory / f"{stem}-{os.getpid()}-{n}")
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                # blocks allocated now: renaming a file whose data is not yet allocated
                # over another makes ext4 flush it first
                os.posix_fallocate(fd, 0, size)
            except OSError:
                pass  # a file system without it
            self._files.append((fd, path, os.fstat(fd).st_ino))
        self._next = 0
        #: (inode, value) of the file this ring last put in place as the ref
        self.current: tuple[int, str] | None = None

    def take(self) -> tuple[int, str, int]:
        """The next file of the ring not in place as the ref: (fd, path, inode).  The fd stays
        open; do not close it."""
        while True:
            entry = self._files[self._next]
            self._next = (self._next + 1) % len(self._files)
            if self.current is None or entry[2] != self.current[0]:
                return entry

    def close(self) -> None:
        for fd, path, _ in self._files:
            os.close(fd)
            _unlink(path)
        self._files.clear()


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def fsync_dir(directory: str | Path) -> None:
    """Make the names in ``directory`` durable (after creating or renaming files there)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
