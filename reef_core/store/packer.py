"""Background packing, so a scenario stays compact as it grows.

The writer puts each batch in a small pack of its own (``packs.py``), fast but neither
compact (no deltas, most objects uncompressed) nor few.  After ``every`` items, ``every // 20``
batches or 64 MiB of items (``_BYTES``), the packer
runs an incremental, geometric repack with the git CLI in a background thread, at the next
pause in writing (or at once when three times that has piled up):

* first :func:`compress`: ``git pack-objects --revs`` walks the scenario's own data ref (the
  one its writer moves; other nodes' refs arrive by fetch, in packs git made) from its tip back
  to where the last compression stopped (``reef-packed-tip``), which lists the new objects
  with their paths (so trees pair with their previous versions for deltas), and packs them
  compressed (``--no-reuse-object``: the writer stores trees uncompressed; 1.6 -> 0.8 KB
  per record); what else the writer's packs hold (a batch whose ref moved after the tip was
  read, one that lost a race) and loose objects are packed by id.  git's own packs are
  skipped (``--keep-pack``), and the writer's are removed once each object in them is in a
  pack git made;
* then :func:`merge` keeps git's packs a geometric progression (few packs) by merging the
  smaller ones *as they are*: their objects named by id from the indexes, deltas reused,
  none searched (``--window=0``).
  Both cost what they pack.  ``git repack --geometric``, used before, lists a pack's
  objects by walking from every commit in the packs it merges down through the whole
  history (for the paths), so each repack cost ~9 us more per 1,000 records in the scenario,
  growing without bound; ``bench/repack.py`` compares the two.
  A pack git made has a reverse index (``.rev``, asked for with ``pack.writeReverseIndex``),
  which the writer's packs lack; with a git too old to write one (< 2.31) every pack counts
  as the writer's and is compressed again at each run;
* it is safe while the writer runs: objects are only removed once they are in a pack, and
  nothing is pruned (objects of a batch not yet on the branch survive);
* the small packs it merges are not freed but handed to the writer as spare files
  (``on_freed``; see ``scratch.py`` for why, and for how a file still being read is left be).

A repack holds ``reef-repack.lock`` (flock) for as long as its git processes live, even if
the daemon that started it is killed: a new packer, or a tool that wants a quiet repository
(``git fsck``), waits on it (:func:`wait_for_repack`).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pygit2

from reef_core.store.data import DATA_REF
from reef_core.store.repo import read_ref
from reef_core.store.scratch import keep_freed, sort_freed

__all__ = [
    "GIT_COMMAND",
    "PackError",
    "Packer",
    "compress",
    "geometric_roll_up",
    "merge",
    "run_git",
    "wait_for_repack",
]

log = logging.getLogger(__name__)

_NICE = shutil.which("nice")


_LOCK_FILE = "reef-repack.lock"


def _open_lock(repo_path: Path) -> int:
    return os.open(repo_path / _LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)


def wait_for_repack(repo_path: Path) -> None:
    """Block until no repack started by reef is running on ``repo_path``."""
    with repack_lock(repo_path):
        pass


@contextlib.contextmanager
def repack_lock(repo_path: Path) -> Iterator[None]:
    """Hold the repack lock (waits for a running repack): what else writes packs into the
    repository (a fetch) takes it, so a repack never mistakes its files for its own leftovers."""
    lock = _open_lock(repo_path)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        os.close(lock)


# A due repack waits for a pause in writing this long, so it does not compete with requests
# for the CPU (on two cores it added 0.3-0.5 ms to every request while it ran) ...
_QUIET_S = 0.2
# ... unless this many times the threshold has piled up meanwhile (a writer that never pauses).
_OVERDUE = 3
# items written since the last repack, in bytes, that make one due: bounds the space the
# writer's uncompressed objects take until the repack compresses them
_BYTES = 64 * 1024 * 1024


# Every pack git makes here has a reverse index (``.rev``; git >= 2.31), which the writer's
# packs lack: that is how a pack already compressed by git is told from one not yet compressed.
GIT_COMMAND = ["git", "-c", "pack.threads=1", "-c", "core.fsync=none", "-c", "pack.writeReverseIndex=true"]

# the data tip whose objects are all in git's packs, as the last compression left it
_PACKED_TIP = "reef-packed-tip"

# Compressing: every object again (the writer's are stored uncompressed), deltas searched
# among 4 candidates instead of git's 10: bench/repack.py, 32,000 records, 19% less git CPU
# per record (237 -> 192 us) for 1.1% more bytes (870 -> 880).
_COMPRESS = ["-q", "--non-empty", "--no-reuse-object", "--delta-base-offset", "--window=4"]

_IDS_PER_WRITE = 4096

Git = Callable[[list[str], str | IO[bytes]], str]
"""Runs ``git <arguments>`` in the repository with the given stdin (text, or a file);
returns its stdout, raises :class:`PackError` if it fails (see :func:`run_git`)."""


def run_git(
    repo_path: Path, arguments: list[str], stdin: str | IO[bytes], *, pass_fds: tuple[int, ...] = ()
) -> str:
    """One git command in the repository, below the daemon's priority (it has requests to
    answer); its stdout, or :class:`PackError` with git's words."""
    command = [*GIT_COMMAND, "-C", str(repo_path), *arguments]
    if _NICE:
        command = [_NICE, "-n", "5", *command]
    if isinstance(stdin, str):
        result = subprocess.run(
            command, input=stdin.encode(), capture_output=True, timeout=600, pass_fds=pass_fds
        )
    else:
        result = subprocess.run(command, stdin=stdin, capture_output=True, timeout=600, pass_fds=pass_fds)
    if result.returncode != 0:
        error = result.stderr.decode(errors="replace").strip()
        raise PackError(error or f"git {arguments[0]}: exit {result.returncode}")
    return result.stdout.decode()


