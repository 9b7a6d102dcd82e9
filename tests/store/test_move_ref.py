"""move_ref: the data branch's compare-and-swap, with git's own lock protocol."""

from __future__ import annotations

from pathlib import Path

import pytest

from reef_core.errors import ConflictError
from reef_core.store import Store, StoreOptions
from reef_core.store.repo import move_ref, read_ref
from tests.conftest import git

DATA = "refs/heads/data"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    store = Store(tmp_path / "state", StoreOptions(pack_every=0))
    with store.open("s", create=True) as scenario:
        scenario.append_sync("record", {"n": 1})
        scenario.append_sync("record", {"n": 2})
    return store.path_of("s")


def commits(repo: Path) -> list[str]:
    return git("--git-dir", str(repo), "rev-list", DATA).stdout.split()


def test_moves_the_ref_as_git_sees_it_and_refuses_a_stale_expectation(repo: Path):
    second, first = commits(repo)
    move_ref(repo, DATA, second, first)
    assert git("--git-dir", str(repo), "rev-parse", DATA).stdout.strip() == first
    with pytest.raises(ConflictError, match="moved"):
        move_ref(repo, DATA, second, second)  # the ref is at first now
    assert read_ref(repo, DATA) == first
    assert not (repo / "refs/heads/data.lock").exists()


def test_a_held_lock_is_a_conflict_and_is_left_to_its_holder(repo: Path):
    second, first = commits(repo)
    lock = repo / "refs/heads/data.lock"
    lock.write_text("someone else\n")
    with pytest.raises(ConflictError, match="locked"):
        move_ref(repo, DATA, second, first)
    assert lock.read_text() == "someone else\n" and read_ref(repo, DATA) == second


def test_a_packed_ref_is_read_and_the_move_writes_it_loose(repo: Path):
    second, first = commits(repo)
    git("--git-dir", str(repo), "pack-refs", "--all")
    assert not (repo / DATA).exists() and read_ref(repo, DATA) == second
    move_ref(repo, DATA, second, first)
    assert git("--git-dir", str(repo), "rev-parse", DATA).stdout.strip() == first
    git("--git-dir", str(repo), "fsck", "--strict")


def test_the_writer_keeps_appending_after_git_packed_its_refs(tmp_path: Path):
    store = Store(tmp_path / "state", StoreOptions(pack_every=0))
    with store.open("s", create=True) as scenario:
        scenario.append_sync("record", {"n": 1})
    git("--git-dir", str(store.path_of("s")), "pack-refs", "--all")
    with store.open("s") as scenario:
        ids = [scenario.append_sync("record", {"n": n}) for n in range(2, 5)]
        assert all(scenario.data.exists(i) for i in ids)
    assert len(commits(store.path_of("s"))) == 4
