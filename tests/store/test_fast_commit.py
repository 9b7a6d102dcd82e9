"""The one-item commit's fast path: written by an idle writer's caller, files made ahead,
a ref update that creates and frees nothing — all of it checked with the git CLI."""

from __future__ import annotations

import json
import os
import random
import threading
import zlib
from pathlib import Path

import pytest

from reef_core import jsonio
from reef_core.errors import InvalidInput
from reef_core.ids import parse_item_id
from reef_core.store import DATA_REF, RawJSON, Store, StoreOptions
from reef_core.store import writer as writer_module
from reef_core.store.packs import STORE_MAX, TREE, PackBuilder, TreeEncoder, _store
from reef_core.store.scratch import SCRATCH_DIR
from reef_core.store.trees import TreeNode as _Node
from tests.conftest import git, wait_for


def tip(repo: Path) -> str:
    return git("--git-dir", str(repo), "rev-parse", DATA_REF).stdout.strip()


def subject_ids(repo: Path) -> list[str]:
    subjects = git("--git-dir", str(repo), "log", "--reverse", "--format=%s", DATA_REF).stdout.splitlines()
    return [line.split()[1] for line in subjects]


def test_an_idle_writer_lets_the_caller_write_and_the_item_is_on_the_branch_at_once(scenario):
    scenario.append_sync("record", {"n": 0})  # the writer thread reads the tip's trees first
    future = scenario.append("record", {"n": 1}, now=True)
    assert future.done()  # written in this thread, before append returned
    item_id = future.result()
    assert subject_ids(scenario.path)[-1] == item_id
    assert git("--git-dir", str(scenario.path), "show", f"{DATA_REF}:{parse_item_id(item_id).path}").stdout
    git("--git-dir", str(scenario.path), "fsck", "--strict", "--no-dangling")


def test_written_in_place_or_queued_the_log_keeps_the_order_of_the_ids(scenario):
    scenario.append_sync("record", {"warm": True})
    written: list[str] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        for n in range(40):
            item_id = scenario.append("record", {"k": k, "n": n}, now=k % 2 == 0).result()
            with lock:
                written.append(item_id)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = subject_ids(scenario.path)
    assert len(ids) == 241 and set(written) <= set(ids)
    # one commit per item, in the order the ids were given out (time order)
    assert [parse_item_id(i).hex for i in ids] == sorted(parse_item_id(i).hex for i in ids)
    git("--git-dir", str(scenario.path), "fsck", "--strict", "--no-dangling")


def test_nothing_git_could_call_garbage_and_a_reader_holding_the_old_ref_reads_it_whole(scenario):
    repo = scenario.path
    scenario.append_sync("record", {"n": 0})
    scenario.append_sync("record", {"n": 1})
    before = tip(repo)
    held = os.open(repo / DATA_REF, os.O_RDONLY)  # a reader between its open() and its read()
    try:
        for n in range(2, 8):  # fewer updates than the ring has files
            scenario.append("record", {"n": n}, now=True).result()
        assert os.pread(held, 100, 0).decode() == before + "\n"
    finally:
        os.close(held)
    after = tip(repo)
    assert after != before and (repo / DATA_REF).read_text() == after + "\n"
    counted = git("--git-dir", str(repo), "count-objects", "-v").stdout
    assert "garbage: 0" in counted
    assert not list((repo / "objects" / "pack").glob("tmp*"))
    assert len(git("--git-dir", str(repo), "rev-list", DATA_REF).stdout.split()) == 8
    git("--git-dir", str(repo), "fsck", "--strict", "--no-dangling")


def test_git_moving_the_branch_between_two_commits_is_noticed(scenario):
    repo = scenario.path
    first = scenario.append_sync("record", {"n": 1})
    scenario.append("record", {"n": 2}, now=True).result()
    base = git("--git-dir", str(repo), "rev-parse", f"{DATA_REF}~1").stdout.strip()
    # someone rewinds the branch with git itself (a new file renamed over the ref)
    git("--git-dir", str(repo), "update-ref", DATA_REF, base)
    third = scenario.append("record", {"n": 3}, now=True).result()
    # the writer's compare-and-swap saw the move and built on what git left
    assert git("--git-dir", str(repo), "rev-parse", f"{DATA_REF}~1").stdout.strip() == base
    assert subject_ids(repo) == [first, third]
    git("--git-dir", str(repo), "fsck", "--strict")


