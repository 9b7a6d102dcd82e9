"""Background packing, so a scenario stays compact as it grows.

The writer puts each batch in a small pack of its own (``packs.py``), fast but neither
compact (no deltas, most objects uncompressed) nor few.  After ``every`` items, ``every // 20``
batches or 64 MiB of items (``_BYTES``), the packer
runs an incremental, geometric repack with the git CLI in a background thread, at the next
pause in writing (or at once when three times that has piled up):

* first ``git repack -d -F --geometric=2`` over the writer's packs only (git's own are
  excluded with ``--keep-pack``) merges them (and any loose objects) into compressed,
  deltified packs: ``-F`` recomputes deltas and compression, since the writer stores trees
  uncompressed and git would otherwise keep most of them as they are (1.6 -> 0.8 KB per
  record);
* then ``git repack -d --geometric=2`` over git's packs only keeps their sizes a geometric
  progression (few packs) by merging the smaller ones *as they are*: their deltas are reused,
  not searched again.  A single ``-F`` repack of everything searched deltas anew for every
  pack it merged, so a record paid for its compression once per level of the progression
  (``bench/repack.py``, 24,000 records written 1,500 at a time: 602 us of git CPU per
  record then, 370 now; bytes per record within 2% either way, as each merged pack now
  keeps its own delta bases).
  A pack git made has a reverse index (``.rev``), which the writer's packs lack; with a git
  too old to write one (< 2.31) every pack counts as the writer's, and the first step is
  the old repack.  A pack the writer adds just as the second step starts may be merged as
  it is: a batch's worth of uncompressed objects, now and then;
* it is safe while the writer runs: objects are only removed once they are in a pack, and
  nothing is pruned (objects of a batch not yet on the branch survive);
* the small packs it merges are not freed but handed to the writer as spare files
  (``on_freed``; see ``scratch.py`` for why, and for how a file still being read is left be).

A repack holds ``reef-repack.lock`` (flock) for as long as its git processes live, even if
the daemon that started it is killed: a new packer, or a tool that wants a quiet repository
(``git fsck``), waits on it (:func:`wait_for_repack`).
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from reef_core.store.scratch import keep_freed, sort_freed

__all__ = ["GIT_COMMAND", "Packer", "compress_step", "merge_step", "wait_for_repack"]

log = logging.getLogger(__name__)

_NICE = shutil.which("nice")


_LOCK_FILE = "reef-repack.lock"


def _open_lock(repo_path: Path) -> int:
    return os.open(repo_path / _LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)


def wait_for_repack(repo_path: Path) -> None:
    """Block until no repack started by reef is running on ``repo_path``."""
    lock = _open_lock(repo_path)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
    finally:
        os.close(lock)


# A due repack waits for a pause in writing this long, so it does not compete with requests
# for the CPU (on two cores it added 0.3-0.5 ms to every request while it ran) ...
_QUIET_S = 0.2
# ... unless this many times the threshold has piled up meanwhile (a writer that never pauses).
_OVERDUE = 3
# items written since the last repack, in bytes, that make one due: bounds the space the
# writer's uncompressed objects take until the repack compresses them
_BYTES = 64 * 1024 * 1024


# Every repack writes a reverse index (``.rev``; git >= 2.31), which the writer's packs lack:
# that is how a pack already compressed by git is told from one not yet compressed.
GIT_COMMAND = ["git", "-c", "pack.threads=1", "-c", "core.fsync=none", "-c", "pack.writeReverseIndex=true"]


def _packs(repo_path: Path, *, compressed: bool) -> list[str]:
    """``--keep-pack`` options for the packs git made (``compressed``) or the writer's."""
    pack_dir = repo_path / "objects" / "pack"
    try:
        names = {entry.name for entry in os.scandir(pack_dir)}
    except FileNotFoundError:
        return []
    return [
        f"--keep-pack={name}"
        for name in sorted(names)
        if name.startswith("pack-")
        and name.endswith(".pack")
        and (name[: -len(".pack")] + ".rev" in names) == compressed
    ]


def compress_step(repo_path: Path) -> list[str]:
    """Merge the writer's packs into compressed, deltified ones, leaving git's packs be."""
    keep = _packs(repo_path, compressed=True)
    return ["-C", str(repo_path), "repack", "-d", "-q", "-n", "-F", "--geometric=2", *keep]


