"""The repack in two steps: the writer's packs are compressed once, git's are merged as they are.

Checked with the real git CLI: which pack files survive each step (by inode), that every
pack git made carries a reverse index, that the work done is the new objects' (not the
history's), and that nothing written is lost.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pygit2
import pytest

from reef_core.store import DATA_REF, Store
from reef_core.store.packer import compress, geometric_roll_up, merge, run_git
from reef_core.store.packs import BLOB, PackBuilder
from reef_core.store.scratch import Spares
from tests.conftest import git


def _record(n: int) -> dict:
    return {
        "n": n,
        "request": {"model": "m", "messages": [{"role": "user", "content": f"question {n % 17}"}]},
        "response": {"choices": [{"message": {"role": "assistant", "content": f"answer {n}"}}]},
    }


def _write(scenario, start: int, count: int, batch: int = 20) -> list[str]:
    """``count`` records in batches of ``batch`` (one small pack each)."""
    ids = []
    for first in range(start, start + count, batch):
        futures = [scenario.append("record", _record(n)) for n in range(first, first + batch)]
        ids += [f.result() for f in futures]
    return ids


def _packs(repo: Path) -> dict[str, int]:
    """Pack name -> inode, for every pack in the repository."""
    return {p.name: p.stat().st_ino for p in (repo / "objects" / "pack").glob("pack-*.pack")}


def _has_rev(repo: Path, name: str) -> bool:
    return (repo / "objects" / "pack" / name.replace(".pack", ".rev")).exists()


def _objects(repo: Path, name: str) -> int:
    """How many objects git says the pack holds."""
    idx = repo / "objects" / "pack" / name.replace(".pack", ".idx")
    listing = subprocess.run(["git", "show-index"], input=idx.read_bytes(), capture_output=True, check=True)
    return len(listing.stdout.splitlines())


def _runner(repo: Path, calls: list[list[str]] | None = None):
    def run(arguments: list[str], stdin) -> str:
        if calls is not None:
            calls.append(arguments)
        return run_git(repo, arguments, stdin)

    return run


def test_compress_packs_only_the_writers_packs_and_merge_only_gits(store: Store):
    with store.open("s", create=True) as scenario:
        repo = scenario.path
        ids = _write(scenario, 0, 400)
        scenario.packer.pack_now()
        (first,) = _packs(repo)  # 20 writer packs became one, made by git
        assert _has_rev(repo, first)
        first_inode = _packs(repo)[first]

        ids += _write(scenario, 400, 400)  # as much again: the progression needs a merge
        raw = set(_packs(repo)) - {first}
        assert len(raw) == 20 and not any(_has_rev(repo, name) for name in raw)
        raw_objects = sum(_objects(repo, name) for name in raw)

        compress(repo, _runner(repo))
        after = _packs(repo)
        assert after[first] == first_inode  # git's pack untouched: not recompressed
        assert not raw & set(after)  # the writer's packs are gone ...
        (second,) = set(after) - {first}  # ... into one new compressed pack
        assert _has_rev(repo, second)
        # what the walk gave git is what was new, not the history under it
        assert _objects(repo, second) == raw_objects
        tip = git("-C", str(repo), "rev-parse", DATA_REF).stdout.strip()
        assert (repo / "reef-packed-tip").read_text().strip() == tip

        ids += _write(scenario, 800, 20)  # a writer pack that arrives before the merge
        (late,) = set(_packs(repo)) - {first, second}
        both = _objects(repo, first) + _objects(repo, second)
        merge(repo, _runner(repo))
        merged = _packs(repo)
        assert late in merged and not _has_rev(repo, late)  # left for the next compression
        assert first not in merged and second not in merged  # git's two, merged as they are
        assert len(merged) == 2
        (big,) = set(merged) - {late}
        assert _has_rev(repo, big) and _objects(repo, big) == both

        for item_id in ids[::37]:
            assert scenario.data.get(item_id).data["n"] == ids.index(item_id)
    git("-C", str(repo), "fsck", "--strict", "--no-dangling")
    assert git("-C", str(repo), "rev-list", "--count", "data").stdout.strip() == "820"


def test_merging_reuses_deltas_and_searches_none(store: Store):
    with store.open("s", create=True) as scenario:
        repo = scenario.path
        for start in (0, 300):  # two compressed packs of one size: the progression is broken
            _write(scenario, start, 300)
            compress(repo, _runner(repo))
        assert len(_packs(repo)) == 2
        before = sum(p.stat().st_size for p in (repo / "objects" / "pack").glob("pack-*.pack"))
        calls: list[list[str]] = []
        merge(repo, _runner(repo, calls))
        assert len(calls) == 1 and "--window=0" in calls[0] and "--revs" not in calls[0]
        (merged,) = _packs(repo)
        after = (repo / "objects" / "pack" / merged).stat().st_size
        assert 0.95 * before <= after <= 1.05 * before  # the same deltas, only put together
    git("-C", str(repo), "fsck", "--strict", "--no-dangling")


def test_objects_no_walk_reaches_and_loose_objects_are_packed_too(store: Store):
    with store.open("s", create=True) as scenario:
        repo = scenario.path
        ids = _write(scenario, 0, 100)
        # a batch that lost its race for the ref: a writer pack nothing points at
        orphan = PackBuilder()
        lost = orphan.add(BLOB, b'{"lost": true}\n').hex()
        orphan.write(repo / "objects", spares=Spares(repo, "orphan", count=4, floor=0))
        # an object written loose (as releases and candidates are, by libgit2)
        loose = str(pygit2.Repository(str(repo)).create_blob(b"loose"))
        assert (repo / "objects" / loose[:2] / loose[2:]).exists()

        compress(repo, _runner(repo))
        assert all(_has_rev(repo, name) for name in _packs(repo))  # no writer pack is left
        for oid in (lost, loose):
            git("-C", str(repo), "cat-file", "-e", oid)  # still there, now packed
        assert not (repo / "objects" / loose[:2] / loose[2:]).exists()
        for item_id in ids[::7]:
            assert scenario.data.get(item_id).data["n"] == ids.index(item_id)
    git("-C", str(repo), "fsck", "--strict")


@pytest.mark.parametrize("marker", ["missing", "unknown commit", "garbage"])
def test_without_a_usable_packed_tip_compress_walks_it_all_and_packs_nothing_twice(store: Store, marker):
    with store.open("s", create=True) as scenario:
        repo = scenario.path
        ids = _write(scenario, 0, 200)
        scenario.packer.pack_now()
        (first,) = _packs(repo)
        ids += _write(scenario, 200, 200)
        raw = set(_packs(repo)) - {first}
        raw_objects = sum(_objects(repo, name) for name in raw)
        marker_file = repo / "reef-packed-tip"
        if marker == "missing":
            marker_file.unlink()
        else:
            marker_file.write_text("ab" * 20 if marker == "unknown commit" else "not an id\n")
        compress(repo, _runner(repo))
        (second,) = set(_packs(repo)) - {first}
        assert _objects(repo, second) == raw_objects  # git's pack's objects were skipped
        for item_id in ids[::13]:
            assert scenario.data.get(item_id).data["n"] == ids.index(item_id)
    git("-C", str(repo), "fsck", "--strict", "--no-dangling")


def test_packs_without_a_reverse_index_are_compressed_as_the_writers_are(store: Store):
    """What a git too old to write ``.rev`` files leaves, or packs from before: they count as
    the writer's, so compress takes (and recompresses) them too."""
    with store.open("s", create=True) as scenario:
        repo = scenario.path
        ids = _write(scenario, 0, 300)
        scenario.packer.pack_now()
        for rev in (repo / "objects" / "pack").glob("*.rev"):
            rev.unlink()
        ids += _write(scenario, 300, 300)
        scenario.packer.pack_now()
        assert scenario.packer.failures == 0
        packs = _packs(repo)
        assert packs and all(_has_rev(repo, name) for name in packs)
        for item_id in ids[::29]:
            assert scenario.data.get(item_id).data["n"] == ids.index(item_id)
    git("-C", str(repo), "fsck", "--strict", "--no-dangling")


