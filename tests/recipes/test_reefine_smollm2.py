"""reefine on SmolLM2-135M-Instruct (``builtin:smollm2``) as its own model.

An inner daemon serves SmolLM2 and records every call made to it; the outer daemon runs
reefine with the inner one as its model (the recipe's calls are never recorded by the daemon
that makes them, so the inner one is where they can be read).  A 135M model proposes nothing a
person would keep: what holds is that the loop runs on a local model and ends with a verdict a
person can read, and that each structured answer, constrained by its schema, is JSON that the
schema validates (never "the answer holds no JSON object").  Sampled text is never asserted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.daemon.conftest import RunningReef
from tests.reefine.conftest import ask, settle
from tests.upstream.schemas import violations
from tests.upstream.smollm2 import model_cache, smollm2

__all__ = ["model_cache", "smollm2"]

pytestmark = pytest.mark.slow


@pytest.fixture
def inner(tmp_path: Path, model_cache: Path, smollm2) -> Iterator[RunningReef]:
    daemon = RunningReef(
        tmp_path / "inner",
        "--inference.model-path",
        "builtin:smollm2",
        "--inference.model-cache",
        str(model_cache),
    ).start(timeout=300)
    yield daemon
    daemon.stop()


def test_an_ask_on_smollm2_ends_with_a_verdict_and_every_structured_answer_follows_its_schema(
    inner, tmp_path
):
    outer = RunningReef(
        tmp_path / "outer",
        "--recipe.name", "reefine",
        "--recipe.config.health", "false",
        "--recipe.config.max-tokens", "1024",  # bounds every answer (and so the test's time)
        "--recipe.config.revisions", "0",
        "--recipe.config.retries", "1",
        "--inference.upstream-url", f"{inner.url}/s/inner/v1",
    ).start()  # fmt: skip
    try:
        asked = ask(outer, "work", "answer in one short paragraph")
        assert asked.status_code == 200, asked.text
        result = settle(outer, "work", asked.json()["agent_record_id"], timeout=900)["result"]
    finally:
        outer.stop()
    verdict = result["verdict"]
    assert verdict and "unusable" not in verdict and "holds no JSON" not in verdict, result

    calls = httpx.get(f"{inner.url}/reef/scenarios/inner/records", params={"limit": 100}).json()["records"]
    structured = [c for c in calls if "response_format" in c["request"]]
    assert structured and len(structured) == len(calls)  # every reefine call asks for a schema
    for call in structured:
        choice = call["response"]["choices"][0]
        assert choice["finish_reason"] == "stop", call["request"]["response_format"]["json_schema"]["name"]
        schema = call["request"]["response_format"]["json_schema"]["schema"]
        assert violations(json.loads(choice["message"]["content"]), schema) == []
