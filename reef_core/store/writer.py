"""Group commit: one writer thread per scenario turns concurrent appends into commit chains.

Callers hand an item to :meth:`GroupCommitWriter.submit` from any thread and get a future.
The writer drains whatever is queued (up to ``max_batch``), writes one commit per item, each
the parent of the next, and then moves its data ref (``refs/heads/data``, or
``refs/reef/data/<node>`` on a node: ``data.py``) once, by compare-and-swap, to the last
commit.  Only then are the futures resolved: an id a caller receives is always reachable
from the branch, so killing the process at any moment loses no acknowledged item.

Paying the ref lock once per batch instead of once per item is what makes group commit fast;
keeping one commit per item keeps ``git log data`` an exact audit log.

When items come one at a time, handing each to the thread and the answer back costs as much as
the commit itself (two wake-ups, and the two threads taking turns on the GIL).  A caller that
passes ``now=True`` and finds the writer idle writes its item in its own thread instead: the
same commit, under the same lock, ids still committed in the order they were given.  The
daemon asks for that only when a request is the only one in flight, so nobody waits on the
event loop meanwhile; a commit is then about 0.4 ms of Python and a handful of file-system
calls, none of which creates or frees a file (``scratch.py``) or touches libgit2.

Items are checked and serialised by ``items.py``; the trees a commit rewrites are kept in memory
by ``trees.HotTree`` and go, with the blob and the commit, into one pack per batch (``packs.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pygit2

from reef_core.errors import ConflictError, InvalidInput, OutOfFiles, StoreError
from reef_core.ids import KINDS, IdGenerator, ItemId
from reef_core.store.data import DATA_REF, DataReader, format_message, parse_counts
from reef_core.store.descriptors import out_of_files
from reef_core.store.items import GroupEntry, Serialiser, check_item
from reef_core.store.packs import BLOB, COMMIT, PackBuilder
from reef_core.store.repo import RepoHandle, commit_at, create_ref_exclusive, move_ref, read_ref
from reef_core.store.scratch import RefFiles, Spares
from reef_core.store.space import SpaceWatch, out_of_space
from reef_core.store.trees import HotTree

__all__ = [
    "SPARE_FILES",
    "GroupCommitWriter",
]

log = logging.getLogger(__name__)

_CAS_ATTEMPTS = 20
# Larger items are written by the thread even when ``now`` is asked: hashing them would hold
# the caller's thread (and the GIL) for more than the hand-over costs, while the thread's
# zlib and hashlib calls release the GIL for large inputs.
_INLINE_MAX = 256 * 1024
# Spare files (see scratch.py): two per commit.  Once nothing was written for a while the
# stock is topped up, a few files at a time, to twice what the last burst took (at most this
# many); under load only when it is down to the floor.
SPARE_FILES = 512
_SPARE_FLOOR = 32
_SPARE_CHUNK = 8
_IDLE_S = 0.02


@dataclass
class _Pending:
    item_id: ItemId
    payload: bytes
    summary: str
    trailers: Mapping[str, str]
    future: Future[str] | asyncio.Future[str]
    loop: asyncio.AbstractEventLoop | None = None  # the loop that owns ``future``, if asyncio's


_STOP = object()
_RESTOCK = object()  # wakes the thread to make spare files after commits written inline


class GroupCommitWriter:
    """The single writer of one scenario's data branch."""

    @property
    def queued(self) -> int:
        """Items submitted and not yet written (read without the lock: a gauge's value)."""
        return self._queued

    def __init__(
        self,
        handle: RepoHandle,
        *,
        max_batch: int = 256,
        fsync: bool = False,
        spare_files: int = SPARE_FILES,
        reuse: Iterable[str] = (),
        on_batch: Callable[[int, int], None] | None = None,
        space: SpaceWatch | None = None,
        ref: str = DATA_REF,
        relieve: Callable[[], object] | None = None,
    ) -> None:
        """``ref``: the data ref this writer owns, and the only ref it moves; ``reuse``: files
        to empty and take as spare files before making any (what a previous writer left,
        :func:`~reef_core.store.scratch.leftovers`); ``space``: told of writes that fail for
        lack of space, and of each that succeeds (``space.py``); ``relieve``: called from the
        writer thread when a batch failed for want of file descriptors, to free some (the
        daemon closes an idle scenario), before the batch is tried once more."""
        self._handle = handle
        self._relieve = relieve
        self._ref = ref
        self._space = space
        self._fsync = fsync
        self._hot: HotTree | None = None
        self._hot_tip: str | None = None
        self._max_batch = max_batch
        self._on_batch = on_batch
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._submit_lock = threading.Lock()
        # held by whoever writes: the thread, or a caller writing inline
        self._commit_lock = threading.Lock()
        self._queued = 0  # items queued and not yet written, guarded by _submit_lock
        self._closed = False
        self._serialise = Serialiser()  # used under _submit_lock
        reader = DataReader(handle, ref=ref)
        self._counts = reader.counts()
        # continue after the newest id on this ref, so ids stay increasing across restarts (not
        # after another node's: counting on from its last id would make a collision likelier)
        self._ids = IdGenerator(after=reader.last_id())
        # files made ahead for the commits to come (see scratch.py)
        self._objects = os.path.join(handle.path, "objects")
        self._spares = Spares(handle.path, "pack", count=spare_files, floor=_SPARE_FLOOR, reuse=reuse)
        self._last_write = time.monotonic()
        self._filling = False  # topping the stock up in an idle moment
        self._ref_files = RefFiles(handle.path, ref)
        self._thread = threading.Thread(target=self._run, name=f"reef-writer:{handle.path.stem}", daemon=True)
        self._thread.start()

    # -- callers' side -------------------------------------------------------------------

    def submit(
        self,
        kind: str,
        body: Mapping[str, Any],
        *,
        summary: str = "",
        trailers: Mapping[str, str] | None = None,
        now: bool = False,
    ) -> Future[str]:
        """Queue one item; the future resolves to its id once it is on the branch.

        The body is validated and serialised here, in the caller's thread, so bad input fails
        at once and never reaches the repository.

        With ``now``, a small item (64 KiB serialised at most) that finds the writer idle
        (nothing queued, nothing being written, the tip's trees in memory) is written in the
        caller's thread, and the future is done when this returns: no hand-over to the writer
        thread and back, which costs as much as the commit itself when requests come one at a
        time.  Otherwise it is queued as usual, so nothing ever overtakes an item written
        before it.
        """
        future: Future[str] = Future()
        self._submit(kind, body, summary=summary, trailers=trailers, now=now, future=future)
        return future

    def submit_in_loop(
        self,
        kind: str,
        body: Mapping[str, Any],
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        **options: Any,
    ) -> asyncio.Future[str]:
        """:meth:`submit` (same options), for an asyncio future of ``loop`` (by default the
        one running in this thread; pass it when submitting from a worker thread).

        The writer settles all of a batch's futures of one loop with one call into it, where
        ``asyncio.wrap_future`` would take a thread-safe hand-over per item (about 14 us of
        CPU less per item).  Cancelling the future only stops waiting: the item is written
        all the same.
        """
        loop = loop or asyncio.get_running_loop()
        future: asyncio.Future[str] = loop.create_future()
        self._submit(kind, body, future=future, loop=loop, **options)
        return future

    def submit_group(self, items: Sequence[GroupEntry]) -> Future[list[str]]:
        """Queue ``items`` as one group: written in one batch, one ref move, never split, so
        either all of them are on the branch or none is.  The future resolves to their ids in
        order.  An item may be a function of the ids issued to the items before it, called
        here (a report that references a record of its own group).  Every item is validated
        before any is queued: bad input queues nothing.
        """
        if not items:
            raise InvalidInput("a group needs at least one item", field="body")
        futures: list[Future[str]] = []
        with self._submit_lock:
            if self._closed:
                raise StoreError(f"scenario {self._handle.path.stem} is closed")
            group: list[_Pending] = []
            for given in items:  # an item that fails leaves the group unqueued
                item = given([str(p.item_id) for p in group]) if callable(given) else given
                check_item(item.kind, item.body)
                future: Future[str] = Future()
                futures.append(future)
                group.append(self._pending(item.kind, item.body, item.summary, item.trailers, future, None))
            self._queued += len(group)
            self._queue.put(group)  # a list: the thread takes it whole
        return _joined(futures)

    def _pending(
        self,
        kind: str,
        body: Mapping[str, Any],
        summary: str,
        trailers: Mapping[str, str] | None,
        future: Future[str] | asyncio.Future[str],
        loop: asyncio.AbstractEventLoop | None,
    ) -> _Pending:
        """An item's id and serialised form; the caller holds the submit lock."""
        item_id = self._ids.new(kind)
        document = {"id": str(item_id), "kind": kind, "created_at": item_id.created_at}
        document.update(body)
        try:
            payload = self._serialise(document)
        except InvalidInput:
            raise
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"{kind} is not JSON-serialisable: {exc}", field="body") from exc
        return _Pending(item_id, payload + b"\n", summary, trailers or {}, future, loop)

    def _submit(
        self,
        kind: str,
        body: Mapping[str, Any],
        *,
        future: Future[str] | asyncio.Future[str],
        loop: asyncio.AbstractEventLoop | None = None,
        summary: str = "",
        trailers: Mapping[str, str] | None = None,
        now: bool = False,
    ) -> None:
        check_item(kind, body)
        with self._submit_lock:
            if self._closed:
                raise StoreError(f"scenario {self._handle.path.stem} is closed")
            pending = self._pending(kind, body, summary, trailers, future, loop)
            inline = (
                now
                and len(pending.payload) <= _INLINE_MAX
                and self._queued == 0
                and self._hot is not None
                and self._commit_lock.acquire(False)
            )
            if not inline:
                self._queued += 1
                self._queue.put(pending)
                return
        try:
            self._write([pending], inline=True)
            restock = self._spares.short  # else the thread tops the stock up once idle
        finally:
            self._commit_lock.release()
        if restock:
            self._queue.put(_RESTOCK)

    def close(self, timeout: float | None = 30) -> None:
        """Write everything already queued, then stop the thread."""
        with self._submit_lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        self._thread.join(timeout)

    def donate(self, paths: list[str]) -> bool:
        """Files a repack freed, for reuse as spare files; False if they cannot be reused
        here (no leases), and the caller removes them.  After close they are left for the
        next writer (:meth:`Spares.donate`)."""
        taken = self._spares.donate(paths)
        if taken:
            self._queue.put(_RESTOCK)  # wakes the thread, to empty them at the next pause
        return taken

    @property
    def spares(self) -> Spares:
        return self._spares

    @property
    def counts(self) -> dict[str, int]:
        return dict(self._counts)

    # -- the writer thread ---------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            with self._commit_lock:  # an inline write may still be finishing
                try:
                    self._spares.close()
                    self._ref_files.close()
                except OSError:
                    log.warning("could not clear %s", self._spares.directory, exc_info=True)

    def _loop(self) -> None:
        self._restock(_SPARE_FLOOR)  # the first commits' files
        stopping = False
        while not stopping:
            first = self._next()
            if first is _STOP:
                return
            if first is _RESTOCK:
                continue
            # a group (a list) is taken whole, even past max_batch: it is one commit or none
            batch = list(first) if isinstance(first, list) else [first]
            while len(batch) < self._max_batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    stopping = True
                    break
                if isinstance(more, list):
                    batch.extend(more)
                elif more is not _RESTOCK:
                    batch.append(more)
            with self._commit_lock:
                self._write(batch, queued=True)

    def _write(self, batch: list[_Pending], *, queued: bool = False, inline: bool = False) -> None:
        """Commit ``batch`` and tell its callers; the caller holds the commit lock.

        A batch that fails for want of file descriptors is tried once more after ``relieve``
        freed some; written ``inline`` (in a caller's thread, which may be the event loop's:
        it must not wait for a scenario to close), it is handed to the writer thread for that
        instead, unless something was queued behind it meanwhile (ids stay in order).
        """
        self._last_write = time.monotonic()  # busy, not idle, however long the commit takes
        self._filling = False
        failure = self._try_commit(batch)
        if failure is not None and out_of_files(failure):
            if inline and self._hand_over(batch):
                return
            if not inline and self._relieve is not None:
                try:
                    self._relieve()
                except Exception:
                    log.exception("freeing file descriptors failed")
            failure = self._try_commit(batch)
        self._last_write = time.monotonic()
        if queued:
            with self._submit_lock:  # before the callers hear: one may write its next item now
                self._queued -= len(batch)
        if failure is not None:
            error: Exception
            if self._space is not None and out_of_space(failure):
                where = f"writing {len(batch)} item(s) to {self._handle.path.name}"
                error = self._space.failed(failure, where, items=len(batch))
            elif out_of_files(failure):
                log.warning("writing %d item(s) to %s: %s", len(batch), self._handle.path.name, failure)
                error = OutOfFiles(
                    f"reef has no file descriptor left to write {self._handle.path.stem} ({failure}): "
                    "nothing was stored; try again"
                )
            else:
                log.error("writing %d item(s) to %s failed", len(batch), self._handle.path, exc_info=failure)
                error = failure if isinstance(failure, StoreError) else StoreError(f"write failed: {failure}")
            _settle_all(batch, error)
            return
        if self._space is not None:
            self._space.ok()
        _settle_all(batch, None)
        if self._on_batch is not None:
            try:
                self._on_batch(len(batch), sum(len(pending.payload) for pending in batch))
            except Exception:
                log.exception("on_batch hook failed")

    def _try_commit(self, batch: list[_Pending]) -> Exception | None:
        try:
            self._commit_batch(batch)
        except Exception as exc:  # the writer must survive; each caller hears of its failure
            return exc
        return None

    def _hand_over(self, batch: list[_Pending]) -> bool:
        """Queue an inline batch that ran out of descriptors for the writer thread, which can
        wait for some to be freed; False if another item was queued meanwhile (it would be
        committed first) or the writer is closing."""
        with self._submit_lock:
            if self._closed or self._queued:
                return False
            self._queued += len(batch)
            for pending in batch:
                self._queue.put(pending)
        return True

    def _next(self) -> Any:
        """The next thing queued; until it comes, spare files are made while nothing is being
        written (a few at a time, looking again between them), or at once if they run short."""
        while True:
            if self._spares.short or self._spares.cluttered:
                self._tidy()
                if self._spares.short:
                    self._restock(_SPARE_CHUNK)
            wait = None
            if self._spares.low or self._spares.untidy:
                idle = time.monotonic() - self._last_write
                if idle >= _IDLE_S and self._queue.empty():
                    if not self._filling:
                        self._filling = True
                        self._spares.plan()
                    self._tidy()  # first: it may give files back for the stock
                    if self._spares.low:
                        self._restock(_SPARE_CHUNK)
                    continue
                wait = max(_IDLE_S - idle, 0.001)
            try:
                return self._queue.get(timeout=wait)
            except queue.Empty:
                continue

    def _tidy(self) -> None:
        try:
            self._spares.tidy(4 * _SPARE_CHUNK)
        except OSError:
            log.warning("could not tidy %s", self._spares.directory, exc_info=True)

    def _restock(self, most: int) -> None:
        """Make spare files for the commits to come; runs without the commit lock, so an
        inline write never waits for it."""
        try:
            self._spares.restock(most)
        except OSError as exc:  # a full disk, say: the next commit makes what it needs itself
            if not out_of_space(exc) and not out_of_files(exc):  # those the commits report
                log.warning("could not prepare %s", self._spares.directory, exc_info=True)

    def _commit_batch(self, batch: list[_Pending]) -> None:
        delay = 0.001
        for _attempt in range(_CAS_ATTEMPTS):
            # the tip this writer left is trusted; if another process moved it since, the
            # compare-and-swap below says so and the next attempt reads it afresh
            tip = self._hot_tip if self._hot is not None else read_ref(self._handle.path, self._ref)
            if self._hot is None:
                # first batch, or the branch moved under us: start again from what is there
                parent = None if tip is None else commit_at(self._handle.repo, tip)
                self._hot = HotTree(self._handle, None if parent is None else parent.tree_id)
                self._hot_tip = tip
                self._counts = dict.fromkeys(KINDS, 0) if parent is None else parse_counts(parent.message)
            counts = dict(self._counts)
            pack = PackBuilder()
            head = tip
            try:
                for pending in batch:
                    blob = pack.add(BLOB, pending.payload)
                    root = self._hot.insert(pending.item_id.path.split("/"), blob, pack)
                    counts[pending.item_id.kind] += 1
                    message = format_message(pending.item_id, pending.summary, counts, pending.trailers)
                    head = pack.add(COMMIT, commit_bytes(root.hex(), head, message)).hex()
                pack.write(self._objects, fsync=self._fsync, spares=self._spares)
            except BaseException:
                self._hot = None  # the cached tree may hold this batch's unwritten objects
                raise
            assert head is not None  # the batch is never empty
            try:
                if tip is None:
                    if not create_ref_exclusive(self._handle.repo, self._ref, pygit2.Oid(hex=head)):
                        raise pygit2.GitError(f"{self._ref} appeared")
                else:
                    move_ref(
                        self._handle.path, self._ref, tip, head, fsync=self._fsync, files=self._ref_files
                    )
            except (pygit2.GitError, StoreError, ConflictError, OSError) as exc:
                # not a race: at once, another try would fail the same way (_write decides)
                if out_of_space(exc) or out_of_files(exc):
                    self._hot = None
                    raise
                # The ref moved or its lock is held: rebuild on the new tip and try again.
                log.warning("data ref update raced (%s); retrying", exc)
                self._hot = None
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
                continue
            self._hot_tip = head
            self._hot.prune()
            self._counts = counts
            return
        raise StoreError(f"could not move {self._ref} after {_CAS_ATTEMPTS} attempts")


