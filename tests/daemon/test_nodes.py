"""Two daemons on one scenario (``storage.node``): each records on its own data ref, and serves
and accepts reports on what the other recorded once a fetch brings it in (done here with the
git CLI, as a sync would)."""

from __future__ import annotations

import httpx

from tests.conftest import git

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _receipt(reef) -> str:
    response = httpx.post(f"{reef.url}/v1/chat/completions", headers={"x-reef-scenario": "s"}, json=CHAT)
    assert response.status_code == 200, response.text
    return response.headers["x-reef-agent-record-id"]


def _report(reef, receipt: str) -> httpx.Response:
    body = {"score": 1.0, "references": [receipt]}
    return httpx.post(f"{reef.url}/reef/report", headers={"x-reef-scenario": "s"}, json=body, timeout=10)


def test_a_report_on_another_nodes_receipt_is_accepted_and_reads_merge(make_reef):
    a = make_reef("--storage.node", "a")
    b = make_reef("--storage.node", "b")
    mine, theirs = _receipt(a), _receipt(b)
    assert _report(a, theirs).status_code == 400  # not here yet

    git("-C", a.repo("s"), "fetch", "-q", b.repo("s"), "refs/reef/data/b:refs/reef/data/b")
    accepted = _report(a, theirs)
    assert accepted.status_code == 200, accepted.text
    refs = git("-C", a.repo("s"), "for-each-ref", "--format=%(refname)").stdout.split()
    assert refs == ["refs/reef/data/a", "refs/reef/data/b"]  # no refs/heads/data
    on_a = git("-C", a.repo("s"), "log", "--format=%(trailers:key=Reef-Id,valueonly)", "refs/reef/data/a")
    assert on_a.stdout.split()[1] == mine  # the report went on a's own ref, after a's record

    one = httpx.get(f"{a.url}/reef/scenarios/s/records/{theirs}")
    assert one.status_code == 200 and one.json()["id"] == theirs
    listed = httpx.get(f"{a.url}/reef/scenarios/s/records").json()["records"]
    assert [r["id"] for r in listed] == [mine, theirs]
    (row,) = httpx.get(f"{a.url}/reef/scenarios").json()["scenarios"]
    assert row["counts"] == {"record": 2, "report": 1, "ask": 0}
    assert row["data_refs"] == ["refs/reef/data/a", "refs/reef/data/b"]
