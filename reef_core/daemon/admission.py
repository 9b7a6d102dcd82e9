"""Admission near the process's open-file limit: wait for room, briefly, then 503.

Past its soft ``RLIMIT_NOFILE`` every ``open``, ``socket`` and ``pipe`` of the process fails
(``EMFILE``), and a request that meets it mid-write used to be a 500.  Here a request waits
while the daemon is near the limit, for at most :data:`WAIT_S`, and is then answered 503 with
``Retry-After`` (code ``out_of_files``), which clients retry; nothing of it was stored.

What costs descriptors (measured on Linux, ``tests/daemon/test_files.py``):

* an open scenario holds nine: its writer lock and a ring of eight ref files (``scratch.py``),
  and for a moment up to three more (a commit's pack and index, ``packed-refs`` while it
  opens), so it is charged twelve (:data:`SCENARIO_FILES`);
* libgit2 keeps each pack it has read open (measured: 30 descriptors for a scenario that had
  written 30 small packs), so the process's open packs are capped at ``FileBudget.packs``
  (``limit // 16``: 16 under ``ulimit -n 256``; libgit2 closes the least recently used);
* a socket per client connection and per upstream connection; two or three pipes per git
  child while a repack or a sync runs; a few dozen for the process itself.

:class:`FileBudget` keeps an estimate of what the process holds: a count of its descriptors
(``/proc/self/fd``), plus, for what changed since, twelve for each scenario being opened, nine
for each opened, less nine for each closed (unless a count came while it closed: that count
may already have seen its files go).  Counting is not free (120 us for 250 descriptors and 2
ms for 4,000 on these 2-core machines, as much as the proxy adds to a request), so it is not
done per request: the registry's watcher counts about once a second (ten times a second above
half the limit), and a check that finds the estimate near a threshold counts again, at most
every 10 ms, before it says no.  Far from the limit a check is one comparison.  What the
estimate misses between two counts (new sockets, packs, git's pipes) is what the reserve is
for.

Two thresholds below the limit: a scenario opens only while the estimate plus twelve stays
under ``limit - reserve`` (``reserve`` = the packs' share + ``max(16, limit // 16)``: 32 under
256), else the least recently used idle scenario is closed first, or, all being in use, the
opener waits for one to be released (``registry.py``); any other request is admitted while the
estimate is under ``limit - reserve // 2``, the rest of the reserve kept for what nobody admits
(connections being accepted).  ``/healthz`` and ``/reef/status`` are never held back.

An ``EMFILE`` that happens all the same is never a 500: a write closes an idle scenario and
tries once more (``writer.py``), so does opening a scenario (``registry.py``), and what still
fails with it ends here as the same 503, an idle scenario closed so that the retry finds room.
"""

from __future__ import annotations

import logging
import math
import os
import resource
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from reef_core.daemon.errors import error_response
from reef_core.errors import OutOfFiles
from reef_core.store import out_of_files

if TYPE_CHECKING:
    from reef_core.daemon.registry import OpenScenarios

__all__ = [
    "RETRY_AFTER_S",
    "SCENARIO_FILES",
    "WAIT_S",
    "FileBudget",
    "admission_middleware",
    "count_open_files",
]

log = logging.getLogger(__name__)

#: descriptors an open scenario holds (its writer lock and ring of eight ref files)
SCENARIO_HELD = 9
#: and what one is charged while it opens: up to three more for a moment
SCENARIO_FILES = 12
#: seconds a request waits for room near the limit before it is answered 503
WAIT_S = 10.0
#: what the 503 tells the client to wait
RETRY_AFTER_S = 1.0
#: a check near a threshold counts the descriptors again if the last count is this old
RECOUNT_S = 0.01
#: seconds between the watcher's counts, far from the limit and near it (above half)
COUNT_EVERY_S = (1.0, 0.1)
#: seconds between two log lines about waiting for descriptors
LOG_EVERY_S = 60.0
#: a limit reported as unlimited (or absurdly high) counts as this
_CEILING = 1 << 20
#: requests that answer even at the limit: readiness, and the status an operator looks at
_UNGATED = frozenset({"/healthz", "/reef/status"})


def count_open_files() -> int | None:
    """The descriptors this process holds, or None where they cannot be listed."""
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(listing)) - 1  # less the one that lists them
        except OSError:
            continue
    return None


def _soft_limit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return _CEILING if soft == resource.RLIM_INFINITY else min(soft, _CEILING)


