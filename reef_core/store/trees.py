"""Building and reading git trees from plain path → content mappings."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pygit2

from reef_core.errors import InvalidInput
from reef_core.store.repo import tree_at

__all__ = [
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
