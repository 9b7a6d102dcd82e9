"""Groups: items committed together or not at all, whatever else is being appended."""

from __future__ import annotations

import threading

import pytest

from reef_core.errors import InvalidInput, StoreError
from reef_core.store import DATA_REF, GroupItem, Store, StoreOptions
from reef_core.store import writer as writer_module
from tests.conftest import git


def _tip(scenario) -> str | None:
    found = git("--git-dir", str(scenario.path), "rev-parse", "-q", "--verify", DATA_REF, check=False)
    return found.stdout.strip() or None


def _count(scenario) -> int:
    return int(git("--git-dir", str(scenario.path), "rev-list", "--count", DATA_REF).stdout.strip())


def _items(n: int, tag: str = "g") -> list[GroupItem]:
    return [GroupItem("record", {"n": i, "tag": tag}, summary=f"{tag} {i}") for i in range(n)]


def test_a_group_larger_than_a_batch_is_one_ref_move_and_one_commit_per_item(tmp_path, monkeypatch):
    moves = []
    real_move = writer_module.move_ref

    def counted(*args, **kwargs):
        moves.append(args[2:4])
        return real_move(*args, **kwargs)

    monkeypatch.setattr(writer_module, "move_ref", counted)
    store = Store(tmp_path / "state", StoreOptions(pack_every=0, max_batch=16))
    with store.open("s", create=True) as scenario:
        scenario.append_sync("record", {"first": True})
        ids = scenario.append_group(_items(1000)).result(timeout=60)
        assert len(ids) == len(set(ids)) == 1000 and ids == sorted(ids)
        assert len(moves) == 1  # max_batch is 16, and the group was never split
        assert _count(scenario) == 1001
        assert [scenario.data.get(i).data["n"] for i in ids[::250]] == [0, 250, 500, 750]
        git("--git-dir", str(scenario.path), "fsck", "--strict")


def test_a_group_that_fails_to_commit_leaves_nothing_and_the_writer_goes_on(scenario, monkeypatch):
    scenario.append_sync("record", {"before": True})
    tip = _tip(scenario)
    real_write = writer_module.PackBuilder.write
    failing = [True]

    def write(self, *args, **kwargs):
        if failing[0]:
            failing[0] = False
            raise OSError("injected I/O error")
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(writer_module.PackBuilder, "write", write)
    with pytest.raises(StoreError, match="injected"):
        scenario.append_group(_items(50)).result(timeout=30)
    assert _tip(scenario) == tip
    assert _count(scenario) == 1
    ids = scenario.append_group(_items(3, "again")).result(timeout=30)
    assert [scenario.data.get(i).data["tag"] for i in ids] == ["again"] * 3
    assert _count(scenario) == 4


def test_bad_input_anywhere_in_a_group_queues_none_of_it(scenario):
    tip = _tip(scenario)
    bad = [*_items(2), GroupItem("record", {"id": "mine"})]
    with pytest.raises(InvalidInput, match="'id' is set by the store"):
        scenario.append_group(bad)
    with pytest.raises(InvalidInput, match="not JSON-serialisable"):
        scenario.append_group([*_items(2), GroupItem("record", {"x": object()})])
    with pytest.raises(InvalidInput, match="at least one"):
        scenario.append_group([])
    scenario.append_sync("record", {"after": True})
    assert _count(scenario) == 1 and _tip(scenario) != tip


def test_groups_and_single_appends_from_threads_keep_each_groups_items_together(scenario):
    results: dict[str, list[str]] = {}

    def group(tag: str) -> None:
        results[tag] = scenario.append_group(_items(40, tag)).result(timeout=60)

    def singles() -> None:
        for i in range(100):
            scenario.append("record", {"single": i})

    threads = [threading.Thread(target=group, args=(f"t{n}",)) for n in range(4)]
    threads.append(threading.Thread(target=singles))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    scenario.append_sync("record", {"last": True})
    log = git("--git-dir", str(scenario.path), "log", "--reverse", "--format=%s", DATA_REF).stdout
    log = log.splitlines()
    assert len(log) == 4 * 40 + 101
    for tag, ids in results.items():
        # a group's commits are consecutive on the branch: nothing came between them
        positions = [n for n, line in enumerate(log) if f"{tag} " in line]
        assert positions == list(range(positions[0], positions[0] + 40)), tag
        assert ids == sorted(ids)


def test_an_item_of_a_group_can_name_the_ids_of_the_items_before_it(scenario):
    def report(before: list[str]) -> GroupItem:
        return GroupItem("report", {"references": before[:2], "score": 1.0})

    ids = scenario.append_group([*_items(2), report]).result(timeout=30)
    assert scenario.data.get(ids[2]).data["references"] == ids[:2]

    def bad(before: list[str]) -> GroupItem:
        raise InvalidInput("references[0] is unknown", field="references[0]")

    tip = _tip(scenario)
    with pytest.raises(InvalidInput, match="unknown"):
        scenario.append_group([*_items(2), bad])
    scenario.append_sync("record", {"after": True})
    assert _count(scenario) == 4 and _tip(scenario) != tip