class PackError(Exception):
    pass


def compress(repo_path: Path, git: Git, *, ref: str = DATA_REF, durable: bool = False) -> list[str]:
    """Put the writer's packs, and loose objects, into compressed, deltified packs (git's);
    returns the new packs' names.

    The objects the data ref ``ref`` gained since the last compression are listed by a walk from
    its tip back to where that one stopped (:data:`_PACKED_TIP`), which gives git their paths
    to pair trees for deltas; whatever else the writer's packs hold (a batch whose ref moved
    after the tip was read, one that lost a race) and loose objects are added by id.  The
    writer's packs are removed once every object in them is in a pack git made (``durable``:
    and the packs git made are on disk, :func:`_make_durable`).
    """
    pack_dir = repo_path.absolute() / "objects" / "pack"
    writer, made_by_git = _pack_names(pack_dir)
    loose = _loose_objects(repo_path / "objects")
    if not writer and not loose:
        return []
    keep = [f"--keep-pack={name}.pack" for name in made_by_git]  # already compressed: skipped
    base = str(pack_dir / "pack")
    # read after the packs were listed, so every batch in them whose ref moved is under it
    tip = read_ref(repo_path, ref)
    made: list[str] = []
    if tip is not None and writer:
        revisions = [tip]
        packed = _packed_tip(repo_path)
        if packed is not None:
            revisions.append(f"^{packed}")
        options = ["pack-objects", "--revs", "--sparse", *_COMPRESS]
        made += git([*options, *keep, base], "\n".join(revisions) + "\n").split()
    covered = set().union(*(_object_ids(pack_dir / f"pack-{name}.idx") for name in made))
    rest = [oid for name in writer for oid in _object_ids(pack_dir / f"{name}.idx") if oid not in covered]
    rest += loose
    if rest:
        made += git(["pack-objects", *_COMPRESS, *keep, base], _hex_lines(b"".join(rest)).decode()).split()
    if durable:
        _make_durable(pack_dir, made)
    _remove_packs(pack_dir, writer)
    if loose:
        git(["prune-packed", "-q"], "")
    if tip is not None and writer:  # the walk ran: it stops here next time
        _write_packed_tip(repo_path, tip)
    return made