def merge_step(repo_path: Path) -> list[str]:
    """Restore the geometric progression among git's packs, reusing their deltas."""
    keep = _packs(repo_path, compressed=False)
    return ["-C", str(repo_path), "repack", "-d", "-q", "-n", "--geometric=2", *keep]


class Packer:
    def __init__(
        self,
        repo_path: Path,
        *,
        every: int = 2000,
        on_repacked: Callable[[], None] | None = None,
        on_freed: Callable[[list[str]], bool] | None = None,
    ) -> None:
        """``on_freed``: given the files of the packs a repack merged away; True if it took
        them (it reuses them), else they are removed here."""
        self._path = repo_path
        self._every = every
        self._on_repacked = on_repacked
        self._on_freed = on_freed
        self._since = 0
        self._batches = 0
        self._bytes = 0
        self._last_write = time.monotonic()
        self._signalled = 0  # 1: due, 2: overdue, as last told to the thread
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self.runs = 0
        self.failures = 0
        self.seconds = 0.0  # spent in git repack, all runs together
        self._thread = threading.Thread(target=self._run, name=f"reef-packer:{repo_path.stem}", daemon=True)
        self._thread.start()

    def note_written(self, items: int, size: int = 0) -> None:
        """Count items written (``size``: their bytes); wakes the packer once enough have
        accumulated."""
        if self._every <= 0:
            return
        with self._lock:
            self._since += items
            self._batches += 1
            self._bytes += size
            self._last_write = time.monotonic()
            # the thread hears when a repack falls due, and again when it is overdue
            level = 2 if self._due(_OVERDUE) else 1 if self._due(1) else 0
            wake = level > self._signalled
            self._signalled = max(self._signalled, level)
        if wake:
            self._wake.set()

    def _due(self, times: int) -> bool:
        """Called with the lock held."""
        return (
            self._since >= self._every * times
            or self._batches >= max(1, self._every // 20) * times
            or self._bytes >= _BYTES * times
        )

    def pack_now(self) -> None:
        """Pack in the calling thread (used at close and by tools)."""
        with self._lock:
            self._since = self._batches = self._bytes = 0
        self._repack()

    def close(self) -> None:
        self._stopping.set()
        self._wake.set()
        self._thread.join(60)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping.is_set() or not self._wait_for_a_pause():
                return
            with self._lock:
                self._since = self._batches = self._bytes = 0
                self._signalled = 0
            self._repack()

    def _wait_for_a_pause(self) -> bool:
        """Until writing pauses for ``_QUIET_S`` or the work is overdue; False when closing."""
        while True:
            with self._lock:
                quiet = time.monotonic() - self._last_write
                overdue = self._due(_OVERDUE)
            if quiet >= _QUIET_S or overdue:
                return True
            self._wake.wait(_QUIET_S - quiet)  # set when it becomes overdue, or at close
            self._wake.clear()
            if self._stopping.is_set():
                return False

    def _repack(self) -> None:
        lock = _open_lock(self._path)
        kept: list[str] = []
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # a repack left by a killed daemon may still run
            if self._on_freed is not None:
                kept = keep_freed(self._path)
            # the children inherit the locked descriptor, so the lock lives as long as git
            started = time.perf_counter()
            failure = self._git(compress_step(self._path), lock)
            if failure is None:
                failure = self._git(merge_step(self._path), lock)
            self.seconds += time.perf_counter() - started
        except (OSError, subprocess.TimeoutExpired) as exc:
            failure = str(exc)
        finally:
            os.close(lock)
            if kept:
                self._hand_over(sort_freed(kept))
        self.runs += 1
        if failure is not None:
            self.failures += 1
            log.warning("repack of %s failed: %s", self._path, failure)
        elif self._on_repacked is not None:
            self._on_repacked()

    @staticmethod
    def _git(arguments: list[str], lock: int) -> str | None:
        """Run one git repack; its error text if it failed."""
        command = [*GIT_COMMAND, *arguments]
        if _NICE:  # below the daemon, which has requests to answer
            command = [_NICE, "-n", "5", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, pass_fds=(lock,))
        return None if result.returncode == 0 else (result.stderr.strip() or f"exit {result.returncode}")

    def _hand_over(self, freed: list[str]) -> None:
        assert self._on_freed is not None
        try:
            taken = bool(freed) and self._on_freed(freed)
        except Exception:
            log.exception("on_freed hook failed")
            taken = False
        if not taken:
            for path in freed:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
