"""Open file descriptors: telling when the process has run out, and capping libgit2's share.

A process may hold ``RLIMIT_NOFILE`` descriptors at once; past that every ``open``, ``socket``
and ``pipe`` fails with ``EMFILE`` (``ENFILE`` when the whole system's table is full), and
libgit2 says so only in words ("Too many open files") inside a ``GitError``, which the store
often wraps again in a :class:`~reef_core.errors.StoreError`.  :func:`out_of_files` recognises
every form, through the chain of causes, so that a caller able to free descriptors (the daemon
closes an idle scenario) can tell this failure from the others and try once more; a write that
still fails is an :class:`~reef_core.errors.OutOfFiles` (503), never a plain store error.

libgit2 keeps each pack file it has read from open, one descriptor per pack (shared by every
``Repository`` of the process on that path), until the repository is freed: measured, a
scenario that had written 30 small packs held 30 descriptors for them besides its own nine.
:func:`limit_open_packs` caps how many libgit2 keeps open in the whole process (beyond that
it closes the least recently used and opens it again when needed), so what packs cost is a
fixed share of the budget however many scenarios and packs there are.
"""

from __future__ import annotations

import errno

import pygit2

from reef_core.errors import OutOfFiles

__all__ = ["limit_open_packs", "out_of_files"]

_OUT_OF_FILES = (errno.EMFILE, errno.ENFILE)
_WORDS = ("Too many open files",)  # strerror of both; libgit2 and git write it so


def out_of_files(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an error that caused it, is the process (or the system) out of file
    descriptors."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OutOfFiles):
            return True
        if isinstance(exc, OSError) and exc.errno in _OUT_OF_FILES:
            return True
        if any(words in str(exc) for words in _WORDS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def limit_open_packs(count: int) -> None:
    """Let libgit2 keep at most ``count`` pack files open in this process (0: no limit, its
    default).  A global of libgit2, read whenever it opens a pack."""
    pygit2.settings.mwindow_file_limit = max(0, count)
