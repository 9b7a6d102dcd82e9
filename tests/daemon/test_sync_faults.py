"""A node and its remote under faults (issue 20): a node SIGKILLed in the middle of a sync, and
a remote that goes down under load.  Real git throughout: a bare repository on disk, and
``git http-backend`` on loopback.

The invariant checked after each fault is on the remote: every tag ``vN`` names the release at
depth N of its chain, and every release on the chain has its tag (``git push --atomic`` with
the lease, ``store/sync.py``).  Leftover ``objects/tmp_objdir-incoming-*`` directories on a file
remote (a receive-pack killed before it renamed its quarantine) are tolerated: ``git fsck``
ignores them.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from reef_core.ids import parse_item_id
from reef_core.store import GITATTRIBUTES, RELEASE_REF, Store, StoreOptions, build_tree, store_lfs
from reef_core.store.lfs import lfs_object_path
from reef_core.store.remotes import add_remote
from reef_core.store.repo import init_bare, read_ref
from reef_core.store.sync import read_state
from tests.conftest import git, wait_for
from tests.daemon.test_process import start
from tests.fakes.git_http import GitHttpServer
from tests.store.procs import descendants, processes

S = "s"
H = {"x-reef-scenario": S}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
ROUNDS = 10


# -- the remote's release chain and tags -----------------------------------------------------


def _chain(git_dir: Path) -> list[str]:
    """The first-parent release chain, oldest first (v1 at index 0)."""
    if read_ref(git_dir, RELEASE_REF) is None:
        return []
    shown = git("--git-dir", str(git_dir), "log", "--first-parent", "--format=%H", RELEASE_REF).stdout
    return shown.split()[::-1]


def _tags(git_dir: Path) -> dict[str, str]:
    """``vN`` -> the commit its tag names."""
    listed = git(
        "--git-dir", str(git_dir), "for-each-ref", "--format=%(refname:short) %(*objectname)", "refs/tags"
    )
    return dict(line.split() for line in listed.stdout.splitlines())


def _torn(git_dir: Path) -> list[str]:
    """What breaks "no release without its tag, no tag without its release" on ``git_dir``."""
    chain, tags = _chain(git_dir), _tags(git_dir)
    wrong = [
        f"{name} names {commit[:12]}, not release {name}"
        for name, commit in tags.items()
        if int(name[1:]) > len(chain) or chain[int(name[1:]) - 1] != commit
    ]
    wrong += [f"release v{n} has no tag" for n in range(1, len(chain) + 1) if f"v{n}" not in tags]
    return wrong


def _fsck(git_dir: Path) -> None:
    git("--git-dir", str(git_dir), "fsck", "--no-dangling")


# -- processes ---------------------------------------------------------------------------------


def _pushing(pids: list[int]) -> bool:
    """One of ``pids`` is a ``git push`` (or the receive-pack it runs)."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
        except OSError:
            continue
        if b"push" in words or any(w.endswith(b"receive-pack") for w in words):
            return True
    return False


def _gone(pids: list[int]) -> bool:
    table = processes()
    return all(pid not in table or table[pid][2] == "Z" for pid in pids)


def _kill_node(proc, *, with_children: bool) -> tuple[list[int], bool]:
    """SIGKILL the daemon; with its git children too (their own process groups), or leave them
    to finish, as git does when only the daemon dies.  Returns the children to wait for, and
    whether a push was among them."""
    os.kill(proc.pid, signal.SIGSTOP)  # no new child between the look and the kill
    children = descendants(proc.pid)
    pushing = _pushing(children)
    proc.kill()
    proc.wait(10)
    if with_children:
        ours = os.getpgid(0)
        for group in {processes().get(pid, (0, ours, ""))[1] for pid in children} - {ours}:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return children, pushing


# -- releases made beside the daemon ---------------------------------------------------------


def _release(state: Path, n: int) -> str:
    """Release ``n``: a fresh 1 MiB LFS checkpoint and 2 MiB of incompressible harness bytes,
    so its push takes long enough to be struck; returns the checkpoint's oid."""
    with Store(state, StoreOptions(pack_every=0)).open(S, create=True) as scenario:
        repo = scenario.handle.repo
        blob, pointer = store_lfs(repo, scenario.path, os.urandom(1 << 20))
        tree = build_tree(
            repo,
            {
                ".gitattributes": GITATTRIBUTES,
                "weights/model.safetensors": blob,
                "rules/noise.bin": os.urandom(2 << 20),
                "rules/round.md": f"round {n}\n".encode(),
            },
        )
        tip = scenario.releases.tip()
        scenario.releases.publish(tree, expected=tip.commit if tip else None, operation="training")
        return pointer.oid


