"""The scenarios this daemon has open for writing: opened on first use, closed when idle.

Opening a scenario takes its writer lock and may repair what a killed predecessor left (a
short, blocking job), so it runs in a thread and each name is opened once, whatever the
number of concurrent first requests.

An open scenario holds two threads (its writer and its packer, a third for a learning worker)
and nine open files (its lock and the ring of eight ref files, ``scratch.py``), up to twelve
for a moment, besides the packs libgit2 keeps open (one per pack it has read: measured, 30 for
a scenario that had written 30; capped for the whole process, see ``admission.py``; the
numbers are checked in ``tests/daemon/test_files.py``).  A daemon with one scenario per
project would hold them for every project it ever saw: 300 scenarios left 611 threads and
2,718 open files, and under ``ulimit -n 1024`` requests failed from the 110th.  So what is
open is bounded:

* by files, the bound that fails when crossed: a scenario opens only while the process's
  descriptors (:class:`~reef_core.daemon.admission.FileBudget`: counted about once a second,
  accounted in between at twelve for each scenario opening, nine for each open) leave room for
  twelve more besides the reserve; the opener is charged before it opens, so concurrent
  openers see each other.  Otherwise the least recently used scenario nobody is using is closed;
  when every open one is in use, the opener waits until one is released, for at most
  ``admission.WAIT_S``, and is then refused with a 503 and ``Retry-After``;
* by count: at most ``storage.max-open-scenarios`` are open, fewer when the open-file limit
  is low (as many as its budget fits beside what the process held at start: 17 under ``ulimit
  -n 256``); opening one more closes the least recently used one that nobody is using, and
  while all are in use the newcomer opens anyway and the excess is closed once released;
* in time: a scenario unused for ``storage.idle-close-s`` is closed by a sweep.

Should a write or an open run out of descriptors all the same (``EMFILE``: a burst of
connections the count had not seen), :meth:`OpenScenarios.relieve` closes the least recently
used idle scenario and the write is tried once more (``writer.py``; the store calls it from
the writer's thread through ``Store.relieve``).

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
import concurrent.futures
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

from reef_core.daemon.admission import WAIT_S, FileBudget
from reef_core.errors import NotFound, OutOfFiles
from reef_core.ids import validate_scenario_name
from reef_core.store import Scenario, ScenarioReader, Store, limit_open_packs, out_of_files

__all__ = ["LEARNER_QUIET_S", "OpenScenarios"]

log = logging.getLogger(__name__)

#: a learning worker is stopped only after its scenario was unused this long (an ask or a
#: report that just came in may not have woken it yet)
LEARNER_QUIET_S = 5.0
#: a waiting opener looks again this often even if nothing was released (learners go idle,
#: sockets close, and nobody says so)
_LOOK_AGAIN_S = 0.05
#: how long a write that ran out of descriptors waits for a scenario to become idle
_RELIEF_WAIT_S = 1.0


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
        files: FileBudget | None = None,
        wait_s: float = WAIT_S,
    ) -> None:
        """``on_open`` / ``on_close``: start and stop what else lives with a scenario (its
        learning worker); ``can_close(name)``: whether that may be stopped now; ``files``:
        the process's descriptors (by default counted here); ``wait_s``: how long a request
        waits for room in them before it is refused."""
        self.store = store
        self.implicit = implicit
        self.on_open = on_open
        self.on_close = on_close
        self.can_close = can_close
        self.files = files or FileBudget()
        limit_open_packs(self.files.packs)
        self.max_open = max(1, min(max_open, self.files.scenario_capacity()))
        self.idle_close_s = idle_close_s
        self.wait_s = wait_s
        self._open: OrderedDict[str, _Entry] = OrderedDict()  # least recently used first
        self._opening: dict[str, asyncio.Lock] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._trimming: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._released: asyncio.Event | None = None  # set when a lease ends or a scenario closes
        self._reliefs: set[asyncio.Task[bool]] = set()  # started from the loop's own thread
        self.closed = 0  # scenarios closed to bound what is open, since start
        store.relieve = self.relieve_from_thread

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
            if not entry.users:
                self._signal_released()
            self._trim()

    async def _acquire(self, name: str, create: bool | None) -> _Entry:
        validate_scenario_name(name)
        self._loop = asyncio.get_running_loop()
        entry = self._open.get(name)
        if entry is None:  # not open, or being closed (a close takes it out of _open first)
            lock = self._opening.setdefault(name, asyncio.Lock())
            async with lock:  # waits for an open, or a close, of the same name
                entry = self._open.get(name)
                if entry is None:
                    await self._close_over_capacity(room=1)  # a newcomer makes its own room
                    await self._make_room(self.files.room_for_scenario, f"open scenario {name}")
                    entry = await self._open_now(name, create)
        entry.users += 1
        entry.last_used = time.monotonic()
        self._open.move_to_end(name)
        self._trim()
        return entry

    async def _open_now(self, name: str, create: bool | None) -> _Entry:
        """Open ``name``; called right after :meth:`_make_room` said it fits (no await between:
        the budget is charged before another opener looks)."""
        allow = self.implicit if create is None else create
        if not allow and not self.store.exists(name):
            raise NotFound(f"no scenario {name!r} (implicit creation is off)", field="x-reef-scenario")
        self.files.opening()
        try:
            scenario = await self._open_retrying(name, allow)
        except BaseException:
            self.files.not_opened()
            raise
        self.files.opened()
        entry = _Entry(scenario)
        self._open[name] = entry
        if self.on_open is not None:
            self.on_open(scenario)
        return entry

    async def _open_retrying(self, name: str, create: bool) -> Scenario:
        """``store.open``; out of file descriptors, once more after :meth:`relieve` (an open
        that failed half-way kept nothing)."""
        try:
            return await asyncio.to_thread(self.store.open, name, create=create)
        except Exception as exc:
            if not out_of_files(exc):
                raise
        await self.relieve()
        try:
            return await asyncio.to_thread(self.store.open, name, create=create)
        except Exception as again:
            if out_of_files(again):
                raise OutOfFiles(f"no file descriptor left to open scenario {name}: {again}") from again
            raise

    # -- room in the file budget ---------------------------------------------------------------

    async def _make_room(self, fits: Callable[[], bool], what: str) -> None:
        """Until ``fits()``: close the least recently used idle scenario, or, none being
        idle, wait for one to be released; after ``wait_s``, :class:`OutOfFiles` (a 503)."""
        deadline: float | None = None
        while not fits():
            victim = self._least_recently_used()
            if victim is not None:
                await self._close(victim)
                continue
            now = time.monotonic()
            if deadline is None:
                deadline = now + self.wait_s
                self.files.note_wait()
            elif now >= deadline:
                raise self.files.refusal(what)
            await self._wait_for_release(min(deadline - now, _LOOK_AGAIN_S))

    async def wait_for_files(self) -> None:
        """For a request admitted near the limit: room for it, or :class:`OutOfFiles`."""
        await self._make_room(self.files.room_for_request, "take the request")

    def _least_recently_used(self) -> str | None:
        return next((name for name, entry in self._open.items() if self._closable(name, entry)), None)

    async def _wait_for_release(self, timeout: float) -> None:
        if self._released is None:
            self._released = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._released.wait(), timeout)

    def _signal_released(self) -> None:
        if self._released is not None:
            self._released.set()
            self._released = None  # the next waiter waits on a fresh one

    async def relieve(self, wait_s: float = 0.0) -> bool:
        """A write or an open ran out of file descriptors: close the least recently used
        scenario nobody uses (waiting up to ``wait_s`` for one); True if one was closed."""
        deadline = time.monotonic() + wait_s
        while (victim := self._least_recently_used()) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await self._wait_for_release(min(left, _LOOK_AGAIN_S))
        await self._close(victim)
        return True

    def relieve_from_thread(self) -> bool:
        """:meth:`relieve` for a writer's thread (``Store.relieve``), waiting for it.  In the
        event loop's own thread nothing can be waited for: the close is started, False."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return False
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            task = loop.create_task(self.relieve())
            self._reliefs.add(task)
            task.add_done_callback(self._reliefs.discard)
            return False
        future = asyncio.run_coroutine_threadsafe(self.relieve(_RELIEF_WAIT_S), loop)
        try:
            return future.result(_RELIEF_WAIT_S + 30)  # a close drains the victim's writer
        except (concurrent.futures.TimeoutError, RuntimeError):
            return False

    def start_watching_files(self) -> None:
        """Count the process's descriptors from now on (a task of the running loop)."""
        if self._watcher is None:
            self._loop = asyncio.get_running_loop()
            self._watcher = self._loop.create_task(self._watch_files())

    async def _watch_files(self) -> None:
        while True:
            await asyncio.sleep(self.files.count_every())
            before = self.files.used
            self.files.count()
            if self.files.used < before:  # sockets or packs closed: an opener may fit now
                self._signal_released()

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
        self._signal_released()

    async def _shut(
        self, name: str, entry: _Entry, before_close: Callable[[str], None] | None = None
    ) -> None:
        for hook in (before_close, self.on_close):
            if hook is not None:
                await asyncio.to_thread(hook, name)
        closing = self.files.closing()
        await asyncio.to_thread(entry.scenario.close)  # writes everything queued first
        self.files.closed(closing)

    def start_sweeping(self) -> None:
        """Close idle scenarios, and count descriptors, from now on (tasks of the running loop)."""
        self.start_watching_files()
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

    def open_scenarios(self) -> list[Scenario]:
        """The scenarios open now (a scrape's view: one may close right after)."""
        return [entry.scenario for entry in list(self._open.values())]

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
        for task in (self._sweeper, self._trimming, self._watcher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._sweeper = self._trimming = self._watcher = None
        entries, self._open = list(self._open.values()), OrderedDict()
        for entry in entries:
            await asyncio.to_thread(entry.scenario.close)