def test_scratch_files_left_at_close_are_the_next_writers_spare_files(store: Store, tmp_path: Path):
    scenario = store.open("s", create=True)
    scratch = scenario.path / SCRATCH_DIR
    try:
        for n in range(5):
            scenario.append("record", {"n": n}, now=n > 0).result()
        names = [p.name for p in scratch.iterdir()]
        assert names and all(f"-{os.getpid()}-" in name for name in names)
    finally:
        scenario.close()
    left = {p.stat().st_ino for p in scratch.iterdir() if p.is_file()}
    assert left and all(p.stat().st_size == 0 for p in _spares(scratch))
    # a killed writer's leftovers (here: planted): a spare file half written, and a second
    # name of a pack git still uses (a repack killed before it sorted its names)
    half = scratch / "pack-1-0"
    half.write_bytes(b"PACK half written")
    left.add(half.stat().st_ino)
    pack_dir = store.path_of("s") / "objects" / "pack"
    live = next(pack_dir.glob("*.pack"))
    os.link(live, scratch / "freed-link")
    old_packs = set(pack_dir.iterdir())
    before = git("--git-dir", str(store.path_of("s")), "rev-list", "--objects", DATA_REF).stdout
    with store.open("s") as reopened:
        assert not (scratch / "freed-link").exists() and live.exists()
        for n in range(5, 15):
            reopened.append("record", {"n": n}, now=True).result()
    new_packs = set(pack_dir.iterdir()) - old_packs
    # every file those commits took was one the first writer left
    assert len(new_packs) == 20 and {p.stat().st_ino for p in new_packs} <= left
    out = git("--git-dir", str(store.path_of("s")), "rev-list", "--objects", DATA_REF).stdout
    assert set(before.split()) <= set(out.split())
    assert len(subject_ids(store.path_of("s"))) == 15
    git("--git-dir", str(store.path_of("s")), "fsck", "--strict", "--no-dangling")


def _spares(scratch: Path) -> list[Path]:
    """The stock: empty files with no other name (a used one is a pack's second name until
    the writer tidies up)."""
    found = []
    for entry in os.scandir(scratch):
        try:
            info = entry.stat(follow_symlinks=False)
        except FileNotFoundError:  # removed by the writer thread meanwhile
            continue
        if entry.name.startswith("pack-") and info.st_nlink == 1 and info.st_size == 0:
            found.append(Path(entry.path))
    return sorted(found)


