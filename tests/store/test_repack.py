"""The repack in two steps: the writer's packs are compressed once, git's are merged as they are.

Checked with the real git CLI: which pack files survive each step (by inode), that every
pack git made carries a reverse index, and that nothing written is lost.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from reef_core.store import Store
from reef_core.store.packer import GIT_COMMAND, compress_step, merge_step
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


def _step(arguments: list[str]) -> None:
    subprocess.run([*GIT_COMMAND, *arguments], check=True, capture_output=True, timeout=120)


def test_the_first_step_compresses_only_the_writers_packs_and_the_second_merges_only_gits(
    store: Store,
):
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

        _step(compress_step(repo))
        after = _packs(repo)
        assert after[first] == first_inode  # git's pack untouched: not recompressed
        assert not raw & set(after)  # the writer's packs are gone ...
        (second,) = set(after) - {first}  # ... into one new compressed pack
        assert _has_rev(repo, second)

        ids += _write(scenario, 800, 20)  # a writer pack that arrives before the merge
        (late,) = set(_packs(repo)) - {first, second}
        _step(merge_step(repo))
        merged = _packs(repo)
        assert late in merged and not _has_rev(repo, late)  # left for the next first step
        assert first not in merged and second not in merged  # git's two, merged as they are
        assert len(merged) == 2

        for item_id in ids[::37]:
            assert scenario.data.get(item_id).data["n"] == ids.index(item_id)
    git("-C", str(repo), "fsck", "--strict", "--no-dangling")
    assert git("-C", str(repo), "rev-list", "--count", "data").stdout.strip() == "820"


def test_packs_without_a_reverse_index_are_compressed_as_the_writers_are(store: Store):
    """What a git too old to write ``.rev`` files leaves, or packs from before: they count as
    the writer's, so the first step merges (and recompresses) them, as one repack did before."""
    with store.open("s", create=True) as scenario:
        repo = scenario.path
        ids = _write(scenario, 0, 300)
        scenario.packer.pack_now()
        for rev in (repo / "objects" / "pack").glob("*.rev"):
            rev.unlink()
        ids += _write(scenario, 300, 300)  # as much again: the old pack is merged too
        scenario.packer.pack_now()
        assert scenario.packer.failures == 0
        packs = _packs(repo)
        assert packs and all(_has_rev(repo, name) for name in packs)
        assert len(packs) == 1  # old and new together, compressed in one step
        for item_id in ids[::29]:
            assert scenario.data.get(item_id).data["n"] == ids.index(item_id)
    git("-C", str(repo), "fsck", "--strict", "--no-dangling")


def test_two_step_repacks_stay_as_compact_as_one_full_repack(store: Store, tmp_path: Path):
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