def merge(repo_path: Path, git: Git, *, durable: bool = False) -> list[str]:
    """Keep git's packs a geometric progression (each at least twice the objects of the next
    smaller) by merging the smaller ones as they are: deltas reused, none searched
    (``--window=0``), objects named by id from the packs' indexes, so the cost is that of the
    packs merged, whatever the history.  Returns the new pack's name, if one was made."""
    pack_dir = repo_path.absolute() / "objects" / "pack"
    _, made_by_git = _pack_names(pack_dir)
    sizes = sorted((_object_count(pack_dir / f"{name}.idx"), name) for name in made_by_git)
    roll = geometric_roll_up([count for count, _ in sizes])
    if roll < 2:
        return []
    merged = [name for _, name in sizes[:roll]]
    options = ["pack-objects", "-q", "--non-empty", "--window=0", "--delta-base-offset"]
    # the ids go through a file: a merge of millions of objects would hold hundreds of MB
    # of listing in memory (git drops an id listed twice)
    with tempfile.TemporaryFile() as listing:
        for name in merged:
            ids = _id_block(pack_dir / f"{name}.idx")
            for start in range(0, len(ids), 20 * _IDS_PER_WRITE):
                listing.write(_hex_lines(ids[start : start + 20 * _IDS_PER_WRITE]))
        listing.seek(0)
        made = git([*options, str(pack_dir / "pack")], listing).split()
    if durable:
        _make_durable(pack_dir, made)
    _remove_packs(pack_dir, [name for name in merged if name.removeprefix("pack-") not in made])
    return made


def geometric_roll_up(counts: list[int], factor: int = 2) -> int:
    """How many of the smallest packs (``counts``: objects per pack, ascending) to merge so
    that the packs form a geometric progression again."""
    # from the largest down, the packs that already form one
    split = len(counts) - 1
    while split > 0 and counts[split] >= factor * counts[split - 1]:
        split -= 1
    if split <= 0:
        return 0
    # everything below the break is merged; a larger pack within a factor of the merged one
    # joins it, or the progression would break there instead
    total = sum(counts[: split + 1])
    roll = split + 1
    while roll < len(counts) and counts[roll] < factor * total:
        total += counts[roll]
        roll += 1
    return roll


def _pack_names(pack_dir: Path) -> tuple[list[str], list[str]]:
    """The packs (``pack-<id>``) the writer made, and those git made (with a ``.rev``)."""
    try:
        names = {entry.name for entry in os.scandir(pack_dir)}
    except FileNotFoundError:
        return [], []
    writer: list[str] = []
    made_by_git: list[str] = []
    for name in sorted(names):
        if name.startswith("pack-") and name.endswith(".pack") and name[:-5] + ".idx" in names:
            (made_by_git if name[:-5] + ".rev" in names else writer).append(name[:-5])
    return writer, made_by_git


def _id_block(idx: Path) -> bytes:
    """The object ids a pack index lists, 20 bytes each, end to end."""
    with open(idx, "rb") as f:
        count = _read_count(f, idx)
        ids = f.read(20 * count)
    if len(ids) != 20 * count:
        raise PackError(f"{idx.name}: truncated")
    return ids


def _read_count(f: IO[bytes], idx: Path) -> int:
    """Reads a pack index's header (version 2, as git and the writer write them); the
    number of objects it lists."""
    head = f.read(8 + 256 * 4)
    if head[:8] != b"\xfftOc\x00\x00\x00\x02" or len(head) < 8 + 256 * 4:
        raise PackError(f"{idx.name}: not a version 2 pack index")
    return int.from_bytes(head[-4:], "big")


