"""reefine on a scenario installed for Claude Code: the proposer is told Claude Code's facts, the
candidate must render for it, and the real claude (after the real pi) is the health check."""

from __future__ import annotations

import json

import httpx
import pytest

from recipes.reefine.usage_step import step_adapters
from tests.fakes.upstream import ScriptedUpstream, Text
from tests.reefine.claude import require_claude
from tests.reefine.conftest import APPROVE, DELIVERS, HEALTHY, evolve, extension, proposal, skill

pytestmark = pytest.mark.e2e

S = "dev"
FAILING_TEST = "Reproduce a bug with a failing test before fixing it."


@pytest.fixture(autouse=True)
def claude():
    return require_claude()


def install(reef, adapter: str = "claude_code") -> None:
    """What ``reef install`` does: fetch the script, run it, say it ran (the GET notes nothing)."""
    response = httpx.get(
        f"{reef.url}/reef/harness/install", params={"adapter": adapter, "scenario": S}, timeout=30
    )
    assert response.status_code == 200, response.text
    noted = httpx.post(
        f"{reef.url}/reef/harness/installed", params={"scenario": S}, json={"adapter": adapter}, timeout=30
    )
    assert noted.status_code == 200 and noted.json()["noted"], noted.text


def config(name: str, value: dict) -> dict:
    return {"op": "create", "kind": "config", "name": name, "content": json.dumps(value)}


def last_step(reef) -> dict:
    return reef.reader(S).releases.candidates()[-1].record


def test_an_ask_is_checked_by_pi_and_by_claude_code(reefine, upstream: ScriptedUpstream, claude):
    reef = reefine()
    install(reef)
    upstream.script(proposal(skill("failing-test-first", FAILING_TEST)), DELIVERS, HEALTHY, HEALTHY, APPROVE)

    result = evolve(reef, S, "reproduce bugs with a failing test first")["result"]

    assert result["verdict"] == "selected" and result["release"] == "v1", result
    checks = {c["name"]: c["detail"] for c in result["checks"]}
    assert list(checks) == ["well_formed", "screens", "health", "reviewer"]
    assert "for pi" in checks["well_formed"] and "for claude_code" in checks["well_formed"]
    pi_said, claude_said = checks["health"].split("; ")
    assert pi_said.startswith("pi ") and "answered in" in pi_said
    assert claude_said.startswith(f"Claude Code {claude.version} answered in ")

    asked = upstream.requests
    assert len(asked) == 5  # proposal, self-review, pi, Claude Code, reviewer
    system = asked[0].body["messages"][0]["content"]
    assert "installed for 2 harnesses: pi and claude_code" in system
    assert "Harness: pi " in system and "Harness: Claude Code " in system
    assert "Claude Code has none (pi's TypeScript extensions do not run in it)" in system
    # pi's request, then Claude Code's own (translated by reef), each with the candidate's skill
    assert {"read", "bash"} <= {t["function"]["name"] for t in asked[2].body["tools"]}
    assert {"Skill", "Bash"} <= {t["function"]["name"] for t in asked[3].body["tools"]}
    assert "failing-test-first" in json.dumps(asked[2].body) and "failing-test-first" in json.dumps(
        asked[3].body
    )
    assert reef.reader(S).data.counts().get("record", 0) == 0  # health checks are not recorded

    step = last_step(reef)
    assert step["adapter"] == ["pi", "claude_code"] and step_adapters(step) == ["pi", "claude_code"]
    [health] = [c for c in step["checks"] if c["name"] == "health"]
    assert set(health["metrics"]) == {"health_seconds", "claude_health_seconds"}


def test_a_pi_extension_still_releases_and_well_formed_says_claude_code_skips_it(reefine, upstream):
    reef = reefine()
    install(reef)
    upstream.script(proposal(extension("hello")), DELIVERS, HEALTHY, HEALTHY, APPROVE)

    result = evolve(reef, S, "add a /hello command that runs code")["result"]

    assert result["verdict"] == "pending", result  # extension code waits for a person, as ever
    [well_formed] = [c["detail"] for c in result["checks"] if c["name"] == "well_formed"]
    skip = "claude_code: extensions/hello.ts is a pi extension: Claude Code cannot run it, so it is not "
    skip += "installed"
    assert well_formed.endswith(skip)