def commit_bytes(tree_hex: str, parent_hex: str | None, message: str) -> bytes:
    who = f"reef <reef@localhost> {int(time.time())} +0000"
    parent = f"parent {parent_hex}\n" if parent_hex else ""
    return f"tree {tree_hex}\n{parent}author {who}\ncommitter {who}\n\n{message}".encode()


def _joined(futures: list[Future[str]]) -> Future[list[str]]:
    """One future for a group's: its ids in order, or the first failure (a group's items are
    settled together, with one outcome)."""
    joined: Future[list[str]] = Future()
    left = [len(futures)]
    lock = threading.Lock()

    def done(_: Future[str]) -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        failed = next((f.exception() for f in futures if f.exception() is not None), None)
        if failed is not None:
            joined.set_exception(failed)
        else:
            joined.set_result([f.result() for f in futures])

    for future in futures:
        future.add_done_callback(done)
    return joined


def _settle_all(batch: list[_Pending], error: Exception | None) -> None:
    """Tell a batch's callers: each its id, or ``error``; asyncio futures one call per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Any, Any]]] = {}
    for pending in batch:
        outcome = str(pending.item_id) if error is None else error
        if pending.loop is None:
            _settle([(pending.future, outcome)])
        else:
            by_loop.setdefault(pending.loop, []).append((pending.future, outcome))
    for loop, settled in by_loop.items():
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if loop is here:  # written inline, in the loop's own thread
            _settle(settled)
            continue
        try:
            loop.call_soon_threadsafe(_settle, settled)
        except RuntimeError:  # that loop is closed: nobody is waiting any more
            pass


def _settle(settled: list[tuple[Any, Any]]) -> None:
    for future, outcome in settled:
        if future.done():  # cancelled: its caller stopped waiting
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
