"""The data branch: one commit per record, report and ask.

Each commit adds one JSON file at the path its id names (see :attr:`ItemId.path`) and says
what it added in a message that reads as a log line::

    $ git log --oneline data
    4be1c0a record rec_0193a1b2c3… chat.completions model=qwen 200 812ms v3
    91f0d2e report rep_0193a1b2c9… score=1.0 refs=rec_0193a1b2c3…

with machine-readable trailers below (``Reef-Id``, ``Reef-Kind``, ``Reef-Counts``…).
Reading an item is a tree lookup at the tip, never a history scan.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pygit2

from reef_core.errors import NotFound, StoreError
from reef_core.ids import KINDS, ItemId, parse_item_id
from reef_core.store.repo import RepoHandle, blob_at, commit_at, tree_at

__all__ = [
    "DATA_REF",
    "DataReader",
    "Item",
    "format_message",
    "parse_trailers",
]

DATA_REF = "refs/heads/data"
_SUMMARY_MAX = 160


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
    """Reads the data branch.  Safe to use from any thread."""

    def __init__(self, handle: RepoHandle) -> None:
        self._handle = handle

    def tip(self) -> pygit2.Commit | None:
        repo = self._handle.repo
        try:
            ref = repo.references.get(DATA_REF)
        except pygit2.GitError as exc:  # a ref mid-update reads as garbage on some filesystems
            raise StoreError(f"cannot read {DATA_REF}: {exc}") from exc
        return None if ref is None else commit_at(repo, ref.target)

    def counts(self) -> dict[str, int]:
        tip = self.tip()
        return parse_counts(tip.message) if tip else dict.fromkeys(KINDS, 0)

    def last_id(self) -> ItemId | None:
        tip = self.tip()
        if tip is None:
            return None
        return parse_item_id(parse_trailers(tip.message).get("Reef-Id"), field="Reef-Id")

    def get(self, item_id: str | ItemId) -> Item:
        parsed = item_id if isinstance(item_id, ItemId) else parse_item_id(item_id)
        tip = self.tip()
        try:
            if tip is None:
                raise KeyError(parsed.path)
            entry = tip.tree[parsed.path]
        except KeyError:
            raise NotFound(f"no {parsed.kind} {parsed}", field="id") from None
        return _load(self._handle.repo, entry.id, parsed)

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
        """Items in the order they were written, optionally only those after ``after``.

        Walks the time-sharded trees from the cursor on, so the cost is proportional to what
        is returned, not to history.
        """
        cursor = None
        if after is not None:
            cursor = after if isinstance(after, ItemId) else parse_item_id(after, field="after")
        tip = self.tip()
        if tip is None:
            return
        repo = self._handle.repo
        streams = []
        for kind in kinds or KINDS:
            if kind not in KINDS:
                raise StoreError(f"unknown item kind {kind!r}")
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
