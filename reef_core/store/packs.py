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
import itertools
import os
import struct
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from reef_core.store.scratch import Spares, fsync_dir

__all__ = ["BLOB", "COMMIT", "TREE", "PackBuilder", "hash_object", "remove_incomplete_packs", "tree_bytes"]

_TMP_PREFIX = "tmp_reef_"

COMMIT, TREE, BLOB = 1, 2, 3
_TYPE_NAMES = {COMMIT: b"commit", TREE: b"tree", BLOB: b"blob"}
_STORED_BLOCK = 0xFFFF  # the most a stored deflate block holds
_DIR_MODE = b"40000"
_FILE_MODE = b"100644"


def hash_object(kind: int, data: bytes) -> bytes:
    """The object id (raw 20-byte SHA-1) git gives ``data`` of ``kind``."""
    # git names objects by SHA-1; not a security use
    return hashlib.sha1(b"%s %d\0%s" % (_TYPE_NAMES[kind], len(data), data)).digest()


def tree_bytes(entries: dict[str, tuple[bool, bytes]]) -> bytes:
    """Serialise a tree: ``name -> (is_dir, raw oid)``, in git's order (dirs sort as 'name/')."""
    ordered = sorted(entries.items(), key=lambda kv: kv[0].encode() + (b"/" if kv[1][0] else b""))
    return b"".join(
        (_DIR_MODE if is_dir else _FILE_MODE) + b" " + name.encode() + b"\0" + oid
        for name, (is_dir, oid) in ordered
    )


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
        size = len(data)
        header = bytearray()
        byte = (kind << 4) | (size & 0x0F)
        size >>= 4
        while size:
            header.append(byte | 0x80)
            byte = size & 0x7F
            size >>= 7
        header.append(byte)
        packed = bytes(header) + (_store(data) if kind == TREE else _deflate(data, self.level))
        self._index[oid] = (self._offset, zlib.crc32(packed))
        self._chunks.append(packed)
        self._offset += len(packed)
        return oid

    def __len__(self) -> int:
        return len(self._index)

    def write(self, objects_dir: Path, *, fsync: bool = False, spares: Spares | None = None) -> Path:
        """Write ``pack-<sha>.pack`` and its ``.idx`` under ``objects/pack``; returns the .pack.

        With ``spares`` the two files are made ahead of time, so this writes and
        renames but creates nothing.
        """
        pack_dir = objects_dir / "pack"
        if spares is None:
            pack_dir.mkdir(parents=True, exist_ok=True)  # a writer's spares come after its repository
        header = b"PACK" + struct.pack(">II", 2, len(self._index))
        digest = hashlib.sha1(header)
        for chunk in self._chunks:
            digest.update(chunk)
        checksum = digest.digest()
        name = checksum.hex()
        pack_path = pack_dir / f"pack-{name}.pack"
        idx_path = pack_dir / f"pack-{name}.idx"
        _write_file(pack_dir, idx_path, self._index_bytes(checksum), fsync, spares)
        _write_file(pack_dir, pack_path, b"".join([header, *self._chunks, checksum]), fsync, spares)
        if fsync:
            fsync_dir(pack_dir)
        return pack_path

    def _index_bytes(self, pack_checksum: bytes) -> bytes:
        oids = sorted(self._index)
        counts = [0] * 256
        for oid in oids:
            counts[oid[0]] += 1
        fanout = itertools.accumulate(counts)
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
                struct.pack(">256I", *fanout),
                *oids,
                struct.pack(f">{len(oids)}I", *(self._index[oid][1] for oid in oids)),
                struct.pack(f">{len(small)}I", *small),
                struct.pack(f">{len(large)}Q", *large),
                pack_checksum,
            ]
        )
        return body + hashlib.sha1(body).digest()


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


def _store(data: bytes) -> bytes:
    """A zlib stream of stored (uncompressed) blocks, built directly (RFC 1950/1951).

    Trees are mostly SHA-1s, which do not compress (a 7 KB tree shrinks by about 12 %), yet
    deflating one costs 100-500 us; storing costs a copy.  The background repack deltifies
    trees against their previous versions, which is where their real saving is.
    """
    parts = [b"\x78\x01"]  # deflate, 32 KB window, no dictionary, fastest
    size = len(data)
    for start in range(0, max(size, 1), _STORED_BLOCK):  # empty data: one empty final block
        block = data[start : start + _STORED_BLOCK]
        final = 1 if start + _STORED_BLOCK >= size else 0
        parts.append(struct.pack("<BHH", final, len(block), len(block) ^ 0xFFFF))
        parts.append(block)
    parts.append(struct.pack(">I", zlib.adler32(data)))
    return b"".join(parts)


def _write_file(directory: Path, target: Path, data: bytes, fsync: bool, spares: Spares | None) -> None:
    """``data`` as the new file ``target``, complete the moment it appears."""
    if spares is None:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=_TMP_PREFIX)
    else:
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
        if spares is None:
            os.chmod(tmp, 0o444)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