def _object_ids(idx: Path) -> list[bytes]:
    ids = _id_block(idx)
    return [ids[i : i + 20] for i in range(0, len(ids), 20)]


def _hex_lines(ids: bytes) -> bytes:
    """Ids end to end as the lines ``git pack-objects`` reads: hex, one per line."""
    return (ids.hex("\n", 20) + "\n").encode() if ids else b""


def _object_count(idx: Path) -> int:
    with open(idx, "rb") as f:
        return _read_count(f, idx)


def _loose_objects(objects: Path) -> list[bytes]:
    found = []
    for fan in range(256):
        directory = objects / f"{fan:02x}"
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            continue
        for name in names:
            try:
                found.append(bytes.fromhex(f"{fan:02x}{name}"))
            except ValueError:
                continue  # a temporary file
        found = [oid for oid in found if len(oid) == 20]
    return found


def _make_durable(pack_dir: Path, made: list[str]) -> None:
    """fsync the packs git just made (each file, then the folder that names them), so that no
    object is removed from its old place before its new one would survive a power loss.

    git runs with ``core.fsync=none`` (a repack is redone cheaply, a record is not); this is
    what ``storage.fsync`` asks for instead: the same guarantee, paid once per repack."""
    for name in made:
        for suffix in (".pack", ".idx", ".rev"):
            try:
                descriptor = os.open(pack_dir / f"pack-{name}{suffix}", os.O_RDONLY)
            except FileNotFoundError:
                continue  # a git too old to write a .rev
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
    if made:
        descriptor = os.open(pack_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _remove_packs(pack_dir: Path, names: list[str]) -> None:
    """The index first: a reader that has the pack open keeps reading it."""
    for name in names:
        for suffix in (".idx", ".rev", ".pack"):
            try:
                os.unlink(pack_dir / f"{name}{suffix}")
            except FileNotFoundError:
                pass


def _remove_git_leftovers(repo_path: Path, *, since: float) -> None:
    """Remove the temporary files a failed git run of this repack left in ``objects/pack``
    (``tmp_pack_…``, ``tmp_idx_…``: git leaves them when it cannot write, on a full disk for
    one, where they hold the space the next write needs).  Only files made since the repack
    started, which only its own git could have made: the repack lock keeps others out."""
    pack_dir = repo_path / "objects" / "pack"
    try:
        entries = list(os.scandir(pack_dir))
    except FileNotFoundError:
        return
    for entry in entries:
        if not entry.name.startswith("tmp_"):
            continue
        try:
            if entry.stat().st_mtime >= since - 1:
                os.unlink(entry.path)
        except FileNotFoundError:
            pass


def _packed_tip(repo_path: Path) -> str | None:
    """Where the last compression's walk stopped, if that commit is still there."""
    try:
        value = (repo_path / _PACKED_TIP).read_text().strip()
        pygit2.Oid(hex=value)
    except (OSError, ValueError):
        return None
    try:
        repository = pygit2.Repository(str(repo_path))
        return value if value in repository else None
    except pygit2.GitError:
        return None


def _write_packed_tip(repo_path: Path, tip: str) -> None:
    temporary = repo_path / f"{_PACKED_TIP}.tmp"
    temporary.write_text(tip + "\n")
    os.replace(temporary, repo_path / _PACKED_TIP)


class Packer:
    def __init__(
        self,
        repo_path: Path,
        *,
        every: int = 2000,
        on_repacked: Callable[[], None] | None = None,
        on_freed: Callable[[list[str]], bool] | None = None,
        ref: str = DATA_REF,
        fsync: bool = False,
    ) -> None:
        """``ref``: the data ref the writer moves, whose new objects :func:`compress` walks;
        ``fsync``: the new packs are fsynced before anything they replace is removed;
        ``on_freed``: given the files of the packs a repack merged away; True if it took
        them (it reuses them), else they are removed here."""
        self._path = repo_path
        self._ref = ref
        self._fsync = fsync
        self._every = every
        self._on_repacked = on_repacked
        self._on_freed = on_freed
        self._since = 0
        self._batches = 0
        self._bytes = 0
        self._last_write = time.monotonic()
        self._signalled = 0  # 1: due, 2: overdue, as last told to the thread
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self.runs = 0
        self.failures = 0
        self.seconds = 0.0  # spent in git repack, all runs together
        self._thread = threading.Thread(target=self._run, name=f"reef-packer:{repo_path.stem}", daemon=True)
        self._thread.start()

    def note_written(self, items: int, size: int = 0) -> None:
        """Count items written (``size``: their bytes); wakes the packer once enough have
        accumulated."""
        if self._every <= 0:
            return
        with self._lock:
            self._since += items
            self._batches += 1
            self._bytes += size
            self._last_write = time.monotonic()
            # the thread hears when a repack falls due, and again when it is overdue
            level = 2 if self._due(_OVERDUE) else 1 if self._due(1) else 0
            wake = level > self._signalled
            self._signalled = max(self._signalled, level)
        if wake:
            self._wake.set()

    def _due(self, times: int) -> bool:
        """Called with the lock held."""
        return (
            self._since >= self._every * times
            or self._batches >= max(1, self._every // 20) * times
            or self._bytes >= _BYTES * times
        )

    def pack_now(self) -> None:
        """Pack in the calling thread (used at close and by tools)."""
        with self._lock:
            self._since = self._batches = self._bytes = 0
        self._repack()

    def close(self) -> None:
        self._stopping.set()
        self._wake.set()
        self._thread.join(60)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping.is_set() or not self._wait_for_a_pause():
                return
            with self._lock:
                self._since = self._batches = self._bytes = 0
                self._signalled = 0
            self._repack()

    def _wait_for_a_pause(self) -> bool:
        """Until writing pauses for ``_QUIET_S`` or the work is overdue; False when closing."""
        while True:
            with self._lock:
                quiet = time.monotonic() - self._last_write
                overdue = self._due(_OVERDUE)
            if quiet >= _QUIET_S or overdue:
                return True
            self._wake.wait(_QUIET_S - quiet)  # set when it becomes overdue, or at close
            self._wake.clear()
            if self._stopping.is_set():
                return False

    def _repack(self) -> None:
        wall_start = time.time()
        lock = _open_lock(self._path)
        kept: list[str] = []
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # a repack left by a killed daemon may still run
            if self._on_freed is not None:
                kept = keep_freed(self._path)
            # the children inherit the locked descriptor, so the lock lives as long as git
            started = time.perf_counter()
            git = functools.partial(self._git, lock=lock)
            failure = None
            try:
                compress(self._path, git, ref=self._ref, durable=self._fsync)
                merge(self._path, git, durable=self._fsync)
            except PackError as exc:
                failure = str(exc)
            self.seconds += time.perf_counter() - started
        except (OSError, subprocess.TimeoutExpired) as exc:
            failure = str(exc)
        finally:
            os.close(lock)
            if kept:
                self._hand_over(sort_freed(kept))
        self.runs += 1
        if failure is not None:
            self.failures += 1
            _remove_git_leftovers(self._path, since=wall_start)
            log.warning("repack of %s failed: %s", self._path, failure)
        elif self._on_repacked is not None:
            self._on_repacked()

    def _git(self, arguments: list[str], stdin: str | IO[bytes], *, lock: int) -> str:
        # the child inherits the locked descriptor, so the lock lives as long as git
        return run_git(self._path, arguments, stdin, pass_fds=(lock,))

    def _hand_over(self, freed: list[str]) -> None:
        assert self._on_freed is not None
        try:
            taken = bool(freed) and self._on_freed(freed)
        except Exception:
            log.exception("on_freed hook failed")
            taken = False
        if not taken:
            for path in freed:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