def test_a_tree_claude_code_cannot_take_is_rejected_naming_the_adapter(reefine, upstream):
    reef = reefine()
    install(reef)
    upstream.script(
        proposal(config("settings", {"env": {"ANTHROPIC_BASE_URL": "http://elsewhere"}})), DELIVERS
    )

    result = evolve(reef, S, "send my requests elsewhere")["result"]

    assert result["verdict"] == "rejected: well_formed", result
    [check] = result["checks"]
    assert check["detail"].startswith("cannot render for claude_code: config/settings.json sets env.")
    assert len(upstream.requests) == 2  # no harness started, no reviewer asked


def test_settings_claude_code_will_not_load_fail_its_health_after_pi_passes(reefine, upstream, sandbox):
    reef = reefine()
    install(reef)
    upstream.script(
        proposal(config("settings", {"permissions": {"allow": "Bash"}})), DELIVERS, HEALTHY, HEALTHY
    )

    result = evolve(reef, S, "let the agent run shell commands")["result"]

    assert result["verdict"] == "rejected: health", result
    [health] = [c["detail"] for c in result["checks"] if c["name"] == "health"]
    assert health.startswith("pi ")
    assert health.endswith(
        "Claude Code could not load the candidate's settings: These settings did not load: "
        "settings.json (permissions.allow): Expected array, but received string (in the sandbox)"
    )


def test_a_scenario_for_claude_code_alone_runs_only_claudes_health(reefine, upstream, claude):
    reef = reefine("--recipe.config.adapter", "claude_code")
    install(reef)
    upstream.script(proposal(skill("failing-test-first", FAILING_TEST)), DELIVERS, HEALTHY, APPROVE)

    result = evolve(reef, S, "reproduce bugs with a failing test first")["result"]

    assert result["verdict"] == "selected", result
    [health] = [c["detail"] for c in result["checks"] if c["name"] == "health"]
    assert health.startswith(f"Claude Code {claude.version} answered in ")
    system = upstream.requests[0].body["messages"][0]["content"]
    assert "Harness: Claude Code " in system and "Harness: pi " not in system
    assert last_step(reef)["adapter"] == ["claude_code"]


def test_a_missing_claude_fails_the_health_check_saying_how_to_install_it(
    reefine, upstream, monkeypatch, tmp_path
):
    monkeypatch.setenv("REEF_CLAUDE", str(tmp_path / "no-claude-here"))
    reef = reefine()
    install(reef)
    upstream.script(proposal(skill("failing-test-first", FAILING_TEST)), DELIVERS, HEALTHY)

    result = evolve(reef, S, "reproduce bugs with a failing test first")["result"]

    assert result["verdict"] == "rejected: health", result
    [health] = [c["detail"] for c in result["checks"] if c["name"] == "health"]
    assert "Claude Code 2.1.332 or newer was not found" in health
    assert health.endswith("run scripts/setup.sh --dev, or point REEF_CLAUDE at a claude binary")


def test_old_step_records_name_one_adapter():
    assert step_adapters({"adapter": "pi"}) == ["pi"]
    assert step_adapters({"adapter": ["pi", "claude_code"]}) == ["pi", "claude_code"]
    assert step_adapters({}) == []


def test_without_an_install_only_pi_is_asked(reefine, upstream):
    reef = reefine()
    upstream.script(proposal(skill("failing-test-first", FAILING_TEST)), DELIVERS, Text("READY"), APPROVE)

    result = evolve(reef, S, "reproduce bugs with a failing test first")["result"]

    assert result["verdict"] == "selected", result
    assert "Claude Code" not in upstream.requests[0].body["messages"][0]["content"]
    assert last_step(reef)["adapter"] == ["pi"]