class FileBudget:
    """The process's file descriptors: an estimate, cheap to consult, and two thresholds."""

    def __init__(
        self,
        limit: int | None = None,
        *,
        count: Callable[[], int | None] = count_open_files,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = _soft_limit() if limit is None else limit
        #: libgit2's open packs, for the whole process
        self.packs = max(8, self.limit // 16)
        #: kept free of scenarios: the packs, sockets, git's pipes, a commit's files
        self.reserve = self.packs + max(16, self.limit // 16)
        self._count = count
        self._clock = clock
        self._counted = 0  # at the last count
        self._since = 0  # accounted since (scenarios opened less closed, in descriptors)
        self._opening = 0  # scenarios being opened: what they will hold is not counted yet
        self._counted_at = -math.inf
        self.counts = 0  # times counted, since start
        self.count()
        #: what the process held before any scenario opened (for :meth:`scenario_capacity`)
        self.base = self._counted
        self.waited = 0  # requests that waited for descriptors, since start
        self.refused = 0  # and that were answered 503 in the end
        self._unlogged = 0
        self._logged_at: float | None = None

    @property
    def used(self) -> int:
        """The estimate: the last count, plus what was opened less what was closed since,
        plus what the scenarios being opened will hold."""
        return self._counted + self._since + self._opening * SCENARIO_FILES

    def count(self) -> int:
        """Count the descriptors now (see the module); returns the estimate."""
        counted = self._count()
        if counted is not None:
            self._counted, self._since = counted, 0
        self._counted_at = self._clock()
        self.counts += 1
        return self.used

    def count_every(self) -> float:
        """Seconds until the watcher should count again."""
        return COUNT_EVERY_S[1] if self.used * 2 > self.limit else COUNT_EVERY_S[0]

    def _fits(self, files: int, keep: int) -> bool:
        if self.used + files <= self.limit - keep:
            return True
        if self._clock() - self._counted_at < RECOUNT_S:
            return False
        return self.count() + files <= self.limit - keep

    def room_for_scenario(self) -> bool:
        return self._fits(SCENARIO_FILES, self.reserve)

    def room_for_request(self) -> bool:
        return self._fits(0, self.reserve // 2)

    def opening(self) -> None:
        """A scenario is about to open: charged at once, so that openers deciding at the same
        moment each see the others' share (then :meth:`opened`, or :meth:`not_opened`)."""
        self._opening += 1

    def opened(self) -> None:
        self._opening -= 1
        self._since += SCENARIO_HELD

    def not_opened(self) -> None:
        self._opening -= 1

    def closing(self) -> int:
        """A scenario is about to close; pass what this returns to :meth:`closed`."""
        return self.counts

    def closed(self, closing: int) -> None:
        """A scenario closed.  Taken off the estimate only if nothing was counted while it
        closed: a count then may have seen its files already gone (counts come often near
        the limit, and closes there are many: taking them off again under-counted by
        dozens)."""
        if closing == self.counts:
            self._since -= SCENARIO_HELD

    def scenario_capacity(self) -> int:
        """About how many scenarios fit beside what the process held at start."""
        return max(1, (self.limit - self.reserve - self.base) // SCENARIO_FILES)

    def note_wait(self) -> None:
        self.waited += 1
        self._log_now()

    def note_refusal(self) -> None:
        self.refused += 1
        self._log_now()

    def _log_now(self) -> None:
        self._unlogged += 1
        now = self._clock()
        if self._logged_at is not None and now - self._logged_at < LOG_EVERY_S:
            return
        count, self._unlogged, self._logged_at = self._unlogged, 0, now
        log.warning(
            "near the open-file limit (about %d of %d descriptors in use): %d request(s) waited "
            "or were refused since the last line (%d waited, %d refused since start); raise the "
            "limit (ulimit -n, LimitNOFILE) if this is often",
            self.used,
            self.limit,
            count,
            self.waited,
            self.refused,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "limit": self.limit,
            "in_use": self.used,
            "reserve": self.reserve,
            "packs": self.packs,
            "waited": self.waited,
            "refused": self.refused,
        }

    def refusal(self, what: str) -> OutOfFiles:
        """The 503 for a request that waited :data:`WAIT_S` in vain."""
        self.note_refusal()
        return OutOfFiles(
            f"reef is near its open-file limit (about {self.used} of {self.limit} descriptors in "
            f"use) and could not {what} within {WAIT_S:.0f}s: nothing was stored; try again",
            retry_after=RETRY_AFTER_S,
        )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def admission_middleware(scenarios: OpenScenarios) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Hold requests back near the file limit, and answer 503 rather than fail on it."""

    @web.middleware
    async def admission(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in _UNGATED:
            return await handler(request)
        try:
            if not scenarios.files.room_for_request():
                await scenarios.wait_for_files()
            return await handler(request)
        except OutOfFiles as exc:
            await scenarios.relieve()
            return _busy(request, exc)
        except Exception as exc:
            if not out_of_files(exc):
                raise
            log.warning("%s %s ran out of file descriptors: %s", request.method, request.path, exc)
            await scenarios.relieve()
            return _busy(request, OutOfFiles(f"reef ran out of file descriptors ({exc}): try again"))

    return admission


def _busy(request: web.Request, error: OutOfFiles) -> web.Response:
    response = error_response(request, error.http_status, error.message, code=error.code)
    response.headers["Retry-After"] = str(max(1, math.ceil(error.retry_after)))
    return response
