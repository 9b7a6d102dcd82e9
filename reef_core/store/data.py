"""The data branch: one commit per record, report and ask.

Each commit adds one JSON file at the path its id names (see :attr:`ItemId.path`) and says
what it added in a message that reads as a log line::

    $ git log --oneline data
    4be1c0a record rec_0193a1b2c3… chat.completions model=qwen 200 812ms v3
    91f0d2e report rep_0193a1b2c9… score=1.0 refs=rec_0193a1b2c3…

with machine-readable trailers below (``Reef-Id``, ``Reef-Kind``, ``Reef-Counts``…).
Reading an item is a tree lookup at the tip, never a history scan.

One daemon writes ``refs/heads/data``.  Several daemons on one scenario (``storage.node``) each
write their own ``refs/reef/data/<node>`` (:func:`data_ref`), and a :class:`DataReader` merges
every data ref it finds by time; ``DataReader(handle, ref=…)`` reads one ref alone (what a
node's recipes follow, so that no two nodes act on the same ask).
"""

from __future__ import annotations

import heapq
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pygit2

from reef_core.errors import NotFound, StoreError
from reef_core.ids import KINDS, ItemId, parse_item_id, validate_node_name
from reef_core.store.repo import RepoHandle, blob_at, commit_at, tree_at

__all__ = [
    "DATA_REF",
    "NODE_DATA_PREFIX",
    "DataReader",
    "Item",
    "data_ref",
    "format_message",
    "parse_trailers",
]

DATA_REF = "refs/heads/data"
#: where each node of a scenario served by several daemons writes: ``refs/reef/data/<node>``
NODE_DATA_PREFIX = "refs/reef/data/"
_SUMMARY_MAX = 160


def data_ref(node: str = "") -> str:
    """The data ref written by a daemon with ``storage.node`` = ``node`` (none: the one
    ``refs/heads/data``)."""
    return NODE_DATA_PREFIX + validate_node_name(node, field="storage.node") if node else DATA_REF


@dataclass(frozen=True)
class Item:
    """One stored record, report or ask, exactly as it sits on the data branch."""

    id: str
    kind: str
    data: dict[str, Any]

    @property
    def created_at(self) -> str:
        return str(self.data.get("created_at", ""))


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def format_message(
    item_id: ItemId,
    summary: str,
    counts: Mapping[str, int],
    trailers: Mapping[str, str] | None = None,
) -> str:
    subject = f"{item_id.kind} {item_id}"
    if summary:
        subject += " " + _one_line(summary, _SUMMARY_MAX)
    lines = [
        f"Reef-Kind: {item_id.kind}",
        f"Reef-Id: {item_id}",
        "Reef-Counts: " + " ".join(f"{k}={counts.get(k, 0)}" for k in KINDS),
    ]
    for key, value in (trailers or {}).items():
        lines.append(f"Reef-{_one_line(key, 40).replace(' ', '-')}: {_one_line(value, 400)}")
    return subject + "\n\n" + "\n".join(lines) + "\n"


def parse_trailers(message: str) -> dict[str, str]:
    """The ``Key: value`` lines of a commit message's last paragraph."""
    paragraph = message.strip().rsplit("\n\n", 1)[-1]
    trailers = {}
    for line in paragraph.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key and " " not in key:
            trailers[key] = value
    return trailers


def parse_counts(message: str) -> dict[str, int]:
    raw = parse_trailers(message).get("Reef-Counts", "")
    counts = dict.fromkeys(KINDS, 0)
    for pair in raw.split():
        kind, _, n = pair.partition("=")
        if kind in counts and n.isdigit():
            counts[kind] = int(n)
    return counts


