"""The scenarios this daemon has open for writing: opened on first use, closed when idle.

Opening a scenario takes its writer lock and may repair what a killed predecessor left (a
short, blocking job), so it runs in a thread and each name is opened once, whatever the
number of concurrent first requests.

An open scenario holds two threads (its writer and its packer, a third for a learning
worker) and nine open files (its lock and the ring of ref files, ``scratch.py``).  A daemon
with one scenario per project would hold them for every project it ever saw: 300 scenarios
left 611 threads and 2,718 open files, and under ``ulimit -n 1024`` requests failed from
the 110th.  So what is open is bounded:

* at most ``storage.max-open-scenarios`` are open, and fewer when the process's open-file
  limit is low (``_capacity``); opening one more closes the least recently used one that
  nobody is using;
* a scenario unused for ``storage.idle-close-s`` is closed by a sweep.

A scenario is *in use* while a route holds it (:meth:`OpenScenarios.use`, a lease counted
per name) and while its learning worker is busy; only scenarios in use by nobody are
closed.  Closing drains the writer first (``Scenario.close``), and a request for a
scenario being closed waits for that and opens it again, so nothing acknowledged or queued
is lost.  A worker is stopped with its scenario when its recipe keeps nothing in memory
(``Recipe.detachable``) and it has been idle a while; a new one starts when the scenario
opens again and finds in the repository whatever it had not done.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

from reef_core.errors import NotFound
from reef_core.ids import validate_scenario_name
from reef_core.store import Scenario, ScenarioReader, Store

__all__ = ["LEARNER_QUIET_S", "OpenScenarios"]

log = logging.getLogger(__name__)

#: open files one scenario may hold (nine measured, with room for a pack libgit2 opens)
FILES_PER_SCENARIO = 16
#: open files kept for everything else: sockets of clients and upstreams, git children
FILES_RESERVED = 128
#: a learning worker is stopped only after its scenario was unused this long (an ask or a
#: report that just came in may not have woken it yet)
LEARNER_QUIET_S = 5.0


def _capacity(configured: int) -> int:
    """``configured``, or fewer so that open scenarios fit the open-file limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max(1, configured)
    return max(1, min(configured, (soft - FILES_RESERVED) // FILES_PER_SCENARIO))


@dataclass
class _Entry:
    scenario: Scenario
    users: int = 0  # leases held now
    last_used: float = field(default_factory=time.monotonic)


class OpenScenarios:
    def __init__(
        self,
        store: Store,
        *,
        implicit: bool,
        on_open: Callable[[Scenario], None] | None = None,
        on_close: Callable[[str], None] | None = None,
        can_close: Callable[[str], bool] | None = None,
        max_open: int = 64,
        idle_close_s: float = 300.0,
    ) -> None:
        """``on_open`` / ``on_close``: start and stop what else lives with a scenario (its
        learning worker); ``can_close(name)``: whether that may be stopped now."""
        self.store = store
        self.implicit = implicit
        self.on_open = on_open
        self.on_close = on_close
        self.can_close = can_close
        self.max_open = _capacity(max_open)
        self.idle_close_s = idle_close_s
        self._open: OrderedDict[str, _Entry] = OrderedDict()  # least recently used first
        self._opening: dict[str, asyncio.Lock] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._trimming: asyncio.Task[None] | None = None
        self.closed = 0  # scenarios closed to bound what is open, since start

    # -- leases ------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def use(self, name: str, *, create: bool | None = None) -> AsyncIterator[Scenario]:
        """The open scenario ``name``, kept open while the block runs; created if allowed
        (default: the implicit creation setting)."""
        entry = await self._acquire(name, create)
        try:
            yield entry.scenario
        finally:
            entry.users -= 1
            entry.last_used = time.monotonic()
            self._trim()

    async def _acquire(self, name: str, create: bool | None) -> _Entry:
        validate_scenario_name(name)
        entry = self._open.get(name)
        if entry is None:  # not open, or being closed (a close takes it out of _open first)
            lock = self._opening.setdefault(name, asyncio.Lock())
            async with lock:  # waits for an open, or a close, of the same name
                entry = self._open.get(name)
                if entry is None:
                    await self._close_over_capacity(room=1)  # a newcomer makes its own room
                    entry = await self._open_now(name, create)
        entry.users += 1
        entry.last_used = time.monotonic()
        self._open.move_to_end(name)
        self._trim()
        return entry

    async def _open_now(self, name: str, create: bool | None) -> _Entry:
        allow = self.implicit if create is None else create
        if not allow and not self.store.exists(name):
            raise NotFound(f"no scenario {name!r} (implicit creation is off)", field="x-reef-scenario")
        scenario = await asyncio.to_thread(self.store.open, name, create=allow)
        entry = _Entry(scenario)
        self._open[name] = entry
        if self.on_open is not None:
            self.on_open(scenario)
        return entry

    # -- closing what is not used --------------------------------------------------------------

    def _closable(self, name: str, entry: _Entry) -> bool:
        lock = self._opening.get(name)
        if entry.users or (lock is not None and lock.locked()):
            return False
        return self.can_close is None or self.can_close(name)

    def _trim(self) -> None:
        """Close what is over capacity (scenarios that were in use when a newcomer opened),
        in the background: a request never waits for it."""
        if len(self._open) > self.max_open and self._trimming is None:
            self._trimming = asyncio.get_running_loop().create_task(self._close_over_capacity())
            self._trimming.add_done_callback(self._trimmed)

    def _trimmed(self, task: asyncio.Task[None]) -> None:
        self._trimming = None
        if task.cancelled():
            return
        if task.exception() is not None:
            log.error("closing scenarios over capacity failed", exc_info=task.exception())
        elif any(self._closable(name, entry) for name, entry in self._open.items()):
            self._trim()  # released while the task was finishing

    async def _close_over_capacity(self, room: int = 0) -> None:
        """Close the least recently used scenarios nobody uses until ``room`` more fit."""
        while len(self._open) + room > self.max_open:
            over = len(self._open) + room - self.max_open
            victims = [name for name, entry in self._open.items() if self._closable(name, entry)][:over]
            if not victims:  # all in use: the last to be released trims again
                return
            for name in victims:
                await self._close(name)

    async def close_idle(self) -> int:
        """Close every scenario unused for ``idle_close_s``; returns how many."""
        if self.idle_close_s <= 0:
            return 0
        now = time.monotonic()
        idle = [
            name
            for name, entry in self._open.items()
            if now - entry.last_used >= self.idle_close_s and self._closable(name, entry)
        ]
        for name in idle:
            await self._close(name)
        return len(idle)

    async def _close(self, name: str) -> None:
        lock = self._opening.setdefault(name, asyncio.Lock())
        async with lock:
            entry = self._open.get(name)
            if entry is None or entry.users:  # taken again while waiting for the lock
                return
            del self._open[name]
            self.closed += 1
            await self._shut(name, entry)

    async def _shut(
        self, name: str, entry: _Entry, before_close: Callable[[str], None] | None = None
    ) -> None:
        for hook in (before_close, self.on_close):
            if hook is not None:
                await asyncio.to_thread(hook, name)
        await asyncio.to_thread(entry.scenario.close)  # writes everything queued first

    def start_sweeping(self) -> None:
        """Close idle scenarios from now on (a task of the running loop)."""
        if self.idle_close_s > 0 and self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def _sweep(self) -> None:
        every = min(max(self.idle_close_s / 4, 0.05), 30.0)
        while True:
            await asyncio.sleep(every)
            try:
                await self.close_idle()
            except Exception:  # a background loop: log and go on
                log.exception("closing idle scenarios failed")

    # -- reads and management ------------------------------------------------------------------

    def peek(self, name: str) -> Scenario | None:
        entry = self._open.get(name)
        return None if entry is None else entry.scenario

    @property
    def open_names(self) -> list[str]:
        return list(self._open)

    def reader(self, name: str) -> ScenarioReader:
        """For reads: the open scenario when this daemon has it, else a lock-free reader."""
        validate_scenario_name(name)
        return self.peek(name) or self.store.reader(name)

    async def create(self, name: str) -> bool:
        validate_scenario_name(name)
        created = await asyncio.to_thread(self.store.create, name)
        async with self.use(name, create=True):
            pass
        return created

    async def archive(self, name: str, before_close: Callable[[str], None] | None = None) -> Path:
        validate_scenario_name(name)
        lock = self._opening.setdefault(name, asyncio.Lock())
        async with lock:
            entry = self._open.pop(name, None)
            if entry is not None:
                await self._shut(name, entry, before_close)
            return await asyncio.to_thread(self.store.archive, name)

    async def close(self) -> None:
        for task in (self._sweeper, self._trimming):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._sweeper = self._trimming = None
        entries, self._open = list(self._open.values()), OrderedDict()
        for entry in entries:
            await asyncio.to_thread(entry.scenario.close)
