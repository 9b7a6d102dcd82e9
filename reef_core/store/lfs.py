"""Large files (weights) as git-lfs objects, written without git-lfs's filters.

pygit2 runs no clean/smudge filters, so reef writes what ``git lfs`` would have written: the
standard pointer text as the blob, and the content at ``lfs/objects/<h0:2>/<h2:4>/<sha256>``
inside the bare repository.  ``git lfs fsck`` accepts the result and a ``git clone`` plus
``git lfs`` gives the file back byte for byte.  Release trees that hold such files should carry
:data:`GITATTRIBUTES` so clones treat them as LFS files.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pygit2

from reef_core.errors import NotFound, StoreError
from reef_core.store.repo import blob_at

__all__ = [
    "GITATTRIBUTES",
    "LfsPointer",
    "lfs_object_path",
    "lfs_pointers",
    "parse_pointer",
    "read_lfs",
    "store_lfs",
]

GITATTRIBUTES = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
_SPEC = "version https://git-lfs.github.com/spec/v1"
_CHUNK = 1 << 20
_MAX_POINTER = 1024  # a pointer is about 130 bytes: a larger blob is none


@dataclass(frozen=True)
class LfsPointer:
    oid: str  # sha256 hex
    size: int

    @property
    def text(self) -> bytes:
        return f"{_SPEC}\noid sha256:{self.oid}\nsize {self.size}\n".encode()


def lfs_object_path(repo_path: Path, oid: str) -> Path:
    return repo_path / "lfs" / "objects" / oid[0:2] / oid[2:4] / oid


def parse_pointer(data: bytes) -> LfsPointer | None:
    """The pointer in ``data``, or None if it is not a git-lfs pointer."""
    if len(data) > _MAX_POINTER or not data.startswith(_SPEC.encode()):
        return None
    fields = dict(
        line.split(" ", 1) for line in data.decode("ascii", "replace").splitlines()[1:] if " " in line
    )
    oid = fields.get("oid", "").removeprefix("sha256:")
    size = fields.get("size", "")
    if len(oid) != 64 or not size.isdigit():
        return None
    return LfsPointer(oid=oid, size=int(size))


def lfs_pointers(repo: pygit2.Repository, trees: Iterable[str]) -> dict[str, LfsPointer]:
    """The LFS pointers in ``trees`` (tree ids), by object id; shared subtrees read once, and
    only blobs small enough to be a pointer read at all."""
    found: dict[str, LfsPointer] = {}
    seen: set[str] = set()
    stack = [pygit2.Oid(hex=tree) for tree in trees]
    while stack:
        oid = stack.pop()
        if str(oid) in seen:
            continue
        seen.add(str(oid))
        tree = repo[oid]
        if not isinstance(tree, pygit2.Tree):
            continue
        for entry in tree:
            if entry.type_str == "tree":
                stack.append(entry.id)
            elif entry.type_str == "blob" and str(entry.id) not in seen:
                seen.add(str(entry.id))
                _, size = repo.odb.read_header(entry.id)
                if size <= _MAX_POINTER:
                    pointer = parse_pointer(blob_at(repo, entry.id).data)
                    if pointer is not None:
                        found[pointer.oid] = pointer
    return found


def store_lfs(
    repo: pygit2.Repository, repo_path: Path, source: bytes | Path, *, link: bool = False
) -> tuple[pygit2.Oid, LfsPointer]:
    """Store ``source`` as an LFS object; returns the pointer blob's oid and the pointer.

    With ``link=True`` a file on the same filesystem is hard-linked rather than copied (the
    caller promises never to modify it again).  The object is written under a temporary name
    and renamed into place, so a crash never leaves a truncated object behind.
    """
    objects = repo_path / "lfs" / "objects"
    digest = hashlib.sha256()
    try:
        objects.mkdir(parents=True, exist_ok=True)
        if isinstance(source, bytes):
            digest.update(source)
            pointer = LfsPointer(digest.hexdigest(), len(source))
            target = lfs_object_path(repo_path, pointer.oid)
            if not target.exists():
                _write_atomic(objects, target, lambda f: f.write(source))
        else:
            size = 0
            with open(source, "rb") as handle:
                while chunk := handle.read(_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
            pointer = LfsPointer(digest.hexdigest(), size)
            target = lfs_object_path(repo_path, pointer.oid)
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                linked = False
                if link:
                    try:
                        os.link(source, target)
                        linked = True
                    except OSError:
                        linked = False  # another filesystem: copy instead
                if not linked:
                    _write_atomic(objects, target, lambda f: _copy_into(source, f))
    except OSError as exc:
        raise StoreError(f"cannot store large file: {exc}") from exc
    return repo.create_blob(pointer.text), pointer


def read_lfs(repo_path: Path, pointer: LfsPointer) -> Path:
    path = lfs_object_path(repo_path, pointer.oid)
    if not path.exists():
        raise NotFound(f"LFS object {pointer.oid} is missing from {repo_path}")
    return path


def _copy_into(source: Path, handle) -> None:
    with open(source, "rb") as src:
        shutil.copyfileobj(src, handle, _CHUNK)


def _write_atomic(objects: Path, target: Path, write) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=objects, prefix=".incoming-")
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
