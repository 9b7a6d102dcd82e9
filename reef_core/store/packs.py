"""Writing git objects straight into a pack file, one pack per group commit.

The writer thread appends thousands of small objects a second (a blob, a handful of trees
and a commit per item).  Written loose through libgit2, each is a compressed file of its own:
eight file creations per item, most of the writer's time, and 30 KB of disk per record until
a repack.  Here a batch's objects are serialised and hashed in memory and written as one pack
and its index, so a batch costs two file writes, however many items it holds.

Order matters for a crash: the ``.idx`` goes in first and the ``.pack`` last.  git and
libgit2 skip an index whose pack is missing, whereas a pack without its index is an fsck
error; so a writer killed between the two leaves nothing git complains about, and the next
writer removes the orphan index (:func:`remove_incomplete_packs`).

Format references: gitformat-pack(5) — pack version 2, index version 2.
"""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reef_core.store.scratch import Spares, fsync_dir

__all__ = [
    "BLOB",
    "COMMIT",
    "STORE_MAX",
    "TREE",
    "PackBuilder",
    "TreeEncoder",
    "hash_object",
    "remove_incomplete_packs",
]

_TMP_PREFIX = "tmp_reef_"  # temporary packs of earlier versions, cleared if a killed writer left one

COMMIT, TREE, BLOB = 1, 2, 3
_TYPE_NAMES = {COMMIT: b"commit", TREE: b"tree", BLOB: b"blob"}
_STORED_BLOCK = 0xFFFF  # the most a stored deflate block holds
#: objects up to this size go in uncompressed (see :func:`_store`); larger blobs are deflated.
#: Deflating a 180 KB request (Claude Code's size) took 1.2 ms of its answer; the background
#: repack compresses everything anyway, and the packer repacks after 64 MiB (packer.py).
STORE_MAX = 1024 * 1024
_STORED_HEAD = b"\x78\x01"  # zlib: deflate, 32 KB window, no dictionary, fastest


def hash_object(kind: int, data: bytes) -> bytes:
    """The object id (raw 20-byte SHA-1) git gives ``data`` of ``kind``."""
    # git names objects by SHA-1; not a security use
    return hashlib.sha1(b"%s %d\0%s" % (_TYPE_NAMES[kind], len(data), data)).digest()


@dataclass
class PackBuilder:
    """Collects objects for one pack; :meth:`write` puts it in the repository."""

    level: int = 1  # zlib level: the background repack recompresses and deltifies later
    _chunks: list[bytes] = field(default_factory=list)
    _index: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # oid -> (offset, crc32)
    _offset: int = 12  # after the header

    def add(self, kind: int, data: bytes) -> bytes:
        oid = hash_object(kind, data)
        if oid in self._index:
            return oid
        if kind == TREE or len(data) <= STORE_MAX:
            packed = _object_header(kind, len(data)) + _store(data)
        else:
            packed = _object_header(kind, len(data)) + _deflate(data, self.level)
        return self.add_packed(oid, packed, zlib.crc32(packed))

    def add_packed(self, oid: bytes, packed: bytes, crc: int) -> bytes:
        """Add an object already encoded for the pack (see :class:`TreeEncoder`)."""
        if oid not in self._index:
            self._index[oid] = (self._offset, crc)
            self._chunks.append(packed)
            self._offset += len(packed)
        return oid

    def __len__(self) -> int:
        return len(self._index)

    def write(self, objects_dir: str | Path, *, spares: Spares, fsync: bool = False) -> str:
        """Write ``pack-<sha>.pack`` and its ``.idx`` under ``objects/pack``; returns the .pack.

        The two files are ``spares`` made ahead of time, so this writes and renames but
        creates nothing (unless the stock ran out).
        """
        pack_dir = os.path.join(objects_dir, "pack")
        header = b"PACK" + struct.pack(">II", 2, len(self._index))
        digest = hashlib.sha1(header)
        for chunk in self._chunks:
            digest.update(chunk)
        checksum = digest.digest()
        name = checksum.hex()
        stem = os.path.join(pack_dir, f"pack-{name}")
        _write_file(stem + ".idx", self._index_bytes(checksum), fsync, spares)
        try:
            _write_file(stem + ".pack", b"".join([header, *self._chunks, checksum]), fsync, spares)
        except BaseException:
            # an index whose pack never arrived (a full disk, say) would stay until the next
            # writer's repair (remove_incomplete_packs); take it back now
            if not os.path.exists(stem + ".pack"):
                Path(stem + ".idx").unlink(missing_ok=True)
            raise
        if fsync:
            fsync_dir(pack_dir)
        return stem + ".pack"

    def _index_bytes(self, pack_checksum: bytes) -> bytes:
        oids = sorted(self._index)
        small: list[int] = []
        large: list[int] = []
        for oid in oids:
            offset = self._index[oid][0]
            if offset < 0x80000000:
                small.append(offset)
            else:
                small.append(0x80000000 | len(large))
                large.append(offset)
        body = b"".join(
            [
                b"\xfftOc",
                struct.pack(">I", 2),
                _fanout(oids),
                *oids,
                struct.pack(f">{len(oids)}I", *(self._index[oid][1] for oid in oids)),
                struct.pack(f">{len(small)}I", *small),
                struct.pack(f">{len(large)}Q", *large),
                pack_checksum,
            ]
        )
        return body + hashlib.sha1(body).digest()


