"""Several daemons on one scenario (``storage.node``): each writes its own data ref, reads merge.

Node a writes its scenario here; node b, and a daemon without a node name (``refs/heads/data``,
as a scenario had before it gained nodes), write the same scenario in repositories of their own
(the writer lock allows one writer per repository), and their refs are brought into a's with
``git fetch``, as a sync would.  Everything is checked with the git CLI.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from reef_core.errors import InvalidInput, NotFound
from reef_core.ids import parse_item_id
from reef_core.store import DATA_REF, NODE_DATA_PREFIX, Scenario, Store, StoreOptions, data_ref
from reef_core.store.packer import compress, run_git
from tests.conftest import git

A = f"{NODE_DATA_PREFIX}a"
B = f"{NODE_DATA_PREFIX}b"


def _refs(repo: Path) -> dict[str, str]:
    """Every ref of the repository -> its object id, as git lists them."""
    listing = git("-C", str(repo), "for-each-ref", "--format=%(refname) %(objectname)").stdout
    return dict(line.split(" ") for line in listing.splitlines())


def _fetch(into: Path, source: Path, ref: str, *config: str) -> None:
    git("-C", str(into), *config, "fetch", "-q", "--no-write-fetch-head", str(source), f"{ref}:{ref}")


def _append(scenario: Scenario, kind: str, body: dict) -> str:
    item_id = scenario.append_sync(kind, body, summary=str(body.get("n", "")))
    time.sleep(0.003)  # ids order by the millisecond: the next one, on either node, is later
    return item_id


@pytest.fixture
def nodes(tmp_path: Path):
    """Scenario ``s`` open for writing as node a, and in repositories of their own as node b
    and as a daemon with no node name."""
    a = Store(tmp_path / "a", StoreOptions(pack_every=0, node="a")).open("s", create=True)
    b = Store(tmp_path / "b", StoreOptions(pack_every=0)).open("s", create=True, node="b")
    single = Store(tmp_path / "single", StoreOptions(pack_every=0)).open("s", create=True)
    yield a, b, single
    for scenario in (a, b, single):
        scenario.close()


def test_a_node_writes_its_own_ref_and_a_single_node_keeps_refs_heads_data(nodes):
    a, _, single = nodes
    assert a.data_ref == A == data_ref("a")
    first = _append(a, "record", {"n": 1})
    second = _append(a, "ask", {"text": "test first"})
    assert set(_refs(a.path)) == {A}  # no refs/heads/data
    assert git("-C", str(a.path), "log", "--format=%s", A).stdout.split("\n")[:2] == [
        f"ask {second}",
        f"record {first} 1",
    ]
    git("-C", str(a.path), "fsck", "--strict", "--no-dangling")

    # no node: today's layout
    assert single.data_ref == DATA_REF == data_ref("")
    _append(single, "record", {"n": 1})
    assert set(_refs(single.path)) == {DATA_REF}
    assert single.data.refs() == [DATA_REF] and single.own_data.refs() == [DATA_REF]


def test_reads_merge_every_nodes_ref_by_time(nodes):
    a, b, single = nodes
    written = [_append(single, "record", {"n": -1})]  # before the scenario had nodes
    for n in range(6):  # a and b take turns: the merged order interleaves them
        node = a if n % 2 == 0 else b
        written.append(_append(node, "record" if n < 4 else "report", {"n": n}))
    written.append(_append(a, "ask", {"text": "from a"}))
    _fetch(a.path, b.path, B)
    _fetch(a.path, single.path, DATA_REF)

    assert a.data.refs() == [A, DATA_REF, B]  # the own ref first
    assert [item.id for item in a.data.iter_items()] == written
    assert [item.id for item in a.data.iter_items(["record"])] == written[:5]
    assert [item.id for item in a.data.iter_items(after=written[3], limit=3)] == written[4:7]
    assert [item.data["n"] for item in a.data.iter_items(["report"])] == [4, 5]
    assert a.data.counts() == {"record": 5, "report": 2, "ask": 1}
    assert a.data.last_id() is not None and str(a.data.last_id()) == written[-1]
    for item_id in written:  # by id, from either ref
        assert a.data.get(item_id).id == item_id and a.data.exists(item_id)
    with pytest.raises(NotFound):
        a.own_data.get(written[2])  # b's
    # the own view: what a's recipes follow
    assert [item.id for item in a.own_data.iter_items()] == written[1::2]
    assert a.own_data.counts() == {"record": 2, "report": 1, "ask": 1}
    assert b.data.refs() == [B] and [i.id for i in b.data.iter_items()] == written[2:7:2]
    # the git CLI sees the same items on the three refs
    shown = "--format=%(trailers:key=Reef-Id,valueonly)"
    assert sorted(git("-C", str(a.path), "log", shown, A, B, DATA_REF).stdout.split()) == sorted(written)


def test_a_packed_node_ref_is_read_and_written(nodes):
    a, b, _ = nodes
    mine = _append(a, "record", {"n": 0})
    theirs = _append(b, "record", {"n": 1})
    _fetch(a.path, b.path, B)
    git("-C", str(a.path), "pack-refs", "--all", "--prune")  # refs/reef/data/ is gone as a directory
    assert not (a.path / NODE_DATA_PREFIX).exists()
    assert a.data.refs() == [A, B]
    later = _append(a, "record", {"n": 2})  # the writer makes the directory again
    assert [item.id for item in a.data.iter_items()] == [mine, theirs, later]
    assert git("-C", str(a.path), "rev-list", "--count", A).stdout.strip() == "2"
    git("-C", str(a.path), "fsck", "--strict", "--no-dangling")


def test_the_writer_never_touches_another_ref(nodes, tmp_path: Path):
    a, b, single = nodes
    _append(a, "record", {"n": 0})
    for n in range(3):
        _append(b, "record", {"n": n})
        _append(single, "record", {"n": n})
    _fetch(a.path, b.path, B)
    _fetch(a.path, single.path, DATA_REF)
    before = _refs(a.path)
    futures = [a.append("record", {"n": n}) for n in range(50)]  # batches, and one inline
    ids = [f.result() for f in futures] + [a.append("report", {"score": 1}, now=True).result()]
    after = _refs(a.path)
    assert {r: v for r, v in after.items() if r != A} == {r: v for r, v in before.items() if r != A}
    assert git("-C", str(a.path), "rev-list", "--count", A).stdout.strip() == str(1 + len(ids))
    assert a.data.counts() == {"record": 1 + 50 + 3 + 3, "report": 1, "ask": 0}

    a.close()  # reopened: counts and ids continue from its own ref, not another's
    with Store(tmp_path / "a", StoreOptions(pack_every=0)).open("s", node="a") as again:
        assert again.own_data.counts() == {"record": 51, "report": 1, "ask": 0}
        newer = again.append_sync("record", {"n": 99})
        assert parse_item_id(newer) > parse_item_id(ids[-1])
        assert _refs(again.path)[B] == before[B] and _refs(again.path)[DATA_REF] == before[DATA_REF]


def test_a_report_may_reference_a_receipt_on_another_nodes_ref(nodes):
    a, b, _ = nodes
    theirs = _append(b, "record", {"n": 1})
    assert not a.data.exists(theirs)  # not fetched yet: what the daemon answers 400 to
    _fetch(a.path, b.path, B)
    assert a.data.exists(theirs)  # the check the report routes make
    report = a.append_sync("report", {"score": 1.0, "references": [theirs]})
    assert a.data.get(report).data["references"] == [theirs]
    assert git("-C", str(a.path), "cat-file", "-e", f"{A}:{_path(report)}", check=False).returncode == 0
    assert git("-C", str(a.path), "cat-file", "-e", f"{B}:{_path(report)}", check=False).returncode != 0


def _path(item_id: str) -> str:
    return parse_item_id(item_id).path


def test_the_packer_walks_only_its_own_ref(nodes):
    a, b, _ = nodes
    for n in range(40):
        b.append("record", {"n": n}).result()
    # fetched as a sync fetches: one pack, made by git, with its reverse index
    _fetch(a.path, b.path, B, "-c", "pack.writeReverseIndex=true", "-c", "transfer.unpackLimit=1")
    pack_dir = a.path / "objects" / "pack"
    fetched = {p.name: p.stat().st_ino for p in pack_dir.glob("pack-*.pack")}
    assert len(fetched) == 1 and all((pack_dir / n.replace(".pack", ".rev")).exists() for n in fetched)
    for first in range(0, 60, 20):
        futures = [a.append("record", {"n": n}) for n in range(first, first + 20)]
        [f.result() for f in futures]

    walked: list[str] = []

    def runner(arguments: list[str], stdin) -> str:
        if "--revs" in arguments:
            walked.extend(stdin.split())
        return run_git(a.path, arguments, stdin)

    compress(a.path, runner, ref=a.data_ref)
    own_tip = _refs(a.path)[A]
    assert walked == [own_tip]  # not b's tip: b's objects came compressed
    for name, inode in fetched.items():
        assert (pack_dir / name).stat().st_ino == inode  # b's pack left as it is
    assert (a.path / "reef-packed-tip").read_text().strip() == own_tip
    assert all((pack_dir / p.name.replace(".pack", ".rev")).exists() for p in pack_dir.glob("pack-*.pack"))
    assert a.data.counts() == {"record": 100, "report": 0, "ask": 0}
    git("-C", str(a.path), "fsck", "--strict", "--no-dangling")


def test_a_stale_lock_on_a_nodes_ref_is_cleared_at_open(tmp_path: Path):
    store = Store(tmp_path / "state", StoreOptions(pack_every=0, node="a"))
    with store.open("s", create=True) as scenario:
        _append(scenario, "record", {"n": 0})
        lock = scenario.path / f"{A}.lock"
    lock.write_text("0" * 40 + "\n")  # a writer killed mid-move
    with store.open("s") as scenario:
        assert scenario.recovered_locks == [lock] and not lock.exists()
        _append(scenario, "record", {"n": 1})
        assert scenario.data.counts()["record"] == 2


@pytest.mark.parametrize("node", ["A", "a/b", "-a", "a" * 33, "a.b", "../x", " a"])
def test_a_bad_node_name_is_refused_and_leaves_the_scenario_free(tmp_path: Path, node: str):
    store = Store(tmp_path / "state", StoreOptions(pack_every=0))
    store.create("s")
    with pytest.raises(InvalidInput, match=r"storage\.node"):
        store.open("s", node=node)
    store.open("s", node="a" * 32).close()  # the writer lock was let go
