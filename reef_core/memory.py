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
docs/research/grpo-memory.md).  :func:`give_back` trims where the C library has it: after a
step, and before one (:func:`watch`), so a step does not start on what serving freed.

**Arenas.** glibc gives each thread that allocates an arena of its own (up to eight per core),
and each arena keeps its own freed memory: the daemon's decoding thread, its learners and the
event loop's executors each sat on their own high-water, and a step's peak stacked on all of
them.  :func:`cap_arenas` (``mallopt(M_ARENA_MAX, 2)``, what ``MALLOC_ARENA_MAX=2`` sets) makes
every thread share two, so what one freed the next reuses.  ``reef serve`` calls it first, while
it is the process's only thread: a thread keeps the arena it was given.  On SmolLM2 in ``reef
demo`` it took about 120 MB off each step's peak (with the trim before a step), and serving
was no slower (docs/research/grpo-memory.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["ARENAS", "Peak", "cap_arenas", "give_back", "peak_rss_bytes", "watch"]

#: malloc arenas the daemon's threads share (:func:`cap_arenas`)
ARENAS = 2
_M_ARENA_MAX = -8  # mallopt's parameter (malloc.h)
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
    """The peak resident size of the process while the ``with`` block runs (see the module).

    What serving freed since the last step is handed back first (:func:`give_back`), so the step
    starts from what the daemon holds, not from what its allocator kept."""
    global _watching, _was_reset
    with _lock:
        if _watching == 0:
            give_back()
            _was_reset = _reset()
        _watching += 1
        reset = _was_reset
    try:
        yield Peak(reset)
    finally:
        with _lock:
            _watching -= 1


@functools.cache
def _glibc(function: str) -> Any | None:
    """``function`` of the C library, where it is glibc's (``None`` elsewhere: musl, macOS)."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c")), function)
    except (OSError, AttributeError, TypeError):
        return None


def give_back() -> None:
    """Hand memory freed by a step back to the system (glibc's ``malloc_trim(0)``)."""
    trim = _glibc("malloc_trim")
    if trim is not None:
        trim(0)


def cap_arenas(arenas: int = ARENAS) -> bool:
    """Let all the process's threads share at most ``arenas`` malloc arenas (see the module);
    whether the cap was set.  Call it before any thread starts: a thread keeps the arena it was
    given.  ``MALLOC_ARENA_MAX`` in the environment, the operator's, is left as it is."""
    mallopt = _glibc("mallopt")
    if mallopt is None or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return bool(mallopt(_M_ARENA_MAX, arenas))
