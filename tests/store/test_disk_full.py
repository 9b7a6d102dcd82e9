"""A full disk at each of the store's write points: the write is refused with DiskFull
(naming the state directory and what is free), the repository stays readable and
``git fsck`` clean, and the next write works once space is back.

The disk is a real tmpfs filled by a file (``small_disk``); the ref update, whose file is
made ahead and rewritten in place, cannot run out of room on a real disk, so there the
operating system's error is injected.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest

from reef_core.errors import DiskFull
from reef_core.store import Store, StoreOptions
from reef_core.store import repo as repo_module
from tests.conftest import git


def fsck_clean(path: Path) -> None:
    git("--git-dir", str(path), "fsck", "--strict", "--no-progress")


def pack_dir_is_whole(path: Path) -> None:
    """Every index has its pack, and nothing half-written is left beside them."""
    pack_dir = path / "objects" / "pack"
    for idx in pack_dir.glob("*.idx"):
        assert idx.with_suffix(".pack").exists(), f"{idx.name} has no pack"
    assert not [p for p in pack_dir.iterdir() if p.name.startswith("tmp")]


def logged_ids(path: Path) -> list[str]:
    return [
        line.split()[1]
        for line in git("--git-dir", str(path), "log", "--format=%s", "data").stdout.splitlines()
    ]


@pytest.mark.parametrize(
    "point, leave, size",
    [
        ("index", 0, 100),  # not even the index fits
        ("pack", 4096, 300_000),  # the index fits in the last page, the pack does not
    ],
)
def test_a_full_disk_refuses_the_write_and_the_next_one_works_once_space_is_back(
    small_disk, caplog, point, leave, size
):
    store = Store(small_disk.path / "state", StoreOptions(pack_every=0))
    with store.open("s", create=True) as scenario:
        kept = [scenario.append_sync("record", {"n": i}) for i in range(5)]
        small_disk.fill(leave=leave)
        with caplog.at_level(logging.ERROR, logger="reef_core.store"):
            for _ in range(20):
                with pytest.raises(DiskFull) as caught:
                    scenario.append_sync("record", {"pad": "x" * size})
        message = caught.value.message
        assert str(store.state_dir) in message and "free" in message
        assert store.space.full and store.space.describe()["failed_writes"] == 20
        # one line for twenty refusals, and no traceback
        lines = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(lines) == 1 and lines[0].exc_info is None
        pack_dir_is_whole(scenario.path)
        fsck_clean(scenario.path)
        assert logged_ids(scenario.path) == list(reversed(kept))

        small_disk.make_room()
        after = scenario.append_sync("record", {"pad": "x" * size})
        assert not store.space.full and store.space.describe() is None
    fsck_clean(store.path_of("s"))
    reader = store.reader("s")
    assert [item.id for item in reader.data.iter_items()] == [*kept, after]


def test_a_full_disk_at_the_ref_update_is_not_retried_as_a_race(store, monkeypatch):
    with store.open("s", create=True) as scenario:
        kept = scenario.append_sync("record", {"n": 1})
        calls = []
        real_fill = repo_module._fill

        def full(fd: int, data: bytes, fsync: bool) -> None:
            calls.append(data)
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(repo_module, "_fill", full)
        with pytest.raises(DiskFull):
            scenario.append_sync("record", {"n": 2})
        assert len(calls) == 1  # refused at once, not tried twenty times over 1.5 s
        assert not (scenario.path / "refs" / "heads" / "data.lock").exists()
        fsck_clean(scenario.path)
        monkeypatch.setattr(repo_module, "_fill", real_fill)
        after = scenario.append_sync("record", {"n": 3})
    assert [item.id for item in store.reader("s").data.iter_items()] == [kept, after]
    fsck_clean(store.path_of("s"))


def test_a_repack_on_a_full_disk_fails_cleanly_and_runs_once_space_is_back(small_disk):
    store = Store(small_disk.path / "state", StoreOptions(pack_every=0))
    with store.open("s", create=True) as scenario:
        ids = [scenario.append_sync("record", {"n": i, "pad": "y" * 2000}) for i in range(200)]
        packs_before = sorted(p.name for p in (scenario.path / "objects" / "pack").glob("*.pack"))
        small_disk.fill()
        scenario.packer.pack_now()
        assert scenario.packer.failures == 1
        pack_dir_is_whole(scenario.path)
        fsck_clean(scenario.path)
        assert [item.id for item in scenario.data.iter_items()] == ids
        small_disk.make_room()
        scenario.packer.pack_now()
        assert scenario.packer.failures == 1
        packs_after = sorted(p.name for p in (scenario.path / "objects" / "pack").glob("*.pack"))
        assert len(packs_after) < len(packs_before)
        ids.append(scenario.append_sync("record", {"n": "after"}))
    fsck_clean(store.path_of("s"))
    assert [item.id for item in store.reader("s").data.iter_items()] == ids