def test_spare_files_are_made_while_the_writer_is_idle_sized_to_the_last_burst(tmp_path: Path, monkeypatch):
    store = Store(tmp_path / "state", StoreOptions(pack_every=0, spare_files=300))
    with store.open("s", create=True) as scenario:
        scratch = scenario.path / SCRATCH_DIR
        scenario.append_sync("record", {"n": 0})
        # written now and then: a small stock (twice the floor of 32), made once nothing is written
        assert wait_for(lambda: len(_spares(scratch)) == 64)
        held = {os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")}
        assert not held & {str(p) for p in _spares(scratch)}  # the stock costs no descriptors
        # writing without a pause uses the stock (two files a commit) and makes none meanwhile
        # until it is down to the floor ("a pause" made long, so a slow machine has none here)
        monkeypatch.setattr(writer_module, "_IDLE_S", 1.0)
        for n in range(1, 11):
            scenario.append("record", {"n": n}, now=True).result()
        assert len(_spares(scratch)) == 44
        for n in range(11, 61):  # through the floor and past the stock: commits never wait for it
            scenario.append("record", {"n": n}, now=n % 2 == 0).result()
        monkeypatch.setattr(writer_module, "_IDLE_S", 0.02)
        # the burst took 120 files: at the next pause the stock is made ready for twice that
        assert wait_for(lambda: len(_spares(scratch)) == 240)
    assert subject_ids(store.path_of("s")) == sorted(subject_ids(store.path_of("s")))
    assert len(subject_ids(store.path_of("s"))) == 61
    git("--git-dir", str(store.path_of("s")), "fsck", "--strict", "--no-dangling")
    assert all(p.stat().st_size == 0 for p in _spares(scratch))  # left for the next writer


def test_trees_are_stored_as_zlib_streams_any_inflater_reads_at_every_block_boundary():
    for size in (0, 1, 0xFFFE, 0xFFFF, 0x10000, 2 * 0xFFFF, 2 * 0xFFFF + 1):
        data = os.urandom(size)
        assert zlib.decompress(_store(data)) == data, size


def test_a_tree_rewritten_at_its_end_encodes_exactly_as_a_fresh_one():
    # what the writer does to a tree (append a name, rewrite the newest entry's id, now and
    # then change an earlier one), each step encoded by a kept TreeEncoder and from scratch
    rng = random.Random(7)
    parts = [b"40000 %02x\0" % n + os.urandom(20) for n in range(40)]
    encoder = TreeEncoder()
    for step in range(400):
        roll = rng.random()
        if roll < 0.6:  # the newest subtree got a new id: same length, last entry
            parts[-1] = parts[-1][:-20] + os.urandom(20)
        elif roll < 0.9:  # a new name sorts last
            parts.append(b"40000 %04x\0" % (1000 + step) + os.urandom(20))
            encoder.forget()
        else:  # anything else: an earlier entry changes
            parts[rng.randrange(len(parts))] = b"100644 x%d\0" % step + os.urandom(20)
            encoder.forget()
        kept, fresh = PackBuilder(), PackBuilder()
        oid = encoder.add(kept, parts)
        assert oid == fresh.add(TREE, b"".join(parts))
        assert kept._chunks == fresh._chunks and kept._index == fresh._index


def test_the_writers_in_memory_tree_encodes_as_git_would_whatever_changes():
    rng = random.Random(11)
    node = _Node({})
    names = [f"{n:02x}" for n in range(0, 256, 3)]
    for step in range(600):
        name = rng.choice(names[: 3 + step // 10])  # mostly the newest names, sometimes older
        is_dir = rng.random() < 0.8
        node.set(name if rng.random() < 0.95 else name + "x", is_dir, os.urandom(20))
        kept, fresh = PackBuilder(), PackBuilder()
        assert node.add_to(kept) == fresh.add(TREE, b"".join(node.parts))
        assert kept._chunks == fresh._chunks


def test_objects_up_to_a_mebibyte_are_stored_larger_ones_deflated_and_git_reads_all(scenario):
    rng = random.Random(1)
    small = {"text": "x" * 100}
    medium = {"text": "".join(rng.choices("abcdef ", k=200 * 1024))}  # Claude Code's size
    large = {"text": "".join(rng.choices("abcdef ", k=STORE_MAX * 2))}
    pack_dir = scenario.path / "objects" / "pack"
    sizes = []
    ids = []
    for body in (small, medium, large):
        before = set(pack_dir.glob("*.pack"))
        ids.append(scenario.append_sync("record", body))
        (pack,) = set(pack_dir.glob("*.pack")) - before
        sizes.append(pack.stat().st_size)
    for item_id, body in zip(ids, (small, medium, large), strict=True):
        path = parse_item_id(item_id).path
        shown = json.loads(git("--git-dir", str(scenario.path), "show", f"{DATA_REF}:{path}").stdout)
        assert shown["id"] == item_id and shown["text"] == body["text"]
    assert sizes[1] > 200 * 1024  # stored as it is: the repack compresses it later
    assert sizes[2] < STORE_MAX  # the 2 MiB record went in deflated
    git("--git-dir", str(scenario.path), "fsck", "--strict", "--no-dangling")


def test_raw_json_goes_into_the_item_byte_for_byte(scenario):
    raw = b'{"model": "m",  "messages":[{"role":"user","content":"caf\\u00e9 \xc3\xa9"}], "n": 1.50}'
    item_id = scenario.append_sync("record", {"route": "r", "request": RawJSON(raw), "status": 200})
    path = parse_item_id(item_id).path
    stored = git("--git-dir", str(scenario.path), "cat-file", "blob", f"{DATA_REF}:{path}").stdout.encode()
    assert b'"request":' + raw + b',"status":200}' in stored
    assert stored.count(b"\n") == 1  # one line, as every item
    item = scenario.data.get(item_id).data
    assert item["request"] == json.loads(raw) and item["status"] == 200 and item["route"] == "r"


def test_raw_json_goes_in_byte_for_byte_also_when_json_writes_the_rest(scenario):
    # a NaN or an integer past 64 bits (read from a client's text) is written by json, not
    # orjson (see reef_core.jsonio); the raw request still goes in as it was sent
    raw = b'{"model": "m", "seed": 123456789012345678901234567890}'
    answer = jsonio.loads('{"logprob": NaN, "big": 123456789012345678901234567890}')
    item_id = scenario.append_sync("record", {"request": RawJSON(raw), "response": answer})
    path = parse_item_id(item_id).path
    stored = git("--git-dir", str(scenario.path), "cat-file", "blob", f"{DATA_REF}:{path}").stdout.encode()
    response = b'{"logprob":NaN,"big":123456789012345678901234567890}'
    assert stored.endswith(b'"request":' + raw + b',"response":' + response + b"}\n")
    assert scenario.data.get(item_id).data["response"]["big"] == 123456789012345678901234567890


def test_raw_json_on_more_than_one_line_is_refused_and_nothing_is_written(scenario):
    scenario.append_sync("record", {"n": 0})
    before = tip(scenario.path)
    with pytest.raises(InvalidInput, match="one line"):
        scenario.append("record", {"request": RawJSON(b'{\n"a": 1}')})
    assert tip(scenario.path) == before


def test_a_large_item_goes_to_the_writer_thread_even_when_asked_to_write_now(scenario):
    scenario.append_sync("record", {"n": 0})
    seen: list[str] = []
    original = scenario.writer._commit_batch

    def spy(batch):
        seen.append(threading.current_thread().name)
        return original(batch)

    scenario.writer._commit_batch = spy
    small = scenario.append("record", {"text": "x" * 1000}, now=True).result()
    large = scenario.append("record", {"text": "x" * writer_module._INLINE_MAX}, now=True).result()
    assert seen[0] == threading.current_thread().name  # written here
    assert seen[1].startswith("reef-writer")  # handed over
    assert subject_ids(scenario.path)[-2:] == [small, large]


def test_with_fsync_on_both_paths_write_what_git_reads(tmp_path: Path):
    store = Store(tmp_path / "state", StoreOptions(pack_every=0, fsync=True))
    with store.open("s", create=True) as scenario:
        first = scenario.append_sync("record", {"n": 1})
        second = scenario.append("record", {"n": 2}, now=True).result()
        assert subject_ids(scenario.path) == [first, second]
    git("--git-dir", str(store.path_of("s")), "fsck", "--strict", "--no-dangling")


def _second_names(scratch: Path) -> set[int]:
    """Inodes of the spare files in ``scratch`` that have a name elsewhere too."""
    found = set()
    for entry in os.scandir(scratch):
        if not entry.name.startswith("pack-"):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except FileNotFoundError:  # removed by the writer thread meanwhile
            continue
        if entry.is_file(follow_symlinks=False) and info.st_nlink > 1:
            found.add(info.st_ino)
    return found


def test_a_written_pack_keeps_its_spare_name_until_the_writer_thread_tidies_up(store: Store, monkeypatch):
    with store.open("s", create=True) as scenario:
        scratch = scenario.path / SCRATCH_DIR
        pack_dir = scenario.path / "objects" / "pack"
        scenario.append_sync("record", {"n": 0})
        assert wait_for(lambda: not _second_names(scratch) and len(_spares(scratch)) == 64)
        monkeypatch.setattr(writer_module, "_IDLE_S", 1.0)
        before = {p.stat().st_ino for p in pack_dir.iterdir()}
        for n in range(1, 11):  # fewer files than the stock holds: no restocking meanwhile
            scenario.append("record", {"n": n}, now=True).result()
        written = {p.stat().st_ino for p in pack_dir.iterdir()} - before
        # linked into objects/pack (a link waits on no lock the writer thread may hold) ...
        assert len(written) == 20 and _second_names(scratch) == written
        monkeypatch.setattr(writer_module, "_IDLE_S", 0.02)
        # ... and the spare's name goes when the writer thread next runs (here: to write an
        # item handed to it) and is idle; the packs stay
        scenario.append_sync("record", {"n": 11})
        assert wait_for(lambda: not _second_names(scratch))
        assert written < {p.stat().st_ino for p in pack_dir.iterdir()}
    assert len(subject_ids(store.path_of("s"))) == 12
    git("--git-dir", str(store.path_of("s")), "fsck", "--strict", "--no-dangling")
