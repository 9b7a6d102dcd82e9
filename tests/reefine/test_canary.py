"""Canary releases of harness trees, end to end on a real daemon with the scripted model.

A reefine daemon with ``recipe.config.canary-share`` set turns a candidate that passed its checks
into a canary instead of a release.  Sessions ask the daemon which tree they get (as ``reef-pi``
does before it starts pi), run it (a chat request tagged with the session and the tree) and are
scored by a person (a report).  The sequential test decides: a better candidate becomes the next
release, a worse one is retired, an equal one runs out its sessions without being published.
Health checks with the real pi are off here (``tests/reefine/test_reefine.py`` covers them); the
launcher's part with the real pi is in ``tests/adapters/test_canary_launcher.py``.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import httpx

from tests.fakes.upstream import ScriptedUpstream, Text
from tests.reefine.conftest import evolve, rule, step

CANARY = (
    "--recipe.config.health",
    "false",
    "--recipe.config.usage-min-sessions",
    "100000",
    "--recipe.config.canary-share",
    "0.5",
    "--recipe.config.canary-min-sessions",
    "5",
    "--recipe.config.canary-max-sessions",
    "40",
)
S = "team"


def session_tree(reef: Any, session: str) -> dict[str, Any]:
    response = httpx.get(
        f"{reef.url}/reef/harness/canary", params={"adapter": "pi", "scenario": S, "session": session}
    )
    assert response.status_code == 200, response.text
    return response.json()


def run_session(reef: Any, session: str, score: float | None) -> dict[str, Any]:
    """One session as a launcher runs it: ask for the tree, one exchange tagged with it, a score."""
    tree = session_tree(reef, session)
    headers = {"x-reef-scenario": S, "x-reef-tag-session": session}
    if tree["release"]:
        headers["x-reef-tag-release"] = tree["release"]
    answer = httpx.post(
        f"{reef.url}/v1/chat/completions",
        json={"model": "scripted-model", "messages": [{"role": "user", "content": f"task of {session}"}]},
        headers=headers,
    )
    assert answer.status_code == 200, answer.text
    if score is not None:
        receipt = answer.headers["x-reef-agent-record-id"]
        reported = httpx.post(
            f"{reef.url}/reef/report",
            json={"references": [receipt], "score": score},
            headers={"x-reef-scenario": S},
        )
        assert reported.status_code == 200, reported.text
    return tree


def canary(reef: Any) -> dict[str, Any]:
    response = httpx.get(f"{reef.url}/reef/scenarios/{S}/canary")
    assert response.status_code == 200, response.text
    return response.json()


def canary_history(reef: Any) -> list[dict[str, Any]]:
    """The canary's states as git keeps them, newest first (``git log refs/reef/canary``)."""
    return reef.reader(S).canary.history()


