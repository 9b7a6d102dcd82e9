"""A full disk under the state directory: one clear error, one log line a minute, one state.

When the file system holding the state directory runs out of space, every write fails the
same way, and a daemon under load would log one traceback per request.  Instead, the store
turns the operating system's ``ENOSPC`` (and ``EDQUOT``, a quota) into :class:`DiskFull`
naming the state directory and what is free, the :class:`SpaceWatch` of the store logs it
at most once a minute (with the count of failed writes since the last line), and remembers
it until a write succeeds again, so the daemon can say so in ``/reef/status`` and
``/healthz``.  Nothing is retried here: the caller gets the error at once, and the next
write simply tries again, which is how recording resumes by itself once space is freed.

What a failed write leaves is cleaned where it fails (a pack's temporary file, an index
whose pack never arrived, a ref lock), so the repository stays readable and ``git fsck``
clean.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from reef_core.errors import DiskFull

__all__ = ["SpaceWatch", "format_bytes", "out_of_space"]

log = logging.getLogger(__name__)

_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
#: seconds between two log lines about the same full disk
LOG_EVERY_S = 60.0


def out_of_space(exc: BaseException) -> bool:
    """Whether ``exc`` is the file system saying it has no room (or the quota is used up)."""
    if isinstance(exc, DiskFull):
        return True
    if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
        return True
    # libgit2 and git report it in words
    text = str(exc)
    return "No space left on device" in text or "Disk quota exceeded" in text


def format_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    size, unit = n / 1024, "KB"
    for bigger in ("MB", "GB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{size:.1f} {unit}"


def _free_bytes(path: Path) -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


class SpaceWatch:
    """The full-disk state of one state directory, shared by every scenario under it."""

    def __init__(self, state_dir: Path, *, log_every: float = LOG_EVERY_S) -> None:
        self.state_dir = Path(state_dir)
        self._log_every = log_every
        self._lock = threading.Lock()
        self._since: float | None = None  # wall time of the first failure, while full
        self._failures = 0  # writes refused since then
        self._unlogged = 0  # since the last log line
        self._logged_at: float | None = None  # monotonic

    @property
    def full(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException, where: str, *, items: int = 1) -> DiskFull:
        """Note a write of ``items`` that failed for lack of space; returns the error to raise."""
        free = _free_bytes(self.state_dir)
        error = DiskFull(
            f"no space left for reef's state directory {os.path.abspath(self.state_dir)} "
            f"({'unknown' if free is None else format_bytes(free)} free): nothing was stored; "
            "free some space and writes resume by themselves",
            free_bytes=free,
            state_dir=str(self.state_dir),
        )
        now = time.monotonic()
        with self._lock:
            if self._since is None:
                self._since = time.time()
            self._failures += items
            self._unlogged += items
            due = self._logged_at is None or now - self._logged_at >= self._log_every
            if due:
                count, self._unlogged, self._logged_at = self._unlogged, 0, now
        if due:
            log.error(
                "%s (%s; %d write(s) refused since the last line: %s)", error.message, where, count, exc
            )
        return error

    def ok(self) -> None:
        """A write succeeded: the disk is not full (any more).  Cheap when it never was."""
        if self._since is None:
            return
        with self._lock:
            if self._since is None:
                return
            failures = self._failures
            self._since, self._failures, self._unlogged, self._logged_at = None, 0, 0, None
        log.warning("space is back under %s: writes resume (%d failed meanwhile)", self.state_dir, failures)

    def describe(self) -> dict[str, Any] | None:
        """For ``/reef/status``: None while writes succeed; else since when, and what is free."""
        with self._lock:
            if self._since is None:
                return None
            since, failures = self._since, self._failures
        return {
            "state_dir": str(os.path.abspath(self.state_dir)),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since)),
            "failed_writes": failures,
            "free_bytes": _free_bytes(self.state_dir),
        }
