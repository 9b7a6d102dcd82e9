"""Background packing, so a scenario stays compact as it grows.

The writer puts each batch in a small pack of its own (``packs.py``), fast but neither
compact (no deltas, most objects uncompressed) nor few.  After ``every`` items, ``every // 20``
batches or 64 MiB of items (``_BYTES``), the packer
runs an incremental, geometric repack with the git CLI in a background thread, at the next
pause in writing (or at once when three times that has piled up):

* ``git repack -d -F --geometric=2`` merges packs (and any loose objects) so pack sizes stay
  a geometric progression: few packs, each repack's cost proportional to what is new; ``-F``
  recomputes deltas and compression, since the writer stores trees uncompressed and git
  would otherwise keep most of them as they are (1.6 -> 0.8 KB per record);
* it is safe while the writer runs: objects are only removed once they are in a pack, and
  nothing is pruned (objects of a batch not yet on the branch survive);
* the small packs it merges are not freed but handed to the writer as spare files
  (``on_freed``; see ``scratch.py`` for why, and for how a file still being read is left be).

A repack holds ``reef-repack.lock`` (flock) for as long as the git process lives, even if
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

__all__ = ["Packer", "wait_for_repack"]

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
        command = ["git", "-c", "pack.threads=1", "-c", "core.fsync=none", "-C", str(self._path)]
        command += ["repack", "-d", "-q", "-n", "-F", "--geometric=2"]
        if _NICE:  # below the daemon, which has requests to answer
            command = [_NICE, "-n", "5", *command]
        lock = _open_lock(self._path)
        kept: list[str] = []
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # a repack left by a killed daemon may still run
            if self._on_freed is not None:
                kept = keep_freed(self._path)
            # the child inherits the locked descriptor, so the lock lives exactly as long as git
            started = time.perf_counter()
            result = subprocess.run(command, capture_output=True, text=True, timeout=600, pass_fds=(lock,))
            self.seconds += time.perf_counter() - started
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.failures += 1
            log.warning("repack of %s failed: %s", self._path, exc)
            return
        finally:
            os.close(lock)
            if kept:
                self._hand_over(sort_freed(kept))
        self.runs += 1
        if result.returncode != 0:
            self.failures += 1
            log.warning("repack of %s failed: %s", self._path, result.stderr.strip())
        elif self._on_repacked is not None:
            self._on_repacked()

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
