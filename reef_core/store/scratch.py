"""Files made before a commit needs them, so its critical path creates and frees nothing.

On ext4 (what these machines and most Linux hosts run) the slow steps of a small commit are
not writing bytes but creating a file (20-70 us) and replacing one (150-200 us: the replaced
file's blocks are freed there and then, and a replacing file whose data is not yet allocated
is flushed first).  A one-item commit used to create three files and replace one.  Here:

* :class:`Spares` holds empty files made ahead (by the writer thread, while it is idle); a
  pack and its index are written into two of them and linked into ``objects/pack`` (a link
  locks only the directory it adds to; the name here is removed later by the writer thread,
  which frees nothing, since the file keeps its other name);
* :class:`RefFiles` is a ring of small files, each keeping a name of its own here, that a
  ref's value is written into in turn.  The one in use is linked as the ref's lock and
  renamed over the ref; the file it replaces still has its name here, so nothing is freed,
  and it is rewritten only ``count - 1`` updates later, so a reader that opened the ref just
  before it was replaced still reads the value it opened.

Packs a repack has merged are reused as spare files instead of being freed
(:func:`keep_freed`, :func:`sort_freed`, :meth:`Spares.donate`).  On ext4 without a journal
(what these machines run) a freed inode is not given out again for one to six minutes, and
every file made meanwhile scans past it: after a repack freed a few hundred small packs,
making a file cost 0.1-1.2 ms instead of 20-30 us, for minutes.  So before ``git repack``
runs, each small pack and index gets a second name under ``reef-scratch/freed``; the ones
git dropped are then ours alone, and become spare files once nobody has them open.
"Nobody" is the kernel's word, not a guess: a write lease (``F_SETLEASE``) is granted only
while no other open file exists for the inode, in any process, and a mapping keeps its file
open, so a reader still reading the old pack (``git log`` started before the repack, a
handle not yet reopened) keeps it from being emptied.  Where leases are not available, the
files are freed as before.

Everything lives in ``<repo>/reef-scratch/``, which git never reads (spare files in
``objects/pack`` would be "garbage" to ``git fsck``).  A writer that closes, or is killed at
any point, leaves only files there; the next writer takes those that are no longer anyone
else's as spare files and removes the rest (:func:`leftovers`).
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import os
import secrets
import shutil
import signal
import stat
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "SCRATCH_DIR",
    "RefFiles",
    "Spares",
    "fsync_dir",
    "keep_freed",
    "leftovers",
    "sort_freed",
]

SCRATCH_DIR = "reef-scratch"
FREED_DIR = "freed"

# only the writer's own packs (a few KB each) are worth keeping; git's big ones are few
_FREED_MAX = 64 * 1024
# a file still open elsewhere is tried again at later idle moments, for this long, then freed
_BUSY_S = 60.0
# a commit that finds the stock empty tries this many freed files before making one
_TRIES_PER_MAKE = 4

_LEASES = hasattr(fcntl, "F_SETLEASE") and hasattr(fcntl, "F_SETSIG")


def _directory(repo_path: Path) -> Path:
    directory = repo_path / SCRATCH_DIR
    directory.mkdir(exist_ok=True)
    return directory


def leftovers(repo_path: Path) -> list[str]:
    """Sort what a previous writer left in ``reef-scratch``; call only while holding the
    writer lock.  Files whose only name is here (spare files, freed packs, old ref files) are
    returned, to be emptied and reused; a second name of a file that is in use elsewhere (a
    pack git still has, the ref itself) is removed, and so is anything else."""
    directory = repo_path / SCRATCH_DIR
    found: list[str] = []
    for folder in (directory, directory / FREED_DIR):
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if folder == directory and entry.name == FREED_DIR and entry.is_dir(follow_symlinks=False):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(info.st_mode):
                shutil.rmtree(entry.path, ignore_errors=True)
            elif stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
                found.append(entry.path)
            else:
                _unlink(entry.path)
    return found


def keep_freed(repo_path: Path) -> list[str]:
    """Before a repack: a second name under ``reef-scratch/freed`` for each small pack and
    index, so the ones the repack drops are not freed (see the module).  Returns the names."""
    if not _LEASES:
        return []
    pack_dir = repo_path / "objects" / "pack"
    freed = _directory(repo_path) / FREED_DIR
    freed.mkdir(exist_ok=True)
    kept = []
    try:
        entries = list(os.scandir(pack_dir))
    except FileNotFoundError:
        return []
    for entry in entries:
        if not entry.name.startswith("pack-") or not entry.name.endswith((".pack", ".idx")):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_size > _FREED_MAX:
                continue
            link = str(freed / entry.name)
            os.link(entry.path, link)
        except FileExistsError:
            continue  # kept by an earlier repack that failed; sort_freed decides about it then
        except OSError:
            break  # no hard links here (another file system, say): free as before
        kept.append(link)
    return kept


def sort_freed(kept: Iterable[str]) -> list[str]:
    """After a repack: of the names :func:`keep_freed` made, those now the only name of their
    file (git dropped the pack) are returned; the others are removed (git kept the pack)."""
    dropped = []
    for link in kept:
        try:
            info = os.lstat(link)
        except FileNotFoundError:
            continue
        if info.st_nlink == 1:
            dropped.append(link)
        else:
            _unlink(link)
    return dropped


class Spares:
    """Empty files made ahead of need, kept by name (a large stock holds no descriptors).

    Making a file is the one step of a commit whose cost this file system does not bound: 30 us
    on a quiet machine, 0.3-0.8 ms while the journal is busy, and made by a thread beside the
    commits it slows them down further (the thread and the committer trade the GIL at every
    system call, and the new inode and the renames out of this directory share its lock).  So
    the stock is filled while the writer is idle (:attr:`low`), a few files at a time, sized
    to the last burst (:meth:`plan`); only a stock run down to ``floor`` is topped up under
    load (:attr:`short`).  Files given to be reused (a previous writer's, packs a repack
    merged: :meth:`donate`) are emptied and used before any is made.

    :meth:`take` is called by whoever holds the writer's commit lock, :meth:`restock` by the
    writer thread without it: it only appends to the stock.
    """

    def __init__(
        self, repo_path: Path, kind: str, *, count: int, floor: int, reuse: Iterable[str] = ()
    ) -> None:
        self.directory = _directory(repo_path)
        # the random part: a process with the same pid may have left files here
        self._prefix = str(self.directory / f"{kind}-{os.getpid()}-{secrets.token_hex(3)}-")
        self._numbers = itertools.count()  # next() on it is atomic
        self._most = count
        self._floor = min(floor, count)
        self._want = min(2 * floor, count)
        self._taken = 0  # since the last :meth:`plan`
        self._stock: deque[str] = deque()
        # files to empty and use before making any: (path, when first found still open)
        self._freed: deque[tuple[str, float | None]] = deque((path, None) for path in reuse)
        self._busy: deque[tuple[str, float | None]] = deque()  # found open elsewhere: try later
        self._used: deque[str] = deque()  # names of files taken and linked elsewhere
        self._reusing = _LEASES
        self._closed = False
        self.made = 0  # files created, as opposed to reused (for tests and benchmarks)
        self.reused = 0

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
        while self._busy:  # open elsewhere at the last try: try again
            self._freed.append(self._busy.popleft())

    def donate(self, paths: list[str]) -> bool:
        """Take files a repack freed (see :func:`sort_freed`) for reuse; any thread.  False
        when they cannot be reused (no leases): the caller removes them.  Once this writer is
        closed they stay where they are, for the next one (:func:`leftovers`): a repack that
        ends after the daemon stopped frees nothing."""
        if not self._reusing:
            return False
        if self._closed:
            return True
        room = max(0, 2 * self._most - len(self._freed))  # beyond that: freed, as before
        for path in paths[room:]:
            _unlink(path)
        self._freed.extend((path, None) for path in paths[:room])
        return True

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

    def used(self, path: str) -> None:
        """``path`` was taken, written and linked where it belongs; its name here goes later
        (:meth:`tidy`), since removing it now would wait on this directory's lock."""
        self._used.append(path)

    @property
    def untidy(self) -> bool:
        """Names of used files to remove, or freed files to empty (:meth:`tidy`)."""
        return bool(self._used) or bool(self._freed)

    @property
    def cluttered(self) -> bool:
        """So many names of used files that they are removed even under load."""
        return len(self._used) > 2 * self._most + 64

    def tidy(self, most: int) -> None:
        """Up to ``most`` steps of housekeeping, for an idle writer thread: remove the names
        of used files, then empty freed files into the stock, so what they held takes no
        space (the stock may grow past its aim this way: an empty file costs an inode, no
        block)."""
        most -= self._forget_used(most)
        while most > 0 and self._freed:
            most -= 1
            path = self._from_freed(1)
            if path is not None:
                self._stock.append(path)

    def close(self) -> None:
        """Stop; the stock and the freed files stay, for the next writer (:func:`leftovers`),
        and the names of used files go (their packs keep their other name)."""
        self._forget_used(len(self._used))
        self._closed = True
        self._want = self._most = 0

    def _forget_used(self, most: int) -> int:
        """Remove up to ``most`` names of used files (each lives on under its other name; one
        whose other name is gone, since a repack merged its pack, is kept to be reused).
        Returns how many were looked at."""
        done = 0
        while done < most and self._used:
            path = self._used.popleft()
            done += 1
            try:
                links = os.lstat(path).st_nlink
            except FileNotFoundError:
                continue
            if links == 1 and self._reusing and not self._closed:
                self._freed.append((path, None))
            else:
                _unlink(path)
        return done

    def _from_freed(self, tries: int) -> str | None:
        """The first of up to ``tries`` freed files that could be emptied, or None."""
        for _ in range(tries):
            try:
                path, since = self._freed.popleft()
            except IndexError:
                return None
            if self._reuse(path, since):
                self.reused += 1
                return path
        return None

    def _make(self) -> str:
        path = self._from_freed(_TRIES_PER_MAKE)
        if path is not None:
            return path
        path = f"{self._prefix}{next(self._numbers)}"
        # 0644, not git's 0444: the file is opened again to be written
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        self.made += 1
        return path

    def _reuse(self, path: str, since: float | None) -> bool:
        """Empty ``path`` if no other open file exists for it anywhere; else keep it for a
        later try (or free it, once it has been open elsewhere for ``_BUSY_S``)."""
        if not self._reusing:
            _unlink(path)
            return False
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        except OSError as exc:  # gone, or not ours to write; or no descriptor left: later
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                self._busy.append((path, since))
            else:
                _unlink(path)
            return False
        try:
            try:
                # should anyone open the file while the lease is held, the kernel would signal
                # this process: SIGURG, which is ignored, not SIGIO, which would end it
                fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
                # granted only if this is the one open file of the inode, in any process
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EBUSY):  # no leases on this file system
                    self._reusing = False
                    _unlink(path)
                    return False
                now = time.monotonic()
                if since is None or now - since < _BUSY_S:
                    self._busy.append((path, now if since is None else since))
                else:
                    _unlink(path)  # held for long: freed once its holder lets go, as before
                return False
            # released before truncating: nobody can open the file any more (its only name is
            # ours), and a lease broken by our own truncate would signal this process
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
            os.ftruncate(fd, 0)
            return True
        finally:
            os.close(fd)


class RefFiles:
    """A ring of files that one ref's values are written into, in turn (see the module)."""

    def __init__(self, repo_path: Path, name: str, *, count: int = 8, size: int = 41) -> None:
        assert count >= 2, "the file in place is never rewritten, so a ring needs two"
        directory = _directory(repo_path)
        stem = name.replace("/", "-")
        token = secrets.token_hex(3)  # a process with the same pid may have left files here
        self._files: list[tuple[int, str, int]] = []
        try:
            for n in range(count):
                path = str(directory / f"{stem}-{os.getpid()}-{token}-{n}")
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                self._files.append((fd, path, os.fstat(fd).st_ino))
                try:
                    # blocks allocated now: renaming a file whose data is not yet allocated
                    # over another makes ext4 flush it first
                    os.posix_fallocate(fd, 0, size)
                except OSError:
                    pass  # a file system without it
        except BaseException:  # out of file descriptors, say: keep none of them
            self.close()
            raise
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
