"""``reef_core.client.ReefClient``: every route it calls, and HTTP answers turned into reef's errors.

Against a real daemon; ``httpx.MockTransport`` only for what a healthy daemon never sends
(a 500, a body that is not JSON, a route an older daemon lacks).
"""

from __future__ import annotations

import httpx
import pytest

from reef_core.client import DaemonError, DaemonUnavailable, Progress, ReefClient
from reef_core.errors import ConflictError, InvalidInput, NotFound, ReefError, Unauthorized
from tests.cli.support import candidate, chat, publish
from tests.fakes.upstream import free_port


def test_reads_and_operations_round_trip(make_reef):
    daemon = make_reef()
    with ReefClient(daemon.url) as client:
        assert client.health()["ok"] is True
        assert client.create_scenario("s") == {"name": "s", "created": True}
        receipt = chat(daemon)
        assert [r["id"] for r in client.iter_records("s")] == [receipt]
        assert client.record("s", receipt)["id"] == receipt
        assert client.report("s", [receipt], score=1.0)["created"] is True
        v1 = publish(daemon.state_dir, "s", {"rules/a.md": b"a"})
        publish(daemon.state_dir, "s", {"rules/a.md": b"b"})
        assert [r["release"] for r in client.releases("s")["releases"]] == ["v2", "v1"]
        assert client.rollback("s", "v1")["release"] == "v3"
        assert client.harness("s", "v1")["commit"] == v1.commit
        assert [row["name"] for row in client.status()["scenarios"]] == ["s"]
        assert client.archive_scenario("s")["name"] == "s"
        assert client.scenarios() == []


def test_errors_carry_the_daemons_message_and_field(make_reef):
    daemon = make_reef()
    receipt = chat(daemon)
    with ReefClient(daemon.url) as client:
        with pytest.raises(InvalidInput) as bad:
            client.report("s", [receipt], feedback=["not", "a", "string"])  # type: ignore[arg-type]
        assert bad.value.field == "feedback" and "feedback must be a string or an object" in bad.value.message
        with pytest.raises(NotFound, match="no scenario 'nope'"):
            client.rollback("nope", "v1")
        v1 = publish(daemon.state_dir, "s", {"a": b"a"})
        publish(daemon.state_dir, "s", {"a": b"b"})
        with pytest.raises(ConflictError, match="moved"):
            client.rollback("s", "v1", expected=v1.commit)
        made = candidate(daemon.state_dir, "s", {"a": b"b"}, verdict="rejected: worse")
        with pytest.raises(ConflictError, match="not pending"):
            client.promote("s", made.step)


def test_reject_of_a_missing_candidate_is_not_found(make_reef):
    daemon = make_reef()
    chat(daemon)
    with ReefClient(daemon.url) as client, pytest.raises(NotFound):
        client.reject("s", "c1")


def test_bad_names_are_refused_before_anything_is_sent():
    client = ReefClient(f"http://127.0.0.1:{free_port()}")  # nothing listens: a send would fail
    with pytest.raises(InvalidInput, match="not a valid scenario name"):
        client.releases("../etc")
    with pytest.raises(InvalidInput, match="not a candidate"):
        client.promote("s", "x2")
    with pytest.raises(
        InvalidInput, match="v2 is a published release; a pending candidate is named by its step"
    ):
        client.reject("s", "v2")
    with pytest.raises(InvalidInput, match="not a reef id"):
        client.record("s", "rec_nope")
    for url in ("ftp://host", "localhost:8900", ""):
        with pytest.raises(InvalidInput):
            ReefClient(url)


def test_the_token_is_sent_and_never_shown(make_reef):
    daemon = make_reef(env={"REEF_TOKEN": "s3cret-token"})
    with pytest.raises(Unauthorized, match="requires a token"):
        ReefClient(daemon.url).status()
    with pytest.raises(Unauthorized) as wrong:
        ReefClient(daemon.url, "wrong-token").status()
    assert "wrong-token" not in str(wrong.value)
    client = ReefClient(daemon.url, "s3cret-token")
    assert client.status()["scenarios"] == [] and "s3cret" not in repr(client)
    assert client.health()["ok"] is True


def test_no_daemon_is_daemon_unavailable(no_daemon_by_default):
    url = no_daemon_by_default
    with pytest.raises(DaemonUnavailable, match=f"no reef daemon answers at {url}"):
        ReefClient(url).status()


def _mock(handler) -> ReefClient:
    return ReefClient("http://reef.test", transport=httpx.MockTransport(handler))


def test_what_a_healthy_daemon_never_sends():
    internal = _mock(
        lambda r: httpx.Response(
            500, json={"error": {"message": "internal error in reef", "code": "internal"}}
        )
    )
    with pytest.raises(DaemonError, match="internal error in reef"):
        internal.status()
    store = _mock(
        lambda r: httpx.Response(500, json={"error": {"message": "disk full", "code": "store_error"}})
    )
    with pytest.raises(ReefError, match="disk full") as stored:
        store.status()
    assert stored.value.code == "store_error"
    old = _mock(lambda r: httpx.Response(404, json={"error": {"message": "Not Found", "code": "http_error"}}))
    with pytest.raises(DaemonError, match=r"has no route POST /reef/scenarios/s/promote .*older reef"):
        old.promote("s", "c1")
    html = _mock(lambda r: httpx.Response(200, text="<html>"))
    with pytest.raises(DaemonError, match="not JSON"):
        html.status()

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with pytest.raises(DaemonError, match="did not answer GET /reef/status within"):
        _mock(slow).status()


def test_progress_values():
    settled = Progress.from_json(
        {"id": "ask_1", "scenario": "s", "state": "settled", "result": {"verdict": "selected"}}
    )
    assert settled.settled and settled.verdict == "selected"
    assert not Progress.from_json({"id": "ask_1", "scenario": "s", "state": "queued", "result": None}).settled
    with pytest.raises(DaemonError, match="unknown ask state"):
        Progress.from_json({"state": "dancing"})


def test_wait_reports_each_state_until_settled(make_reef):
    daemon = make_reef("--recipe.implementation", "tests.cli.recipes:AskRecipe")
    with ReefClient(daemon.url) as client:
        asked = client.train("s", "prefer short answers")
        seen: list[str] = []
        final = client.wait(
            "s",
            asked["agent_record_id"],
            timeout=30,
            interval=0.05,
            on_progress=lambda p: seen.append(p.state),
        )
    assert final.settled and final.result["release"] == "v1"
    assert seen[-1] == "settled" and set(seen) <= {"queued", "proposing", "checking", "settled"}
