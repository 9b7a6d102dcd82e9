"""Knowing when a scenario repository changed: watchfiles on its refs.

Everything the TUI shows moves a ref: a record, report or ask moves ``refs/heads/data`` (or
``refs/reef/data/<node>``, on a scenario several daemons write, or when a sync brings one); a
release moves ``refs/heads/release`` and adds a tag; a candidate, a pending or a rejected mark
adds a ref under ``refs/reef/``; packing rewrites ``packed-refs``; a new scenario appears as a
new ``<name>.git``.  So the watch is on ``<state>/scenarios`` and a filter keeps only those
paths (objects, ref locks and the half-made ``.<name>.git.tmp-…`` of a scenario being created
are noise).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

from watchfiles import Change, awatch

__all__ = ["RefFilter", "ref_changes"]

# how long a burst of writes is gathered into one refresh, and how often the watcher checks
# whether it should stop (it cannot be interrupted otherwise: the app would hang on exit)
DEBOUNCE_MS = 300
STOP_CHECK_MS = 400


class RefFilter:
    """Accepts the changes under ``root`` (the scenarios directory) that move what is shown."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __call__(self, change: Change, path: str) -> bool:
        try:
            parts = Path(path).relative_to(self.root).parts
        except ValueError:
            return False
        if not parts or not parts[0].endswith(".git") or parts[0].startswith("."):
            return False
        if parts[-1].endswith(".lock"):
            return False
        if len(parts) == 1:  # a scenario created or archived
            return True
        return parts[1] in ("refs", "packed-refs", "HEAD")


def _watched(root: Path) -> Path | None:
    """The scenarios directory, or the state directory until a first scenario makes it."""
    for path in (root, root.parent):
        if path.is_dir():
            return path
    return None


async def ref_changes(root: Path) -> AsyncIterator[int]:
    """Yields 0 once the watch is in place, then the number of relevant changes each time the
    repositories under ``root`` move.

    The first 0 lets the caller read once more: whatever moved between its first read and the
    watch taking hold is caught then.  Returns at once when neither ``root`` nor its parent
    exists (nothing to watch).
    """
    watched = _watched(root)
    if watched is None:
        return
    ready = False
    async for changes in awatch(
        watched,
        watch_filter=RefFilter(root),
        debounce=DEBOUNCE_MS,
        rust_timeout=STOP_CHECK_MS,
        yield_on_timeout=True,  # the first quiet spell says the watch is in place
        recursive=True,
    ):
        if not changes and ready:
            continue
        ready = True
        yield len(changes)
        if watched != root and root.is_dir():
            # the first scenario made the scenarios directory: watch it alone from now on
            async for n in ref_changes(root):
                yield n
            return
