"""The process's memory: its peak resident size over a span, and freed memory handed back.

**Peak RSS.** Linux keeps a process's high-water mark of resident memory (``VmHWM`` in
``/proc/self/status``), and writing ``5`` to ``/proc/self/clear_refs`` resets it to the current
RSS.  :func:`watch` resets it when a step starts and reads it when the step ends, so the
step's record says how much memory the daemon held at its highest while the step ran: the
step itself, and whatever served beside it (the process is one: that is the number an
operator's limit is set against).  Steps of several scenarios may overlap; the mark is reset
only when no other step is being watched, so an overlapping step reads the peak since the
first of them began: never less than its own, never more than the daemon's.  Elsewhere than
Linux (or where /proc cannot be written) the peak is ``None`` and records leave it out.

**Freed memory.** glibc keeps what a training step freed in its arenas, so without a trim the
daemon stays at the step's high-water and the checks and serving that follow start from it
(measured on SmolLM2: 2.66 GB resident after a step, 955 MB after ``malloc_trim(0)``;
docs/research/grpo-memory.md).  :func:`give_back` trims where the C library has it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["Peak", "give_back", "peak_rss_bytes", "watch"]

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_lock = threading.Lock()
_watching = 0
_was_reset = False  # whether the first of the overlapping watches could reset the mark


def peak_rss_bytes() -> int | None:
    """The process's high-water resident size since the last reset, in bytes (Linux)."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reset() -> bool:
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


class Peak:
    """The high-water mark of one :func:`watch`: :meth:`read` it while or after the block runs."""

    def __init__(self, reset: bool) -> None:
        self._reset = reset

    def read(self) -> int | None:
        """The peak resident bytes since the watch began (``None`` where it cannot be read)."""
        return peak_rss_bytes() if self._reset else None


@contextmanager
def watch() -> Iterator[Peak]:
    """The peak resident size of the process while the ``with`` block runs (see the module)."""
    global _watching, _was_reset
    with _lock:
        if _watching == 0:
            _was_reset = _reset()
        _watching += 1
        reset = _was_reset
    try:
        yield Peak(reset)
    finally:
        with _lock:
            _watching -= 1


@functools.cache
def _trim() -> object | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        return libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None  # not glibc (musl, macOS): nothing to hand back this way


def give_back() -> None:
    """Hand memory freed by a step back to the system (glibc's ``malloc_trim(0)``)."""
    trim = _trim()
    if trim is not None:
        trim(0)  # type: ignore[operator]
