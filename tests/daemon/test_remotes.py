"""Daemons on one scenario, one git remote: what each records reaches the others, and the
release chain stays one chain (real git: a bare repository on disk, and git http-backend)."""

from __future__ import annotations

import threading

import httpx

from reef_core.store import RELEASE_REF, Store, build_tree
from reef_core.store.remotes import add_remote
from reef_core.store.repo import init_bare
from tests.conftest import git
from tests.fakes.git_http import GitHttpServer

S = "s"
H = {"x-reef-scenario": S}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _node(make_reef, remote: str, node: str, *flags: str):
    reef = make_reef("--storage.node", node, *flags)
    assert httpx.post(f"{reef.url}/reef/scenarios", json={"name": S}, timeout=10).status_code in (200, 201)
    add_remote(reef.state_dir / "scenarios" / f"{S}.git", "origin", remote)
    return reef


def _chat(reef) -> str:
    response = httpx.post(f"{reef.url}/v1/chat/completions", headers=H, json=CHAT, timeout=10)
    assert response.status_code == 200, response.text
    return response.headers["x-reef-agent-record-id"]


def _sync(reef) -> dict:
    answer = httpx.post(f"{reef.url}/reef/scenarios/{S}/sync", timeout=60)
    assert answer.status_code == 200, answer.text
    (report,) = answer.json()["remotes"]
    assert report["outcome"] == "ok", report
    return report


def _records(reef) -> set[str]:
    listed = httpx.get(f"{reef.url}/reef/scenarios/{S}/records", params={"limit": 100}, timeout=10).json()
    return {row["id"] for row in listed["records"]}


def _publish(reef, text: str) -> None:
    """A release made beside the daemon (the store publishes without its lock)."""
    reader = Store(reef.state_dir).reader(S)
    tree = build_tree(reader.handle.repo, {"rules/style.md": text.encode()})
    tip = reader.releases.tip()
    reader.releases.publish(tree, expected=tip.commit if tip else None, operation="creation")


def test_three_nodes_read_each_others_records_and_serve_a_release_made_on_one(make_reef, tmp_path):
    remote = tmp_path / "remote.git"
    init_bare(remote)
    nodes = [_node(make_reef, str(remote), name) for name in ("a", "b", "c")]
    receipts = {node.url: _chat(node) for node in nodes}
    _publish(nodes[0], "Be brief.\n")
    for node in [*nodes, *nodes[:2]]:  # the last two again, to fetch what came after them
        _sync(node)
    for node in nodes:
        assert _records(node) == set(receipts.values())
    other = receipts[nodes[2].url]  # recorded by c, reported on at a
    report = httpx.post(f"{nodes[0].url}/reef/report", headers=H, json={"score": 1, "references": [other]})
    assert report.status_code == 200, report.text
    served = httpx.get(f"{nodes[1].url}/reef/harness", headers=H, timeout=10).json()
    assert served["release"] == "v1" and served["files"] == {"rules/style.md": "Be brief.\n"}
    answer = httpx.post(f"{nodes[2].url}/v1/chat/completions", headers=H, json=CHAT, timeout=10)
    assert answer.headers["x-reef-release-id"] == "v1"


def _chain(git_dir: str) -> list[str]:
    return git("--git-dir", git_dir, "log", "--first-parent", "--format=%H", "release").stdout.split()


def _tags(git_dir: str) -> dict[str, str]:
    listed = git(
        "--git-dir", git_dir, "for-each-ref", "--format=%(refname:short) %(*objectname)", "refs/tags"
    )
    return dict(line.split() for line in listed.stdout.splitlines())


def test_two_nodes_rolling_back_at_once_keep_one_linear_chain_everywhere(make_reef, tmp_path):
    server = GitHttpServer(tmp_path / "srv").start()
    init_bare(tmp_path / "srv" / "s.git")
    try:
        a, b = (_node(make_reef, server.url("s.git"), name) for name in ("a", "b"))
        _publish(a, "one\n")
        _publish(a, "two\n")
        _sync(a)
        _sync(b)
        statuses = []
        for _ in range(20):
            answers: list[httpx.Response] = []

            def rollback(node, target: str, answers=answers) -> None:
                url = f"{node.url}/reef/scenarios/{S}/rollback"
                answers.append(httpx.post(url, json={"release": target}, timeout=60))

            # different changes (the same rollback on the same tip in the same second is one commit)
            threads = [threading.Thread(target=rollback, args=pair) for pair in ((a, "v1"), (b, "v2"))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            statuses.append(sorted(r.status_code for r in answers))
        assert statuses == [[200, 200]] * 20  # the loser rebuilt its rollback on the winner's release
        for node in (a, b):
            _sync(node)
        repositories = [str(tmp_path / "srv" / "s.git"), a.repo(S), b.repo(S)]
        chains = [_chain(r) for r in repositories]
        assert chains[0] == chains[1] == chains[2] and len(chains[0]) == 42
        tags = [_tags(r) for r in repositories]
        assert tags[0] == tags[1] == tags[2] and len(tags[0]) == 42
        for name, commit in tags[0].items():  # vN is the Nth release of the one chain
            assert chains[0][-int(name[1:])] == commit
        for r in repositories:
            assert not git("--git-dir", r, "rev-list", "--min-parents=2", RELEASE_REF).stdout
    finally:
        server.stop()
