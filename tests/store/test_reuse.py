"""Packs a repack merged become the writer's spare files, unless someone still reads them.

See ``reef_core/store/scratch.py``: on ext4 without a journal every freed inode makes file
creation slower for minutes, so reef reuses the small packs' files rather than freeing them,
and asks the kernel (a write lease) whether any process still has one open or mapped first.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from reef_core.ids import parse_item_id
from reef_core.store import DATA_REF, Store, StoreOptions
from reef_core.store import scratch as scratch_module
from reef_core.store.scratch import FREED_DIR, SCRATCH_DIR
from tests.conftest import git, wait_for


def small_packs(repo: Path) -> dict[Path, int]:
    """The writer's one-commit packs and their indexes, by inode."""
    packs = (repo / "objects" / "pack").glob("pack-*")
    return {p: p.stat().st_ino for p in packs if p.suffix in (".pack", ".idx")}


def records_read_back(repo: Path, ids: list[str]) -> None:
    for item_id in ids:
        shown = git("--git-dir", str(repo), "show", f"{DATA_REF}:{parse_item_id(item_id).path}").stdout
        assert f'"id":"{item_id}"' in shown.replace(" ", "")


def mapped(pid: int) -> set[int]:
    """Inodes of the pack files process ``pid`` maps."""
    lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return {int(line.split()[4]) for line in lines if "/objects/pack/" in line}


def test_the_files_of_merged_packs_hold_the_next_commits(tmp_path: Path):
    # a stock of 100 at most, and up to 200 freed files kept
    store = Store(tmp_path / "state", StoreOptions(pack_every=0, spare_files=100))
    with store.open("s", create=True) as scenario:
        ids = [scenario.append_sync("record", {"n": n}) for n in range(150)]
        merged = small_packs(scenario.path)
        assert len(merged) >= 300
        scenario.packer.pack_now()
        assert not set(merged) & set(small_packs(scenario.path))  # git merged them all
        # kept, not freed; emptied at the writer's next pause, so they hold no space
        freed = scenario.path / SCRATCH_DIR / FREED_DIR
        assert len(list(freed.iterdir())) >= 200
        assert wait_for(lambda: sum(f.stat().st_size for f in freed.iterdir()) == 0)
        spares = scenario.writer.spares
        made = spares.made
        before = set(small_packs(scenario.path))
        for n in range(150, 250):
            ids.append(scenario.append("record", {"n": n}, now=n % 3 != 0).result())
        written = {p: ino for p, ino in small_packs(scenario.path).items() if p not in before}
        assert len(written) == 200
        # no file made for them: the stock, then the merged packs' own inodes
        assert spares.made == made and spares.reused >= 100
        assert len(set(written.values()) & set(merged.values())) >= 100
    repo = store.path_of("s")
    records_read_back(repo, ids)
    assert "garbage: 0" in git("--git-dir", str(repo), "count-objects", "-v").stdout
    git("--git-dir", str(repo), "fsck", "--strict", "--no-dangling")


def test_a_pack_a_reader_still_has_open_is_not_reused_until_it_lets_go(tmp_path: Path):
    store = Store(tmp_path / "state", StoreOptions(pack_every=0, spare_files=64))
    with store.open("s", create=True) as scenario:
        first = scenario.append_sync("record", {"n": 0, "text": "read while repacked"})
        for n in range(1, 60):
            scenario.append_sync("record", {"n": n})
        repo = scenario.path
        path = parse_item_id(first).path
        blob = git("--git-dir", str(repo), "rev-parse", f"{DATA_REF}:{path}").stdout.strip()
        # a long-lived git reader, as `git log` or a pager would be: it maps the packs it read
        reader = subprocess.Popen(
            ["git", "--git-dir", str(repo), "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        try:
            assert reader.stdin and reader.stdout

            def read_blob() -> bytes:
                reader.stdin.write(f"{blob}\n".encode())
                reader.stdin.flush()
                size = int(reader.stdout.readline().split()[2])
                return reader.stdout.read(size + 1)[:-1]

            original = read_blob()
            assert b"read while repacked" in original
            held = mapped(reader.pid)
            assert held  # the reader maps (some of) the small packs
            scenario.packer.pack_now()
            freed = repo / SCRATCH_DIR / FREED_DIR
            before = set(small_packs(repo))
            for n in range(60, 260):  # more than the stock and everything merged
                scenario.append("record", {"n": n}, now=True).result()
            written = {ino for p, ino in small_packs(repo).items() if p not in before}
            assert not written & held  # what the reader maps was left alone ...
            assert held <= {p.stat().st_ino for p in freed.iterdir()}  # ... and kept for later
            assert read_blob() == original  # and it still reads what it read
        finally:
            reader.kill()
            reader.wait()
        # once the reader is gone, files found open are tried again at the next idle moment
        # (after some writing), and the commits after it are written into them
        before = set(small_packs(repo))
        for n in range(260, 300):
            scenario.append("record", {"n": n}, now=True).result()
        time.sleep(0.2)
        for n in range(300, 600):
            scenario.append("record", {"n": n}, now=True).result()
        written = {ino for p, ino in small_packs(repo).items() if p not in before}
        assert held <= written
    git("--git-dir", str(store.path_of("s")), "fsck", "--strict", "--no-dangling")


def test_without_leases_merged_packs_are_freed_as_git_would(store: Store, monkeypatch):
    monkeypatch.setattr(scratch_module, "_LEASES", False)
    with store.open("s", create=True) as scenario:
        ids = [scenario.append_sync("record", {"n": n}) for n in range(40)]
        scenario.packer.pack_now()
        freed = scenario.path / SCRATCH_DIR / FREED_DIR
        assert not freed.exists() or not list(freed.iterdir())
        ids += [scenario.append("record", {"n": n}, now=True).result() for n in range(40, 80)]
        assert scenario.writer.spares.reused == 0
    records_read_back(store.path_of("s"), ids)
    git("--git-dir", str(store.path_of("s")), "fsck", "--strict", "--no-dangling")


def test_packs_merged_after_the_writer_closed_are_left_for_the_next_writer(store: Store):
    scenario = store.open("s", create=True)
    ids = [scenario.append_sync("record", {"n": n}) for n in range(30)]
    scenario.writer.close()
    scenario.packer.pack_now()  # a repack that finishes after the writer stopped
    freed = scenario.path / SCRATCH_DIR / FREED_DIR
    left = sorted(freed.iterdir())
    assert len(left) >= 40  # the merged packs and indexes: not freed
    assert all(path.stat().st_nlink == 1 for path in left)
    scenario.close()
    with store.open("s") as again:  # the next writer empties them into its spare files
        ids += [again.append("record", {"n": n}, now=True).result() for n in range(30, 40)]
        assert wait_for(lambda: again.writer.spares.reused >= 40)
        assert again.writer.spares.made == 0
    records_read_back(store.path_of("s"), ids)
    git("--git-dir", str(store.path_of("s")), "fsck", "--strict", "--no-dangling")
