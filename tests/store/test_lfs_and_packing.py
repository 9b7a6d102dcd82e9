"""Large files through git-lfs, and background packing, checked with git and git-lfs."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import time
from pathlib import Path

import pytest

from reef_core.store import (
    GITATTRIBUTES,
    Store,
    StoreOptions,
    build_tree,
    packer,
    parse_pointer,
    read_lfs,
    store_lfs,
)
from tests.conftest import LFS_CONFIG, git, wait_for

needs_lfs = pytest.mark.skipif(shutil.which("git-lfs") is None, reason="git-lfs is not installed")


@needs_lfs
def test_weights_stored_as_lfs_come_back_byte_for_byte_from_a_clone(scenario, tmp_path: Path):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    repo = scenario.handle.repo
    pointer_blob, pointer = store_lfs(repo, scenario.path, weights)
    assert pointer.size == weights.stat().st_size
    assert parse_pointer(repo[pointer_blob].data) == pointer
    assert read_lfs(scenario.path, pointer).read_bytes() == weights.read_bytes()
    tree = build_tree(
        repo,
        {
            ".gitattributes": GITATTRIBUTES,
            "weights/model.safetensors": pointer_blob,
            "weights/config.json": b'{"layers": 2}\n',
        },
    )
    scenario.releases.publish(tree, expected=None, operation="training")

    path = str(scenario.path)
    made_by_lfs = git("-C", path, *LFS_CONFIG, "lfs", "pointer", f"--file={weights}").stdout
    assert made_by_lfs.encode() == pointer.text
    git("-C", path, "lfs", "fsck")
    git("-C", path, "lfs", "fsck", "--pointers")
    listed = git("-C", path, "lfs", "ls-files", "--all").stdout
    assert "weights/model.safetensors" in listed

    clone = tmp_path / "clone"
    git(*LFS_CONFIG, "clone", "--quiet", path, str(clone))
    assert (clone / "weights" / "model.safetensors").read_bytes() == weights.read_bytes()
    assert (clone / "weights" / "config.json").read_text() == '{"layers": 2}\n'


def test_bytes_and_linked_files_are_stored_once(scenario, tmp_path: Path):
    repo = scenario.handle.repo
    data = b"\x00" * 1000
    _, first = store_lfs(repo, scenario.path, data)
    source = tmp_path / "same.bin"
    source.write_bytes(data)
    _, second = store_lfs(repo, scenario.path, source, link=True)
    assert first == second and first.oid == hashlib.sha256(data).hexdigest()
    assert parse_pointer(b"not a pointer") is None
    assert not list((scenario.path / "lfs" / "objects").glob(".incoming-*"))


def _loose_objects(path: Path) -> int:
    counts = dict(
        line.split(": ") for line in git("-C", str(path), "count-objects", "-v").stdout.splitlines()
    )
    return int(counts["count"])


@pytest.mark.slow
def test_background_packing_keeps_the_repository_compact_while_writing(tmp_path: Path):
    store = Store(tmp_path / "state", StoreOptions(pack_every=500, max_batch=64))
    with store.open("s", create=True) as scenario:
        futures = [scenario.append("record", {"n": n, "text": "x" * 300}) for n in range(3000)]
        ids = [f.result() for f in futures]
        scenario.packer.pack_now()
        assert scenario.packer.runs >= 2 and scenario.packer.failures == 0
        for item_id in ids[::97]:
            assert scenario.data.get(item_id).data["n"] == ids.index(item_id)
        more = scenario.append_sync("record", {"after": "packing"})
        assert scenario.data.get(more).data["after"] == "packing"
    path = store.path_of("s")
    assert _loose_objects(path) < 100  # about 24,000 objects were written
    packs = list((path / "objects" / "pack").glob("*.pack"))
    assert 1 <= len(packs) <= 6  # geometric repacking keeps few packs
    git("-C", str(path), "fsck", "--strict", "--no-dangling")
    assert git("-C", str(path), "rev-list", "--count", "data").stdout.strip() == "3001"


@pytest.mark.slow
def test_a_due_repack_waits_for_a_pause_in_writing_unless_it_is_overdue(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(packer, "_QUIET_S", 3.0)  # a pause no busy writer here takes by chance
    store = Store(tmp_path / "state", StoreOptions(pack_every=200))  # due every 10 batches
    with store.open("s", create=True) as scenario:
        for n in range(15):  # due, not overdue (30 batches), and no pause
            scenario.append_sync("record", {"n": n})
        assert scenario.packer.runs == 0
        assert wait_for(lambda: scenario.packer.runs == 1)  # the pause came
        for n in range(35):  # never pausing: overdue after 30 batches, packed anyway
            scenario.append_sync("record", {"n": n})
        assert wait_for(lambda: scenario.packer.runs == 2, timeout=2.5)  # before any pause
    git("-C", str(store.path_of("s")), "fsck", "--strict", "--no-dangling")


def test_a_few_large_items_make_a_repack_due_so_their_uncompressed_bytes_do_not_pile_up(
    tmp_path: Path, monkeypatch
):
    monkeypatch.setattr(packer, "_QUIET_S", 0.05)
    monkeypatch.setattr(packer, "_BYTES", 1024 * 1024)
    store = Store(tmp_path / "state", StoreOptions(pack_every=2000))  # 100 batches, 2000 items
    with store.open("s", create=True) as scenario:
        text = "".join(random.Random(2).choices("abcdefgh ", k=300 * 1024))
        for n in range(3):  # 900 KB: not yet
            scenario.append_sync("record", {"n": n, "text": text})
        time.sleep(0.3)
        assert scenario.packer.runs == 0
        scenario.append_sync("record", {"n": 3, "text": text})  # 1.2 MB
        assert wait_for(lambda: scenario.packer.runs == 1)
        packed = sum(p.stat().st_size for p in (scenario.path / "objects" / "pack").glob("*.pack"))
        assert packed < 600 * 1024  # stored as written (1.2 MB), compressed by the repack
    git("-C", str(store.path_of("s")), "fsck", "--strict", "--no-dangling")