class TreeEncoder:
    """Adds one tree to packs again and again while its last entry is what changes.

    A branch whose file names grow with time changes its trees at the end: a new item's name
    sorts last, and above it each tree's last entry (the newest subtree) gets a new id of the
    same length.  For that second kind of change the git hash, the zlib checksum and the pack
    entry's CRC of everything before the last entry are kept, so rewriting a 7 KB tree hashes
    the last entry's 30 bytes.  The owner calls :meth:`forget` after any other change.
    """

    __slots__ = ("_state",)

    def __init__(self) -> None:
        # (sha1 of the prefix, its CRC, its adler32, the packed prefix, entry count, last size)
        self._state: tuple[Any, int, int, bytes, int, int] | None = None

    def forget(self) -> None:
        self._state = None

    def add(self, pack: PackBuilder, parts: list[bytes]) -> bytes:
        """Add the tree whose serialised entries, in git's order, are ``parts``; its id."""
        state = self._state
        if state is None or state[4] != len(parts) or state[5] != len(parts[-1]):
            data = b"".join(parts)
            if not parts or len(data) > _STORED_BLOCK:  # more than one stored block: no shortcut
                self._state = None
                return pack.add(TREE, data)
            size = len(data)
            prefix = data[: size - len(parts[-1])]
            sha = hashlib.sha1(b"tree %d\0" % size)
            sha.update(prefix)
            # what _store writes for one block: zlib header, final block of `size` bytes
            head = _object_header(TREE, size) + _STORED_HEAD + struct.pack("<BHH", 1, size, size ^ 0xFFFF)
            packed_prefix = head + prefix
            crc, adler = zlib.crc32(packed_prefix), zlib.adler32(prefix)
            state = self._state = (sha, crc, adler, packed_prefix, len(parts), len(parts[-1]))
        sha, crc, adler, packed_prefix, _, _ = state
        last = parts[-1]
        digest = sha.copy()
        digest.update(last)
        trailer = struct.pack(">I", zlib.adler32(last, adler))
        packed = packed_prefix + last + trailer
        return pack.add_packed(digest.digest(), packed, zlib.crc32(trailer, zlib.crc32(last, crc)))


def _deflate(data: bytes, level: int) -> bytes:
    """zlib-compress one object with a window no larger than it needs.

    ``zlib.compress`` sets up a 256 KB state for each call, which costs more than compressing
    a small record; a window sized to the data (any size is valid for git's inflate) makes the
    setup cheap.  memLevel 4 keeps the hash table small without the long collision chains
    that memLevel 1 suffers on data with little repetition.
    """
    window = max(9, min(15, len(data).bit_length()))
    compressor = zlib.compressobj(level, zlib.DEFLATED, window, 4)
    return compressor.compress(data) + compressor.flush()


def _fanout(oids: list[bytes]) -> bytes:
    """The index's fan-out table: for each first byte b, how many (sorted) ids start with <= b.

    Built as runs of one value, since a small pack's 256 entries take only a few values.
    """
    runs = []
    filled = 0  # entries [0, filled) are written
    for i, oid in enumerate(oids):
        first = oid[0]
        if first > filled:  # entries up to this id's first byte count the i ids before it
            runs.append(struct.pack(">I", i) * (first - filled))
            filled = first
    runs.append(struct.pack(">I", len(oids)) * (256 - filled))
    return b"".join(runs)


def _object_header(kind: int, size: int) -> bytes:
    """A pack entry's header: the type and the size, 4 bits then 7 bits a byte."""
    header = bytearray()
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    while size:
        header.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    header.append(byte)
    return bytes(header)


def _store(data: bytes) -> bytes:
    """A zlib stream of stored (uncompressed) blocks, built directly (RFC 1950/1951).

    Trees are mostly SHA-1s, which do not compress (a 7 KB tree shrinks by about 12 %), yet
    deflating one costs 100-500 us; storing costs a copy.  A small record or commit would
    shrink, but setting up a compressor costs more than the rest of writing it.  The
    background repack (``git repack -F``) recompresses every object and deltifies trees
    against their previous versions, which is where the real saving is; until then a pack
    holds at most a few thousand items, so the space stored objects take is bounded.
    """
    parts = [_STORED_HEAD]
    size = len(data)
    for start in range(0, max(size, 1), _STORED_BLOCK):  # empty data: one empty final block
        block = data[start : start + _STORED_BLOCK]
        final = 1 if start + _STORED_BLOCK >= size else 0
        parts.append(struct.pack("<BHH", final, len(block), len(block) ^ 0xFFFF))
        parts.append(block)
    parts.append(struct.pack(">I", zlib.adler32(data)))
    return b"".join(parts)


def _write_file(target: str, data: bytes, fsync: bool, spares: Spares) -> None:
    """``data`` as the new file ``target``, complete the moment it appears.

    The spare file is linked to ``target``, not renamed: a link locks only the directory it
    adds a name to, while a rename would also wait for the scratch directory, where the
    writer thread may be making files (on ext4 without a journal, 0.1-1 ms each, then).  The
    spare's own name is removed later by the writer thread (:meth:`Spares.used`).
    """
    fd, tmp = spares.take()
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, target)
        except FileExistsError:  # the same content is there already (names are its hash)
            os.replace(tmp, target)
            return
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    spares.used(tmp)


def remove_incomplete_packs(objects_dir: Path) -> list[Path]:
    """Remove what a writer killed mid-:meth:`PackBuilder.write` left: temporary files and
    indexes whose pack never arrived.  Call only while holding the writer lock."""
    pack_dir = objects_dir / "pack"
    if not pack_dir.is_dir():
        return []
    removed = []
    for path in pack_dir.iterdir():
        orphan = path.suffix == ".idx" and not path.with_suffix(".pack").exists()
        if path.name.startswith(_TMP_PREFIX) or orphan:
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed
