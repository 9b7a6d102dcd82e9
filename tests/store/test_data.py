"""The data branch: appends, reads, cursors, group commit — checked with the git CLI."""

from __future__ import annotations

import json
import threading

import pygit2
import pytest

from reef_core.errors import InvalidInput, NotFound, StoreError
from reef_core.ids import parse_item_id
from reef_core.store import DATA_REF, Store
from tests.conftest import git


def test_append_and_read_round_trip(scenario):
    rec = scenario.append_sync(
        "record",
        {"request": {"model": "m", "messages": [{"role": "user", "content": "héllo"}]}, "status": 200},
        summary="chat.completions model=m 200 12ms",
        trailers={"Model": "m"},
    )
    rep = scenario.append_sync("report", {"score": 1.0, "references": [rec]}, summary=f"score=1.0 refs={rec}")
    item = scenario.data.get(rec)
    assert item.kind == "record"
    assert item.data["request"]["messages"][0]["content"] == "héllo"
    assert item.data["id"] == rec and item.created_at.endswith("Z")
    assert scenario.data.get(rep).data["references"] == [rec]
    assert scenario.data.counts() == {"record": 1, "report": 1, "ask": 0}


def test_git_cli_reads_the_log_and_fsck_is_clean(scenario):
    rec = scenario.append_sync("record", {"status": 200}, summary="chat.completions model=m 200 5ms v3")
    ask = scenario.append_sync("ask", {"text": "reproduce bugs first"}, summary='"reproduce bugs first"')
    path = scenario.path
    oneline = git("-C", str(path), "log", "--format=%s", "data").stdout.splitlines()
    assert oneline == [
        f'ask {ask} "reproduce bugs first"',
        f"record {rec} chat.completions model=m 200 5ms v3",
    ]
    trailers = git("-C", str(path), "log", "-1", "--format=%(trailers:key=Reef-Id,valueonly)", "data").stdout
    assert trailers.strip() == ask
    shown = git("-C", str(path), "show", f"data:{_path(rec)}").stdout
    assert json.loads(shown)["id"] == rec
    git("-C", str(path), "fsck", "--strict", "--no-dangling")


def _path(item_id: str) -> str:
    return parse_item_id(item_id).path


def test_each_item_is_one_commit_adding_one_file(scenario):
    ids = [scenario.append_sync("record", {"n": n}) for n in range(5)]
    path = str(scenario.path)
    assert git("-C", path, "rev-list", "--count", "data").stdout.strip() == "5"
    for item_id in ids:
        changed = git(
            "-C", path, "log", "--format=", "--name-status", f"--grep={item_id}", "data"
        ).stdout.split()
        assert changed == ["A", _path(item_id)]


def test_unknown_and_malformed_ids(scenario):
    scenario.append_sync("record", {})
    with pytest.raises(NotFound):
        scenario.data.get("rec_" + "0" * 28)
    with pytest.raises(InvalidInput):
        scenario.data.get("../../etc/passwd")


def test_bad_input_changes_nothing(scenario):
    scenario.append_sync("record", {"n": 1})
    before = scenario.data.tip().id
    with pytest.raises(InvalidInput, match="not JSON-serialisable"):
        scenario.append("record", {"x": object()})
    with pytest.raises(InvalidInput, match="'id' is set by the store"):
        scenario.append("record", {"id": "mine"})
    with pytest.raises(InvalidInput, match="unknown item kind"):
        scenario.append("nonsense", {})
    assert scenario.data.tip().id == before


def test_iterate_after_a_cursor_in_write_order_across_kinds(scenario):
    ids = []
    for n in range(30):
        kind = ("record", "report", "ask")[n % 3]
        ids.append(scenario.append_sync(kind, {"n": n}))
    assert [i.id for i in scenario.data.iter_items()] == ids
    assert [i.id for i in scenario.data.iter_items(after=ids[9])] == ids[10:]
    assert [i.id for i in scenario.data.iter_items(after=ids[-1])] == []
    assert [i.id for i in scenario.data.iter_items(["ask"], after=ids[0])] == [
        i for i in ids if i.startswith("ask_")
    ]
    assert [i.id for i in scenario.data.iter_items(after=ids[3], limit=4)] == ids[4:8]


def test_concurrent_appends_are_group_committed_one_commit_each(scenario):
    seen_on_branch = []
    lock = threading.Lock()
    ids: list[str] = []
    # a future's waiters wake before its callbacks run, so the last callback may still be
    # running when every appender has its id: each callback says when it has looked
    looked = threading.Semaphore(0)

    def acknowledged(future):
        # when a caller hears its id, a fresh reader must already find it on the branch
        repo = pygit2.Repository(str(scenario.path))
        tip = repo[repo.references[DATA_REF].target]
        seen_on_branch.append(_path(future.result()) in tip.tree)
        looked.release()

    def appender(k):
        for n in range(50):
            future = scenario.append("record", {"thread": k, "n": n})
            future.add_done_callback(acknowledged)
            with lock:
                ids.append(future.result())

    threads = [threading.Thread(target=appender, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(looked.acquire(timeout=60) for _ in range(400))
    assert len(ids) == 400 and all(seen_on_branch) and len(seen_on_branch) == 400
    path = str(scenario.path)
    assert git("-C", path, "rev-list", "--count", "data").stdout.strip() == "400"
    assert git("-C", path, "rev-list", "--merges", "--count", "data").stdout.strip() == "0"
    assert scenario.data.counts()["record"] == 400
    assert {i.id for i in scenario.data.iter_items()} == set(ids)
    git("-C", path, "fsck", "--strict", "--no-dangling")


def test_ids_keep_increasing_across_reopen(store: Store):
    with store.open("s", create=True) as first:
        a = first.append_sync("record", {})
    with store.open("s") as second:
        b = second.append_sync("record", {})
        assert b > a
        assert [i.id for i in second.data.iter_items()] == [a, b]
        assert second.data.counts()["record"] == 2


def test_closed_scenario_refuses_appends(store: Store):
    opened = store.open("s", create=True)
    opened.close()
    with pytest.raises(StoreError, match="closed"):
        opened.append("record", {})


def test_large_and_small_objects_read_back_through_git(scenario):
    big = "".join(chr(32 + (n * 7919) % 90) for n in range(300_000))
    rec = scenario.append_sync("record", {"response": big})
    shown = git("-C", str(scenario.path), "show", f"data:{_path(rec)}").stdout
    assert json.loads(shown)["response"] == big
    git("-C", str(scenario.path), "fsck", "--strict", "--no-dangling")