@pytest.mark.slow
def test_sigkill_in_the_middle_of_a_sync_never_tears_a_release_from_its_tag(tmp_path, upstream):
    """10 rounds: a new release, ``POST /sync``, SIGKILL at a random moment of it or as soon as
    a ``git push`` runs (the daemon alone in even rounds, its git children too in odd ones); the
    remote is checked each time, and the next start's sync leaves both sides identical."""
    remote = tmp_path / "remote.git"
    init_bare(remote)
    state = tmp_path / "state"
    oids = [_release(state, 0)]
    add_remote(state / "scenarios" / f"{S}.git", "origin", str(remote))
    local = state / "scenarios" / f"{S}.git"
    rng = random.Random(20)
    log = (tmp_path / "reef.log").open("a")
    receipts = []

    def serve():
        return start(tmp_path, upstream.url, log=log)

    def sync(url: str, answers: list) -> None:
        try:
            answers.append(httpx.post(f"{url}/reef/scenarios/{S}/sync", timeout=60))
        except httpx.HTTPError as exc:  # the daemon died under it
            answers.append(exc)

    # a first sync, not struck, says how long one takes here (a random kill falls within it)
    proc, url = serve()
    began = time.perf_counter()
    answers: list = []
    sync(url, answers)
    took = time.perf_counter() - began
    assert answers[0].status_code == 200 and answers[0].json()["remotes"][0]["outcome"] == "ok"
    proc.kill()
    proc.wait(10)

    struck = 0
    for n in range(1, ROUNDS + 1):
        oids.append(_release(state, n))
        proc, url = serve()
        receipts.append(
            httpx.post(f"{url}/v1/chat/completions", headers=H, json=CHAT, timeout=10).headers[
                "x-reef-agent-record-id"
            ]
        )
        answers = []
        syncing = threading.Thread(target=sync, args=(url, answers))
        syncing.start()
        if n % 4 < 2:  # at a random moment of the sync
            time.sleep(rng.uniform(0, took))
        else:  # as soon as a push runs
            wait_for(lambda pid=proc.pid, got=answers: got or _pushing(descendants(pid)), timeout=30)
        children, pushing = _kill_node(proc, with_children=n % 2 == 1)
        syncing.join()
        struck += pushing
        assert wait_for(lambda children=children: _gone(children), timeout=30)  # a push left to finish
        assert _torn(remote) == [], f"round {n}"
        assert _torn(local) == [], f"round {n} (local)"
    assert struck > 0  # some kill struck a running git push

    proc, url = serve()  # the next start finishes the sync
    try:
        answer = httpx.post(f"{url}/reef/scenarios/{S}/sync", timeout=60)
        assert answer.status_code == 200 and answer.json()["remotes"][0]["outcome"] == "ok", answer.text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        log.close()
    assert _chain(remote) == _chain(local) and len(_chain(remote)) == ROUNDS + 1
    assert _tags(remote) == _tags(local)
    assert read_ref(remote, "refs/heads/data") == read_ref(local, "refs/heads/data")
    for receipt in receipts:
        git("--git-dir", str(remote), "cat-file", "-e", f"refs/heads/data:{parse_item_id(receipt).path}")
    for oid in oids:
        assert lfs_object_path(remote, oid).stat().st_size == 1 << 20
    _fsck(remote)
    _fsck(local)


DOWN_S = 60.0  # a minute, as the issue asks: 120 sync intervals of the loop failing against it


@pytest.mark.slow
def test_remote_down_under_load_fails_no_request_and_everything_is_pushed_after(make_reef, tmp_path):
    """The http remote stopped for ``DOWN_S`` seconds while a client keeps sending chat requests
    to a daemon that syncs every 0.5 s: every request is answered 200, and once the remote is
    back and a sync ran, it has the node's data ref and every record.  (Latency under the
    outage is the benchmark's business, ``bench/sync.py``, not a test's.)"""
    root = tmp_path / "srv"
    init_bare(root / "s.git")
    server = GitHttpServer(root).start()
    try:
        # packing on, as a daemon runs: a minute of one-record commits is thousands of small
        # packs, which the packer gathers (and a push of them all unpacked would crawl)
        reef = make_reef("--storage.sync-interval", "0.5", "--storage.pack-every", "2000")
        assert httpx.post(f"{reef.url}/reef/scenarios", json={"name": S}, timeout=10).status_code in (
            200,
            201,
        )
        add_remote(Path(reef.repo(S)), "origin", server.url("s.git", user="alice"))
        statuses: list[int] = []
        receipts: list[str] = []
        stop = threading.Event()

        def client() -> None:
            with httpx.Client(timeout=30) as http:
                while not stop.is_set():
                    answer = http.post(f"{reef.url}/v1/chat/completions", headers=H, json=CHAT)
                    statuses.append(answer.status_code)
                    if answer.status_code == 200:
                        receipts.append(answer.headers["x-reef-agent-record-id"])
                    time.sleep(0.005)

        loading = threading.Thread(target=client)
        loading.start()
        pushed = lambda: read_ref(root / "s.git", "refs/heads/data") is not None  # noqa: E731
        assert wait_for(pushed, timeout=20)  # the loop synced while the remote was up
        server.stop()
        time.sleep(DOWN_S)
        down_receipts = len(receipts)
        last = read_state(Path(reef.repo(S)), "origin")["last_fetch"]
        assert last["outcome"] == "unreachable"  # the loop kept trying while it was down
        server.start()
        time.sleep(1.0)
        stop.set()
        loading.join()
        local = Path(reef.repo(S))
        caught_up = lambda: read_ref(root / "s.git", "refs/heads/data") == read_ref(local, "refs/heads/data")  # noqa: E731
        assert wait_for(caught_up, timeout=120)  # the loop pushed what piled up
        answer = httpx.post(f"{reef.url}/reef/scenarios/{S}/sync", timeout=60)
        assert answer.status_code == 200 and answer.json()["remotes"][0]["outcome"] == "ok", answer.text
    finally:
        server.stop()
    assert set(statuses) == {200} and down_receipts > 0
    assert len(receipts) > down_receipts  # and after it came back
    assert read_ref(root / "s.git", "refs/heads/data") == read_ref(Path(reef.repo(S)), "refs/heads/data")
    paths = "".join(f"refs/heads/data:{parse_item_id(r).path}\n" for r in receipts)
    listed = subprocess.run(
        ["git", "--git-dir", str(root / "s.git"), "cat-file", "--batch-check"],
        input=paths,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "missing" not in listed and len(listed.splitlines()) == len(receipts)
    _fsck(root / "s.git")