def wait_ended(reef: Any, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        state = canary(reef)["canary"]
        if state["state"] != "running":
            return state
        assert time.monotonic() < deadline, state
        time.sleep(0.05)


def run_until_decided(
    reef: Any, prefix: str, canary_scores: list[float], control_scores: list[float]
) -> dict:
    """Sessions ``<prefix>0``, ``<prefix>1``, … scored by the arm each lands on, until the canary
    ends; its final state."""
    for i in range(len(canary_scores)):
        tree = session_tree(reef, f"{prefix}{i}")
        run_session(reef, f"{prefix}{i}", canary_scores[i] if tree["arm"] == "canary" else control_scores[i])
        if canary(reef)["canary"]["state"] != "running":
            break
    return wait_ended(reef)


def only_chats(upstream: ScriptedUpstream, steps: list[Text]) -> None:
    """Session chats get a fixed answer; everything else (a step's model calls) takes ``steps``."""

    def respond(route: str, body: dict[str, Any]) -> Text | None:
        text = str(body.get("messages", [{}])[-1].get("content", ""))
        if text.startswith("task of "):
            return Text("done")
        return steps.pop(0) if steps else None

    upstream.responder = respond


def start_canary(reefine: Any, upstream: ScriptedUpstream, *flags: str) -> Any:
    """A daemon whose scenario has v1 (rule ``tests-first``) and canary c2 (rule ``small-diffs``)."""
    reef = reefine(*CANARY, *flags)
    upstream.script(*step(rule("tests-first", "Write the failing test first.")))
    first = evolve(reef, S, "write the failing test first")
    assert first["result"]["release"] == "v1", first  # no release to compare with: published at once
    upstream.script(*step(rule("small-diffs", "Keep each diff small.")))
    second = evolve(reef, S, "keep diffs small")
    assert second["result"]["verdict"] == "canary" and second["result"]["release"] is None, second
    return reef


def scores(better: float, worse: float, n: int) -> list[float]:
    """``n`` deterministic scores whose mean is about ``better`` (1s and 0s, spread out)."""
    return [1.0 if (i * 7919 % 100) < better * 100 else worse for i in range(n)]


def c2_ended(reef: Any) -> bool:
    """Whether canary c2 has ended: the worker decides on a session's score in its own time, so
    a request sent after the test read "running" may already be served what it decided."""
    now = canary(reef)["canary"]
    return now is None or (now["name"], now["state"]) != ("c2", "running")


def test_a_better_candidate_serves_its_share_then_becomes_the_next_release(reefine, upstream):
    reef = start_canary(reefine, upstream)
    state = canary(reef)["canary"]
    assert (state["name"], state["base"], state["state"], state["share"]) == ("c2", "v1", "running", 0.5)
    # the next candidate waits while the canary runs
    waiting_steps = list(step(rule("names", "Name things plainly.")))
    only_chats(upstream, waiting_steps)
    queued = httpx.post(
        f"{reef.url}/reef/train", json={"text": "name things plainly"}, headers={"x-reef-scenario": S}
    )
    ask_id = queued.json()["agent_record_id"]
    good, bad = scores(0.9, 0.0, 200), scores(0.2, 0.0, 200)
    arms = {"c2": 0, "v1": 0}
    for i in range(200):
        tree = session_tree(reef, f"s{i}")
        if tree["canary"] != "c2" and c2_ended(reef):
            break  # it ended on the last session's score after the check below read it
        assert tree["canary"] == "c2" and tree["arm"] in ("canary", "control")
        assert tree["release"] == ("c2" if tree["arm"] == "canary" else "v1")
        again = session_tree(reef, f"s{i}")
        if again["arm"] != tree["arm"] and c2_ended(reef):
            break
        assert again["arm"] == tree["arm"]  # sticky
        arms[tree["release"]] += 1
        run_session(reef, f"s{i}", good[i] if tree["arm"] == "canary" else bad[i])
        progress = httpx.get(
            f"{reef.url}/reef/harness/requests/{ask_id}/progress", headers={"x-reef-scenario": S}
        ).json()
        now = canary(reef)["canary"]
        if (now["name"], now["state"]) != ("c2", "running"):
            break
        assert progress["state"] == "queued", progress  # one canary at a time: no step meanwhile
    ended = next(c for c in canary_history(reef) if c["name"] == "c2")
    assert ended["state"] == "promoted" and ended["release"] == "v2", ended
    assert ended["decision"]["state"] == "promote" and ended["decision"]["difference"] > 0
    assert arms["c2"] > 0 and arms["v1"] > 0
    listing = httpx.get(f"{reef.url}/reef/scenarios/{S}/releases").json()
    v2 = next(r for r in listing["releases"] if r["release"] == "v2")
    assert v2["current"] and "canary" in v2["verdict"]
    files = httpx.get(f"{reef.url}/reef/harness", params={"scenario": S}).json()["files"]
    assert any("small-diffs" in path for path in files)
    # the waiting ask ran once c2 ended: it is the next canary, against v2
    deadline = time.monotonic() + 30
    while canary(reef)["canary"]["name"] != "c3":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert canary(reef)["canary"]["base"] == "v2"
    assert session_tree(reef, "after")["release"] in ("c3", "v2")


def test_a_worse_candidate_is_retired_and_nothing_is_published(reefine, upstream):
    reef = start_canary(reefine, upstream)
    only_chats(upstream, [])
    ended = run_until_decided(reef, "w", scores(0.1, 0.0, 200), scores(0.9, 0.0, 200))
    assert ended["state"] == "retired" and "release" not in ended, ended
    assert ended["decision"]["difference"] < 0
    listing = httpx.get(f"{reef.url}/reef/scenarios/{S}/releases").json()
    assert [r["release"] for r in listing["releases"]] == ["v1"]


def test_an_equal_candidate_runs_to_max_sessions_and_is_not_published(reefine, upstream):
    reef = start_canary(reefine, upstream)
    only_chats(upstream, [])
    same = scores(0.5, 0.0, 400)
    canary_sessions = 0
    for i in range(400):
        tree = session_tree(reef, f"e{i}")
        run_session(reef, f"e{i}", same[i // 2])  # both arms draw from one sequence
        canary_sessions += tree["arm"] == "canary"
        if canary(reef)["canary"]["state"] != "running":
            break
        assert canary_sessions <= 40
    ended = wait_ended(reef)
    assert ended["state"] == "expired", ended
    assert ended["decision"]["canary"]["n"] == 40
    assert [
        r["release"] for r in httpx.get(f"{reef.url}/reef/scenarios/{S}/releases").json()["releases"]
    ] == ["v1"]


def test_a_person_stops_or_promotes_it_and_bad_requests_change_nothing(reefine, upstream):
    reef = start_canary(reefine, upstream)
    only_chats(upstream, [])
    assert (
        httpx.get(
            f"{reef.url}/reef/harness/canary", params={"adapter": "pi", "scenario": S, "session": "a b"}
        ).status_code
        == 400
    )
    assert (
        httpx.get(f"{reef.url}/reef/harness/canary", params={"scenario": S, "session": "x"}).status_code
        == 400
    )
    assert httpx.post(f"{reef.url}/reef/scenarios/{S}/canary/stop", json={"by": 7}).status_code == 400
    assert httpx.get(f"{reef.url}/reef/scenarios/nope/canary").status_code == 404
    assert canary(reef)["canary"]["state"] == "running"
    promoted = httpx.post(f"{reef.url}/reef/scenarios/{S}/canary/promote", json={"by": "alice"})
    assert promoted.status_code == 200, promoted.text
    assert promoted.json()["canary"]["release"] == "v2" and "alice" in promoted.json()["canary"]["why"]
    again = httpx.post(f"{reef.url}/reef/scenarios/{S}/canary/stop")
    assert again.status_code == 404 and "no canary" in again.json()["error"]["message"]


class _At:
    def __init__(self, url: str) -> None:
        self.url = url


def test_a_daemon_killed_mid_canary_resumes_with_the_same_arms_assignments_and_counts(tmp_path, upstream):
    from tests.daemon.test_process import start

    flags = ("--recipe.name", "reefine", "--inference.upstream-model", "scripted-model", *CANARY)
    proc, url = start(tmp_path, upstream.url, *flags)
    try:
        reef = _At(url)
        upstream.script(*step(rule("tests-first", "Write the failing test first.")))
        assert evolve(reef, S, "write the failing test first")["result"]["release"] == "v1"
        upstream.script(*step(rule("small-diffs", "Keep each diff small.")))
        assert evolve(reef, S, "keep diffs small")["result"]["verdict"] == "canary"
        only_chats(upstream, [])
        arms = {f"k{i}": run_session(reef, f"k{i}", 0.5)["arm"] for i in range(8)}  # too few to decide
        before = canary(reef)
        assert before["canary"]["state"] == "running"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

        proc, url = start(tmp_path, upstream.url, *flags)
        reef = _At(url)
        after = canary(reef)
        for key in ("name", "base", "step", "share", "started_at", "state"):
            assert after["canary"][key] == before["canary"][key]
        assert after["canary"]["test"]["control"] == before["canary"]["test"]["control"]
        assert after["canary"]["test"]["canary"] == before["canary"]["test"]["canary"]
        assert {s: session_tree(reef, s)["arm"] for s in arms} == arms
        assert run_until_decided(reef, "m", scores(0.9, 0.0, 200), scores(0.1, 0.0, 200))["release"] == "v2"
    finally:
        proc.kill()
        proc.wait(10)


def test_on_two_nodes_a_canary_publishes_through_the_remote_and_a_chain_moved_elsewhere_supersedes_it(
    reefine, upstream, tmp_path
):
    from reef_core.store.repo import init_bare
    from tests.conftest import git

    remote = tmp_path / "remote.git"
    init_bare(remote)
    a = reefine(*CANARY, "--storage.node", "a")
    b = reefine(*CANARY, "--storage.node", "b")

    def sync(reef: Any) -> None:
        answer = httpx.post(f"{reef.url}/reef/scenarios/{S}/sync", timeout=60)
        assert answer.status_code == 200 and answer.json()["remotes"][0]["outcome"] == "ok", answer.text

    def served(reef: Any) -> str:
        return httpx.get(f"{reef.url}/reef/harness", params={"scenario": S}).json()["release"]

    upstream.script(*step(rule("tests-first", "Write the failing test first.")))
    assert evolve(a, S, "write the failing test first")["result"]["release"] == "v1"
    added = httpx.post(f"{a.url}/reef/scenarios/{S}/remotes", json={"name": "origin", "url": str(remote)})
    assert added.status_code == 200, added.text
    assert httpx.post(f"{b.url}/reef/scenarios", json={"name": S}).status_code in (200, 201)
    added = httpx.post(f"{b.url}/reef/scenarios/{S}/remotes", json={"name": "origin", "url": str(remote)})
    assert added.status_code == 200, added.text
    assert served(b) == "v1"

    upstream.script(*step(rule("small-diffs", "Keep each diff small.")))
    assert evolve(a, S, "keep diffs small")["result"]["verdict"] == "canary"
    only_chats(upstream, [])
    assert run_until_decided(a, "n", scores(0.9, 0.0, 200), scores(0.1, 0.0, 200))["release"] == "v2"
    tags = git("--git-dir", str(remote), "tag", "--list").stdout.split()
    assert tags == ["v1", "v2"]  # published through the remote, its tag with it
    sync(b)
    assert served(b) == "v2"

    # the next canary runs on a while b rolls back to v1: a's promote loses, nothing forks
    upstream.script(*step(rule("names", "Name things plainly.")))
    assert evolve(a, S, "name things plainly")["result"]["verdict"] == "canary"
    rolled = httpx.post(f"{b.url}/reef/scenarios/{S}/rollback", json={"release": "v1"})
    assert rolled.status_code == 200 and rolled.json()["release"] == "v3", rolled.text
    ended = httpx.post(f"{a.url}/reef/scenarios/{S}/canary/promote", json={"by": "alice"})
    assert ended.status_code == 409 and "was not published" in ended.json()["error"]["message"], ended.text
    state = canary(a)["canary"]
    assert state["name"] == "c3" and state["state"] == "superseded" and "release" not in state, state
    chain = git(
        "--git-dir", str(remote), "log", "--first-parent", "--format=%s", "release"
    ).stdout.splitlines()
    assert [line.split()[0] for line in chain] == ["v3", "v2", "v1"]
    sync(a)
    assert served(a) == "v3"