class DataReader:
    """Reads the data refs.  Safe to use from any thread.

    By default a view of every data ref of the repository (``refs/heads/data`` and each
    ``refs/reef/data/<node>``), merged by time; ``own`` is the ref this process writes, looked
    at first by :meth:`get` and the one :meth:`tip` reads.  With ``ref``, a view of that ref
    alone.
    """

    def __init__(self, handle: RepoHandle, *, ref: str | None = None, own: str = DATA_REF) -> None:
        self._handle = handle
        self._only = ref
        self.own_ref = ref or own
        # packed refs under NODE_DATA_PREFIX, by the stamp of packed-refs they were read from
        self._packed: tuple[tuple[int, ...], list[str]] | None = None

    def refs(self) -> list[str]:
        """The data refs this view reads (those that exist, the own ref first)."""
        if self._only is not None:
            return [self._only] if self._target(self._only) is not None else []
        return [name for name, _ in self._tips()]

    def tip(self) -> pygit2.Commit | None:
        """The tip of the own ref."""
        target = self._target(self.own_ref)
        return None if target is None else commit_at(self._handle.repo, target)

    def _target(self, name: str) -> pygit2.Oid | None:
        try:
            ref = self._handle.repo.references.get(name)
            target = None if ref is None else ref.resolve().target
        except pygit2.GitError as exc:  # a ref mid-update reads as garbage on some filesystems
            raise StoreError(f"cannot read {name}: {exc}") from exc
        return target if isinstance(target, pygit2.Oid) else None

    def _tips(self) -> list[tuple[str, pygit2.Commit]]:
        """(ref, tip commit) of each data ref this view reads, the own ref first."""
        repo = self._handle.repo
        if self._only is not None:
            names = [self._only]
        else:
            names = [self.own_ref, *(n for n in [DATA_REF, *self._node_refs()] if n != self.own_ref)]
        tips = []
        for name in names:
            target = self._target(name)
            if target is not None:
                tips.append((name, commit_at(repo, target)))
        return tips

    def _node_refs(self) -> list[str]:
        """The refs under :data:`NODE_DATA_PREFIX`, loose or packed (a fetch may pack them)."""
        path = self._handle.path
        names = set()
        try:
            with os.scandir(os.path.join(path, NODE_DATA_PREFIX)) as entries:
                names |= {
                    NODE_DATA_PREFIX + e.name for e in entries if not e.name.endswith(".lock") and e.is_file()
                }
        except (FileNotFoundError, NotADirectoryError):
            pass
        packed_refs = os.path.join(path, "packed-refs")
        try:
            st = os.stat(packed_refs)
            stamp: tuple[int, ...] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        except FileNotFoundError:
            stamp = ()
        known = self._packed
        if known is None or known[0] != stamp:
            found = []
            if stamp:
                try:
                    with open(packed_refs, encoding="utf-8", errors="replace") as f:
                        for line in f:
                            _, _, name = line.rstrip("\n").partition(" ")
                            if name.startswith(NODE_DATA_PREFIX):
                                found.append(name)
                except FileNotFoundError:
                    pass
            known = self._packed = (stamp, found)
        names.update(known[1])
        return sorted(names)

    def counts(self) -> dict[str, int]:
        """Items of each kind: the sum of each ref's ``Reef-Counts``."""
        counts = dict.fromkeys(KINDS, 0)
        for _, tip in self._tips():
            for kind, n in parse_counts(tip.message).items():
                counts[kind] += n
        return counts

    def last_id(self) -> ItemId | None:
        """The newest id on any ref of the view."""
        ids = [
            parse_item_id(parse_trailers(tip.message).get("Reef-Id"), field="Reef-Id")
            for _, tip in self._tips()
        ]
        return max(ids, default=None)

    def get(self, item_id: str | ItemId) -> Item:
        parsed = item_id if isinstance(item_id, ItemId) else parse_item_id(item_id)
        for _, tip in self._tips():  # ids carry no node: each ref is looked at, the own first
            try:
                entry = tip.tree[parsed.path]
            except KeyError:
                continue
            return _load(self._handle.repo, entry.id, parsed)
        raise NotFound(f"no {parsed.kind} {parsed}", field="id")

    def exists(self, item_id: str | ItemId) -> bool:
        try:
            self.get(item_id)
        except NotFound:
            return False
        return True

    def iter_items(
        self,
        kinds: Iterable[str] | None = None,
        *,
        after: str | ItemId | None = None,
        limit: int | None = None,
    ) -> Iterator[Item]:
        """Items in the order they were written (by id: the refs of several nodes interleave
        by time), optionally only those after ``after``.

        Walks the time-sharded trees from the cursor on, so the cost is proportional to what
        is returned, not to history.  Across several refs this is a snapshot: an item another
        node wrote before the cursor and that arrives later (with a fetch) is not returned by
        a later call with that cursor; a follower that must see everything reads one ref.
        """
        cursor = None
        if after is not None:
            cursor = after if isinstance(after, ItemId) else parse_item_id(after, field="after")
        wanted = list(kinds or KINDS)
        for kind in wanted:
            if kind not in KINDS:
                raise StoreError(f"unknown item kind {kind!r}")
        repo = self._handle.repo
        streams = []
        for _, tip in self._tips():
            for kind in wanted:
                directory = KINDS[kind][1]
                if directory in tip.tree:
                    streams.append(_walk(repo, tree_at(repo, tip.tree[directory].id), cursor))
        merged = heapq.merge(*streams, key=lambda pair: pair[0].hex)
        for n, (item_id, oid) in enumerate(merged):
            if limit is not None and n >= limit:
                return
            yield _load(repo, oid, item_id)


_LEVELS = 5  # time levels under each kind directory (see ItemId.path)


def _bounds(cursor: ItemId | None) -> list[str] | None:
    if cursor is None:
        return None
    h = cursor.hex
    return [h[0:4], h[4:6], h[6:8], h[8:10], h[10:12], h]


def _walk(
    repo: pygit2.Repository, tree: pygit2.Tree, cursor: ItemId | None
) -> Iterator[tuple[ItemId, pygit2.Oid]]:
    bounds = _bounds(cursor)

    def descend(node: pygit2.Tree, depth: int, bounded: bool) -> Iterator[tuple[ItemId, pygit2.Oid]]:
        for entry in node:  # git orders same-length hex names chronologically
            if depth == _LEVELS:
                item_id = parse_item_id((entry.name or "").removesuffix(".json"), field="path")
                if bounded and bounds is not None and item_id.hex <= bounds[depth]:
                    continue
                yield item_id, entry.id
                continue
            name = entry.name or ""
            if bounded and bounds is not None:
                if name < bounds[depth]:
                    continue
                yield from descend(tree_at(repo, entry.id), depth + 1, name == bounds[depth])
            else:
                yield from descend(tree_at(repo, entry.id), depth + 1, False)

    yield from descend(tree, 0, cursor is not None)


def _load(repo: pygit2.Repository, oid: pygit2.Oid, item_id: ItemId) -> Item:
    try:
        data = json.loads(blob_at(repo, oid).data)
    except (ValueError, KeyError) as exc:
        raise StoreError(f"{item_id} is unreadable: {exc}") from exc
    return Item(id=str(item_id), kind=item_id.kind, data=data)