def test_repeated_repacks_stay_as_compact_as_one_full_repack(store: Store, tmp_path: Path):
    with store.open("s", create=True) as scenario:
        repo = scenario.path
        for round_ in range(6):
            _write(scenario, round_ * 300, 300)
            scenario.packer.pack_now()
        assert scenario.packer.failures == 0 and scenario.packer.runs == 6
    ours = sum(p.stat().st_size for p in (repo / "objects" / "pack").glob("pack-*.pack"))
    full = tmp_path / "full.git"
    shutil.copytree(repo, full)
    git("-C", str(full), "repack", "-a", "-d", "-q", "-F")
    one = sum(p.stat().st_size for p in (full / "objects" / "pack").glob("pack-*.pack"))
    assert ours <= 1.15 * one, (ours, one)  # each merged pack keeps its own delta bases
    assert len(list((repo / "objects" / "pack").glob("pack-*.pack"))) <= 3


@pytest.mark.parametrize(
    ("counts", "rolled"),
    [
        ([], 0),
        ([7], 0),
        ([1, 2, 4, 8], 0),  # already a progression
        ([3, 4], 2),
        ([1, 1, 10], 2),  # the two small ones; 10 is more than twice their 2
        ([4, 5, 9, 40], 3),  # 4+5+9 = 18, and 40 >= 36
        ([4, 5, 9, 30], 4),  # 30 < 36: it joins too
        ([10, 11, 100, 150], 4),  # the break is at the top: everything
    ],
)
def test_geometric_roll_up_merges_the_fewest_smallest_packs(counts, rolled):
    assert geometric_roll_up(counts) == rolled
