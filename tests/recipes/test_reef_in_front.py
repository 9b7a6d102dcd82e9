"""reef in front of reef, and reefine on the model the daemon serves itself.

The inner daemon serves the embedded model; the outer one takes it as its upstream (its base
URL names the inner scenario: ``/s/<scenario>/v1``), records every exchange under its own
receipts and runs reefine against it.  A reefine daemon may also use its own in-process model
when no upstream is set.  The embedded model is far too weak to propose anything: what these
tests hold is that the loop runs and ends with a clear verdict, never a refusal of the wiring.
"""

from __future__ import annotations

import httpx

from tests.daemon.conftest import RunningReef
from tests.reefine.conftest import ask, settle

CHAT = {"model": "builtin:tiny", "messages": [{"role": "user", "content": "Any news?"}], "max_tokens": 8}


def _records(reef, scenario: str) -> list[dict]:
    response = httpx.get(f"{reef.url}/reef/scenarios/{scenario}/records", params={"limit": 100})
    return response.json()["records"] if response.status_code == 200 else []


def test_an_outer_reef_records_under_its_own_receipts_and_runs_reefine_on_an_inner_one(tiny_reef, tmp_path):
    inner = tiny_reef()
    outer = RunningReef(
        tmp_path / "outer",
        "--recipe.name", "reefine",
        "--recipe.config.health", "false",
        "--inference.upstream-url", f"{inner.url}/s/inner/v1",
    ).start()  # fmt: skip
    try:
        answer = httpx.post(
            f"{outer.url}/v1/chat/completions", json=CHAT, headers={"x-reef-scenario": "outer"}
        )
        assert answer.status_code == 200, answer.text
        [mine] = _records(outer, "outer")
        [theirs] = _records(inner, "inner")
        assert answer.headers["x-reef-agent-record-id"] == mine["id"] != theirs["id"]  # its own receipt
        assert (
            mine["response"]["choices"][0]["message"]["content"]
            == theirs["response"]["choices"][0]["message"]["content"]
        )

        asked = ask(outer, "outer", "answer in one short paragraph")
        assert asked.status_code == 200, asked.text
        result = settle(outer, "outer", asked.json()["agent_record_id"], timeout=240)["result"]
        assert result["verdict"]  # settled, with a verdict a person can read
        assert "x-reef-scenario" not in result["verdict"] and "(400)" not in result["verdict"], result
        assert len(_records(outer, "outer")) == 1  # the recipe's own model calls are not recorded
    finally:
        outer.stop()


def test_reefine_uses_the_model_served_in_process_when_no_upstream_is_set(tiny_reef):
    reef = tiny_reef("--recipe.name", "reefine", "--recipe.config.health", "false")
    asked = ask(reef, "own", "answer in one short paragraph")
    assert asked.status_code == 200, asked.text
    result = settle(reef, "own", asked.json()["agent_record_id"], timeout=240)["result"]
    assert result["verdict"] and "needs a model" not in result["verdict"], result
    assert _records(reef, "own") == []  # the recipe's model calls are not recorded
