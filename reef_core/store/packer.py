"""Background packing, so a scenario stays compact as it grows.

The writer puts each batch in a small pack of its own (``packs.py``), fast but neither
compact (no deltas) nor few.  After ``every`` items, or ``every // 20`` batches, the packer
runs an incremental, geometric repack with the git CLI in a background thread:

* ``git repack -d --geometric=2`` merges packs (and any loose objects) so pack sizes stay a
  geometric progression: few packs, each repack's cost proportional to what is new, and
  deltas between the many near-identical trees of a commit chain;
* it is safe while the writer runs: objects are only removed once they are in a pack, and
  nothing is pruned (objects of a batch not yet on the branch survive).

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


class Packer:
    def __init__(
        self, repo_path: Path, *, every: int = 2000, on_repacked: Callable[[], None] | None = None
    ) -> None:
        self._path = repo_path
        self._every = every
        self._on_repacked = on_repacked
        self._since = 0
        self._batches = 0
        self._wake = threading.Event()
        self._stop = False
        self._lock = threading.Lock()
        self.runs = 0
        self.failures = 0
        self.seconds = 0.0  # spent in git repack, all runs together
        self._thread = threading.Thread(target=self._run, name=f"reef-packer:{repo_path.stem}", daemon=True)
        self._thread.start()

    def note_written(self, items: int) -> None:
        """Count items written; wakes the packer once enough have accumulated."""
        if self._every <= 0:
            return
        with self._lock:
            self._since += items
            self._batches += 1
            due = self._since >= self._every or self._batches >= max(1, self._every // 20)
        if due:
            self._wake.set()

    def pack_now(self) -> None:
        """Pack in the calling thread (used at close and by tools)."""
        with self._lock:
            self._since = self._batches = 0
        self._repack()

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(60)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stop:
                return
            with self._lock:
                self._since = self._batches = 0
            self._repack()

    def _repack(self) -> None:
        command = ["git", "-c", "pack.threads=1", "-c", "core.fsync=none", "-C", str(self._path)]
        command += ["repack", "-d", "-q", "-n", "-F", "--geometric=2"]
        if _NICE:  # below the daemon, which has requests to answer
            command = [_NICE, "-n", "5", *command]
        lock = _open_lock(self._path)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # a repack left by a killed daemon may still run
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
        self.runs += 1
        if result.returncode != 0:
            self.failures += 1
            log.warning("repack of %s failed: %s", self._path, result.stderr.strip())
        elif self._on_repacked is not None:
            self._on_repacked()
