"""The state directory: which scenarios exist, opening them for reading or writing.

    <state>/scenarios/<name>.git      one bare repository per scenario
    <state>/archive/<name>-<time>.git archived scenarios, kept whole

A :class:`Scenario` opened for writing holds the repository's writer lock, runs the group
commit writer and the background packer, and repairs what a killed predecessor left behind
(stale ref locks, a release without its tag).  A :class:`ScenarioReader` takes no lock and can
sit beside a running daemon.

With a node name (``storage.node``, for several daemons on one scenario) a scenario's writer
writes ``refs/reef/data/<node>`` instead of ``refs/heads/data`` (:attr:`Scenario.data_ref`);
``data`` reads every node's ref merged, ``own_data`` this node's alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2

from reef_core.errors import DiskFull, LimitReached, NotFound, StoreError
from reef_core.ids import validate_scenario_name
from reef_core.store.canary import CanaryRef
from reef_core.store.data import DataReader, data_ref
from reef_core.store.installs import installed_adapters, note_install
from reef_core.store.items import GroupEntry
from reef_core.store.packer import Packer
from reef_core.store.packs import remove_incomplete_packs
from reef_core.store.releases import ReleaseChain
from reef_core.store.repo import RepoHandle, WriterLock, clear_stale_ref_locks, init_bare
from reef_core.store.scratch import leftovers
from reef_core.store.space import SpaceWatch, out_of_space
from reef_core.store.writer import SPARE_FILES, GroupCommitWriter

__all__ = [
    "Scenario",
    "ScenarioReader",
    "Store",
    "StoreOptions",
]


@dataclass(frozen=True)
class StoreOptions:
    max_batch: int = 256
    pack_every: int = 2000  # items (or 1/20 as many batches) between repacks; 0: never
    fsync: bool = False
    spare_files: int = SPARE_FILES  # files made ahead for commits, two per commit (scratch.py)
    node: str = ""  # storage.node: write refs/reef/data/<node>; "": refs/heads/data
    max_scenarios: int = 10_000  # storage.max-scenarios: creating one past it is refused
    #: told of every group commit (its items and their bytes) and every repack, from the
    #: writer's and the packer's threads: the daemon's /metrics
    on_batch: Callable[[int, int], None] | None = None
    on_repacked: Callable[[], None] | None = None


class ScenarioReader:
    """Read-only view of one scenario; takes no lock.

    ``node``: whose data ref is the own one (``own_data``, and looked at first by ``data``).
    """

    def __init__(self, name: str, path: Path, *, node: str = "") -> None:
        self.name = name
        self.path = path
        self.handle = RepoHandle(path)
        #: the data ref this node writes
        self.data_ref = data_ref(node)
        #: every data ref, merged by time: what a person or a client reads
        self.data = DataReader(self.handle, own=self.data_ref)
        #: this node's data ref alone: what the recipes follow, so two nodes never act on one ask
        self.own_data = DataReader(self.handle, ref=self.data_ref)
        self.releases = ReleaseChain(self.handle)
        #: the scenario's canary as last written (``refs/reef/canary``)
        self.canary = CanaryRef(self.handle)

    def installed_adapters(self) -> frozenset[str]:
        """The adapters an installer was served for (``installs.py``), read afresh each call."""
        return installed_adapters(self.path)


class Scenario(ScenarioReader):
    """One scenario opened for writing by this process."""

    def __init__(
        self,
        name: str,
        path: Path,
        options: StoreOptions,
        space: SpaceWatch | None = None,
        relieve: Callable[[], object] | None = None,
    ) -> None:
        """``relieve``: frees file descriptors when a write ran out of them (``writer.py``)."""
        self._lock = WriterLock(path)
        self._lock.acquire()
        packer: Packer | None = None
        try:
            super().__init__(name, path, node=options.node)
            self._told_batch, self._told_repacked = options.on_batch, options.on_repacked
            self.recovered_locks = clear_stale_ref_locks(path)
            self.recovered_packs = remove_incomplete_packs(path / "objects")
            reuse = leftovers(path)
            self.releases.repair_tags()
            self.packer = packer = Packer(
                path,
                every=options.pack_every,
                on_repacked=self._repacked,
                on_freed=lambda paths: self.writer.donate(paths),
                ref=self.data_ref,
                fsync=options.fsync,
            )
            self.writer = GroupCommitWriter(
                self.handle,
                max_batch=options.max_batch,
                fsync=options.fsync,
                spare_files=options.spare_files,
                reuse=reuse,
                on_batch=self._batch_written,
                space=space,
                ref=self.data_ref,
                relieve=relieve,
            )
        except BaseException:
            # an open that failed half-way (out of file descriptors, say) keeps nothing
            if packer is not None:
                packer.close()
            if hasattr(self, "handle"):
                self.handle.close()
            self._lock.release()
            raise
        self._closed = False
        #: held by this process's publishers (learning steps, rollback, promote) around the
        #: look at the tip and the swap, so they take turns instead of racing
        self.publish_lock = threading.RLock()

    def _batch_written(self, items: int, size: int) -> None:
        self.packer.note_written(items, size)
        if self._told_batch is not None:
            self._told_batch(items, size)

    def _repacked(self) -> None:
        self.handle.invalidate()
        if self._told_repacked is not None:
            self._told_repacked()

    @property
    def queued(self) -> int:
        """Items submitted and not yet written."""
        return self.writer.queued

    def append(self, kind: str, body: Mapping[str, Any], **options: Any) -> Future[str]:
        """Queue an item; the future resolves to its id once it is committed.

        The options are ``GroupCommitWriter.submit``'s: ``summary`` and ``trailers`` for its
        commit message, ``now`` to write it in this thread if the writer is idle.
        """
        return self.writer.submit(kind, body, **options)

    def append_in_loop(self, kind: str, body: Mapping[str, Any], **options: Any) -> asyncio.Future[str]:
        """:meth:`append` (same options) for an asyncio future of the running loop, or of
        ``loop=`` (see ``GroupCommitWriter.submit_in_loop``)."""
        return self.writer.submit_in_loop(kind, body, **options)

    def append_group(self, items: Sequence[GroupEntry]) -> Future[list[str]]:
        """Queue ``items`` to be committed together or not at all (one ref move); the future
        resolves to their ids in order (see ``GroupCommitWriter.submit_group``)."""
        return self.writer.submit_group(items)

    def append_sync(self, kind: str, body: Mapping[str, Any], **kwargs: Any) -> str:
        return self.append(kind, body, **kwargs).result()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.writer.close()
            self.packer.close()
            self.handle.close()
        finally:
            self._lock.release()

    def __enter__(self) -> Scenario:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Store:
    """All scenarios under one state directory."""

    def __init__(self, state_dir: Path, options: StoreOptions | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.options = options or StoreOptions()
        self.scenarios_dir = self.state_dir / "scenarios"
        self.archive_dir = self.state_dir / "archive"
        #: whether writes fail for lack of space (one state for every scenario under it)
        self.space = SpaceWatch(self.state_dir)
        #: frees file descriptors when a write ran out of them (the daemon closes an idle
        #: scenario); called from a writer's thread, see ``writer.py``
        self.relieve: Callable[[], object] | None = None
        self._creating = threading.Lock()
        if self.options.fsync:
            # global in libgit2 and read when a repository is opened: set before any open
            pygit2.settings.enable_fsync_gitdir(True)

    def path_of(self, name: str) -> Path:
        return self.scenarios_dir / f"{validate_scenario_name(name)}.git"

    def names(self) -> list[str]:
        if not self.scenarios_dir.is_dir():
            return []
        return sorted(
            p.name[: -len(".git")]
            for p in self.scenarios_dir.iterdir()
            if p.name.endswith(".git") and not p.name.startswith(".") and (p / "HEAD").exists()
        )

    def exists(self, name: str) -> bool:
        return (self.path_of(name) / "HEAD").exists()

    def create(self, name: str) -> bool:
        """Create scenario ``name``; False if it already existed."""
        path = self.path_of(name)
        with self._space_checked(f"creating {name}"), self._creating:
            self._check_room(path)
            return init_bare(path)

    def _check_room(self, path: Path) -> None:
        """Refuse a new scenario past ``max_scenarios`` (called under ``_creating``, so two
        creations at the cap cannot both pass).  Counting lists one directory: creation is rare
        next to requests, and 10,000 entries list in a few milliseconds."""
        if (path / "HEAD").exists():
            return
        limit = self.options.max_scenarios
        if len(self.names()) >= limit:
            raise LimitReached(
                f"this reef already holds {limit} scenarios, the most storage.max-scenarios allows: "
                f"{path.name[: -len('.git')]!r} was not created (raise --storage.max-scenarios, "
                "or archive scenarios no longer used: reef scenario archive NAME)",
                field="storage.max_scenarios",
            )

    def open(self, name: str, *, create: bool = False, node: str | None = None) -> Scenario:
        """Open ``name`` for writing; ``node`` (default: the options') names its data ref."""
        path = self.path_of(name)
        options = self.options if node is None else dataclasses.replace(self.options, node=node)
        with self._space_checked(f"opening {name}"):
            if create and not (path / "HEAD").exists():
                with self._creating:
                    self._check_room(path)
                    init_bare(path)
            elif not (path / "HEAD").exists():
                raise NotFound(f"no scenario {name!r} in {self.state_dir}", field="scenario")
            return Scenario(name, path, options, self.space, relieve=self._relieve)

    def _relieve(self) -> None:
        if self.relieve is not None:
            self.relieve()

    @contextlib.contextmanager
    def _space_checked(self, what: str) -> Iterator[None]:
        try:
            yield
        except (OSError, pygit2.GitError, StoreError) as exc:
            if out_of_space(exc) and not isinstance(exc, DiskFull):
                raise self.space.failed(exc, what) from exc
            raise

    def note_install(self, name: str, adapter: str) -> None:
        """Remember that an installer for ``adapter`` was served for scenario ``name``
        (``installs.py``); no lock on the scenario is needed, so it may be open or not."""
        path = self.path_of(name)
        if not (path / "HEAD").exists():
            raise NotFound(f"no scenario {name!r} in {self.state_dir}", field="scenario")
        with self._space_checked(f"noting an install of {name}"):
            note_install(path, adapter)

    def reader(self, name: str) -> ScenarioReader:
        path = self.path_of(name)
        if not (path / "HEAD").exists():
            raise NotFound(f"no scenario {name!r} in {self.state_dir}", field="scenario")
        return ScenarioReader(name, path, node=self.options.node)

    def archive(self, name: str) -> Path:
        """Move a scenario out of service, whole.  Fails if a process is writing it."""
        path = self.path_of(name)
        if not (path / "HEAD").exists():
            raise NotFound(f"no scenario {name!r} in {self.state_dir}", field="scenario")
        lock = WriterLock(path)
        lock.acquire()  # raises ScenarioLocked while a daemon has it open
        try:
            self.archive_dir.mkdir(parents=True, exist_ok=True)
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            target = self.archive_dir / f"{name}-{stamp}.git"
            n = 1
            while target.exists():
                n += 1
                target = self.archive_dir / f"{name}-{stamp}-{n}.git"
            try:
                os.rename(path, target)
            except OSError as exc:
                raise StoreError(f"cannot archive {name}: {exc}") from exc
        finally:
            lock.release()
        return target
