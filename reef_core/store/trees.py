"""Git trees, built and read: every tree the store writes is made here.

Two ways of building, for two kinds of caller:

* from a plain ``path -> content`` mapping (:func:`build_tree`, :func:`insert_blob`), through
  libgit2: release and candidate trees, a few at a time;
* in memory, along the paths the data branch's writer appends to (:class:`HotTree` of
  :class:`TreeNode`), straight into the writer's pack (``packs.py``): thousands of items a
  second, each rewriting the trees above it, so the tip's trees along those paths are kept
  serialised and never read back from the object store.

:func:`iter_files` reads any tree back as ``(path, blob)``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping

import pygit2

from reef_core.errors import InvalidInput
from reef_core.store.packs import PackBuilder, TreeEncoder
from reef_core.store.repo import RepoHandle, tree_at

__all__ = [
    "HotTree",
    "TreeNode",
    "build_tree",
    "insert_blob",
    "iter_files",
    "validate_tree_path",
]

_BLOB = pygit2.enums.FileMode.BLOB
_TREE = pygit2.enums.FileMode.TREE


def validate_tree_path(path: str) -> list[str]:
    parts = path.split("/")
    if (
        not path
        or "\\" in path
        or "\0" in path
        or any(p in ("", ".", "..") or p.lower() == ".git" for p in parts)
    ):
        raise InvalidInput(f"illegal path in tree: {path!r}", field="path")
    return parts


def build_tree(repo: pygit2.Repository, files: Mapping[str, bytes | pygit2.Oid]) -> pygit2.Oid:
    """Write a tree holding ``files`` (``"dir/name" -> bytes or blob oid``); returns its oid."""
    nested: dict = {}
    for path, content in files.items():
        parts = validate_tree_path(path)
        node = nested
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise InvalidInput(f"path {path!r} runs through a file", field="path")
        if isinstance(node.get(parts[-1]), dict):
            raise InvalidInput(f"path {path!r} is also a directory", field="path")
        node[parts[-1]] = content
    return _write_nested(repo, nested)


def _write_nested(repo: pygit2.Repository, node: dict) -> pygit2.Oid:
    builder = repo.TreeBuilder()
    for name, value in node.items():
        if isinstance(value, dict):
            builder.insert(name, _write_nested(repo, value), _TREE)
        else:
            oid = value if isinstance(value, pygit2.Oid) else repo.create_blob(value)
            builder.insert(name, oid, _BLOB)
    return builder.write()


def insert_blob(
    repo: pygit2.Repository, tree: pygit2.Tree | None, parts: list[str], blob: pygit2.Oid
) -> pygit2.Oid:
    """Return a tree like ``tree`` with ``blob`` at ``parts``; only the path's trees are rewritten."""
    builder = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
    name = parts[0]
    if len(parts) == 1:
        builder.insert(name, blob, _BLOB)
    else:
        sub = None
        if tree is not None and name in tree:
            sub = tree_at(repo, tree[name].id)
        builder.insert(name, insert_blob(repo, sub, parts[1:], blob), _TREE)
    return builder.write()


def iter_files(
    repo: pygit2.Repository, tree: pygit2.Tree, prefix: str = ""
) -> Iterator[tuple[str, pygit2.Blob]]:
    """Every blob under ``tree`` as ``(path, blob)``, in git's order."""
    for entry in tree:
        path = f"{prefix}{entry.name}"
        obj = repo[entry.id]
        if isinstance(obj, pygit2.Tree):
            yield from iter_files(repo, obj, path + "/")
        elif isinstance(obj, pygit2.Blob):
            yield path, obj


class TreeNode:
    """One tree of the branch tip, held in memory as its serialised entries in git's order.

    Keeping the entries serialised makes rewriting the tree one ``bytes.join``; new names
    almost always sort last (ids grow with time), so inserting is an append, and a rewrite
    that changes only the last entry's id hashes only that entry (:class:`TreeEncoder`).
    """

    __slots__ = ("children", "encoder", "entries", "keys", "parts")

    def __init__(self, entries: dict[str, tuple[bool, bytes]]) -> None:
        self.keys: list[bytes] = []  # git's sort keys: the name, plus "/" for a directory
        self.parts: list[bytes] = []  # the serialised entry for each key
        self.entries: dict[str, bytes] = {}  # name -> raw oid
        self.encoder = TreeEncoder()
        for name, (is_dir, oid) in entries.items():
            self.set(name, is_dir, oid)
        self.children: dict[str, TreeNode] = {}

    def set(self, name: str, is_dir: bool, oid: bytes) -> None:
        raw = name.encode()
        key = raw + b"/" if is_dir else raw
        part = (b"40000 " if is_dir else b"100644 ") + raw + b"\0" + oid
        i = bisect.bisect_left(self.keys, key)
        if i < len(self.keys) and self.keys[i] == key:
            if i != len(self.parts) - 1 or len(part) != len(self.parts[i]):
                self.encoder.forget()
            self.parts[i] = part
        else:
            self.encoder.forget()
            self.keys.insert(i, key)
            self.parts.insert(i, part)
        self.entries[name] = oid

    def add_to(self, pack: PackBuilder) -> bytes:
        """Add this tree to ``pack``; returns its id."""
        return self.encoder.add(pack, self.parts)


class HotTree:
    """The tip's tree along the paths being written, so appends never read the object store.

    Ids grow with time, so each kind's writes always land in its newest subtree: only that
    path is kept (:meth:`prune`), and memory stays flat however long the branch grows.
    """

    def __init__(self, handle: RepoHandle, tree: pygit2.Oid | None) -> None:
        self._handle = handle  # each thread that writes reads through its own repository
        self.root = self._load(tree) if tree is not None else TreeNode({})

    def _load(self, oid: pygit2.Oid | bytes) -> TreeNode:
        tree = tree_at(self._handle.repo, oid if isinstance(oid, pygit2.Oid) else pygit2.Oid(raw=oid))
        return TreeNode({e.name or "": (e.filemode == _TREE, e.id.raw) for e in tree})

    def insert(self, parts: list[str], blob: bytes, pack: PackBuilder) -> bytes:
        """Put ``blob`` at ``parts``; adds the rewritten trees to ``pack``; returns the root's id."""
        return self._insert(self.root, parts, blob, pack)

    def _insert(self, node: TreeNode, parts: list[str], blob: bytes, pack: PackBuilder) -> bytes:
        name = parts[0]
        if len(parts) == 1:
            node.set(name, False, blob)
        else:
            child = node.children.get(name)
            if child is None:
                existing = node.entries.get(name)
                child = self._load(existing) if existing else TreeNode({})
                node.children[name] = child
            node.set(name, True, self._insert(child, parts[1:], blob, pack))
        return node.add_to(pack)

    def prune(self) -> None:
        for kind_node in self.root.children.values():
            node = kind_node
            while node.children:
                newest = max(node.children)
                node.children = {newest: node.children[newest]}
                node = node.children[newest]
