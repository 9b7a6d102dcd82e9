"""``GET /metrics`` read with prometheus_client's own parser: its counts are what the test did,
behind the daemon's token, with no per-scenario series unless an operator asks for them."""

from __future__ import annotations

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.upstream import ScriptedUpstream

TOKEN = "metrics-test-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}


def scrape(
    reef, headers: dict[str, str] | None = None
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of one scrape: (name, sorted labels) -> value."""
    response = httpx.get(f"{reef.url}/metrics", headers=AUTH if headers is None else headers, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def client(reef, scenario: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{reef.url}/v1",
        api_key=TOKEN,
        max_retries=0,
        default_headers={"x-reef-scenario": scenario},
    )


def test_the_counts_are_what_the_daemon_did(make_reef, upstream: ScriptedUpstream):
    reef = make_reef(env={"REEF_TOKEN": TOKEN})
    chat = client(reef, "s")
    for _ in range(3):
        chat.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    with chat.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True
    ) as s:
        assert [c for c in s]
    bad = httpx.post(
        f"{reef.url}/v1/chat/completions",
        headers={**AUTH, "x-reef-scenario": "s", "content-type": "application/json"},
        content=b"{",
    )
    assert bad.status_code == 400
    assert httpx.get(f"{reef.url}/no/such/route", headers=AUTH).status_code == 404
    assert httpx.get(f"{reef.url}/metrics").status_code == 401  # behind the token

    got = scrape(reef)
    route = (("route", "/v1/chat/completions"),)
    assert got[("reef_http_requests_total", (*route, ("status", "200")))] == 4
    assert got[("reef_http_requests_total", (*route, ("status", "400")))] == 1
    assert got[("reef_http_requests_total", (("route", "unmatched"), ("status", "404")))] == 1
    assert got[("reef_http_requests_total", (("route", "/metrics"), ("status", "401")))] == 1
    assert got[("reef_records_written_total", ())] == 4  # the bad request was answered, not recorded
    for histogram in ("reef_added_latency_seconds", "reef_upstream_latency_seconds"):
        assert got[(f"{histogram}_count", route)] == 4, histogram
        assert got[(f"{histogram}_bucket", (("le", "+Inf"), *route))] == 4
        assert got[(f"{histogram}_sum", route)] > 0
    assert got[("reef_open_scenarios", ())] == 1 and got[("reef_disk_full", ())] == 0
    # every record went in a group commit; nothing is left queued once its receipt came back
    assert got[("reef_group_commit_size_sum", ())] == 4 and got[("reef_writer_queue_depth", ())] == 0
    assert got[("reef_group_commit_size_count", ())] >= 1
    assert not any(("scenario", "s") in labels for _, labels in got)  # no scenario label by default
    # a scrape counts itself from the next one on
    assert scrape(reef)[("reef_http_requests_total", (("route", "/metrics"), ("status", "200")))] == 1


def test_the_scenario_label_is_an_operator_s_choice(make_reef, upstream: ScriptedUpstream):
    reef = make_reef("--ops.metrics-scenario-label", "true")
    for scenario in ("a", "b", "b"):
        client(reef, scenario).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    got = scrape(reef, headers={})
    assert got[("reef_records_written_total", (("scenario", "a"),))] == 1
    assert got[("reef_records_written_total", (("scenario", "b"),))] == 2
    assert got[("reef_open_scenarios", ())] == 2
    # the scenario in the path is the route's pattern, never a label of its own
    httpx.post(
        f"{reef.url}/s/c/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
    ).raise_for_status()
    got = scrape(reef, headers={})
    assert (
        got[("reef_http_requests_total", (("route", "/s/{scenario}/v1/chat/completions"), ("status", "200")))]
        == 1
    )


def test_metrics_off_serves_no_route_and_changes_nothing_else(make_reef, upstream: ScriptedUpstream):
    reef = make_reef("--ops.metrics", "false")
    client(reef, "s").chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert httpx.get(f"{reef.url}/metrics").status_code == 404


def test_learning_steps_count_by_verdict_and_syncs_by_outcome(
    make_reef, upstream: ScriptedUpstream, tmp_path
):
    from reef_core.store.remotes import add_remote
    from reef_core.store.repo import init_bare
    from tests.conftest import wait_for

    reef = make_reef("--recipe.implementation", "tests.cli.recipes:AskRecipe")
    for text in ("prefer short answers", "be rude to the user"):  # one selected, one fails its check
        asked = httpx.post(f"{reef.url}/reef/train", json={"text": text}, headers={"x-reef-scenario": "s"})
        assert asked.status_code == 200, asked.text
    assert wait_for(lambda: scrape(reef, {}).get(("reef_learning_step_seconds_count", ())) == 2, timeout=30)
    got = scrape(reef, {})
    assert got[("reef_learning_steps_total", (("verdict", "selected"),))] == 1
    assert got[("reef_learning_steps_total", (("verdict", "rejected"),))] == 1  # "rejected: …" is one label
    assert got[("reef_sync_lag_seconds", ())] == 0  # nothing synced yet

    remote = tmp_path / "remote.git"
    init_bare(remote)
    add_remote(reef.state_dir / "scenarios" / "s.git", "origin", str(remote))
    add_remote(reef.state_dir / "scenarios" / "s.git", "gone", str(tmp_path / "missing.git"))
    outcomes = [
        r["outcome"] for r in httpx.post(f"{reef.url}/reef/scenarios/s/sync", timeout=60).json()["remotes"]
    ]
    got = scrape(reef, {})
    for outcome in set(outcomes):
        assert got[("reef_syncs_total", (("outcome", outcome),))] == outcomes.count(outcome)
    assert "ok" in outcomes and got[("reef_sync_lag_seconds", ())] >= 0


def test_repacks_are_counted(make_reef, upstream: ScriptedUpstream):
    from tests.conftest import wait_for

    reef = make_reef("--storage.pack-every", "3")
    chat = client(reef, "s")
    for _ in range(8):
        chat.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert wait_for(lambda: scrape(reef, {}).get(("reef_repacks_total", ()), 0) >= 1, timeout=30)
