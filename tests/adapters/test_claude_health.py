"""Claude Code's health check drives the real claude (2.1.x) through a real reef daemon on loopback,
in front of the scripted upstream."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from adapters.claude_code.health import CLAUDE_MIN_VERSION, claude_routing, find_claude, run_claude_health
from reef_core.errors import InvalidInput
from reef_core.harness import HEALTH_TASK, HarnessTree, Target, renderer_for
from reef_core.harness import HarnessBinary as ClaudeBinary
from tests.daemon.conftest import RunningReef
from tests.fakes.upstream import Error, Hang, ScriptedUpstream, Text
from tests.reefine.claude import require_claude

pytestmark = pytest.mark.e2e

S = "cc"
RULE_MARKER = "Answer in the house style: CLAUDE_RULE_IS_LOADED."
SKILL_MARKER = "Use when bisecting a regression (CLAUDE_SKILL_IS_LOADED)."


@pytest.fixture(scope="module")
def claude() -> ClaudeBinary:
    return require_claude()


@pytest.fixture
def reef(tmp_path: Path, upstream: ScriptedUpstream) -> Iterator[RunningReef]:
    """A daemon recording everything it is not told to leave out (the basic recipe)."""
    running = RunningReef(
        tmp_path / "reef",
        "--inference.upstream-url",
        upstream.url,
        "--inference.upstream-model",
        "scripted-model",
    ).start()
    yield running
    running.stop()


def config_files(reef: RunningReef | ScriptedUpstream, settings: dict | None = None) -> dict[str, bytes]:
    """A candidate rendered for Claude Code: a rule, a skill and (optionally) its own settings."""
    entries = {
        "rules/house.md": f"# House rules\n{RULE_MARKER}\n",
        "skills/bisect/SKILL.md": f"---\nname: bisect\ndescription: {SKILL_MARKER}\n---\nRun git bisect.\n",
    }
    if settings is not None:
        entries["config/settings.json"] = json.dumps(settings)
    tree = HarnessTree.from_files({path: text.encode() for path, text in entries.items()})
    target = Target(reef_url=reef.url, scenario=S, model="scripted-model", api="anthropic")
    return renderer_for("claude_code").render(tree, target)


def routed(reef: RunningReef, **extra: str) -> dict[str, str]:
    return {**claude_routing(reef.url, S), **extra}


def test_a_good_candidate_answers_through_reef_unrecorded_and_in_isolation(claude, reef, upstream, tmp_path):
    # the scenario exists (an install made it), so "nothing recorded" is a count, not a 404
    noted = httpx.post(f"{reef.url}/reef/harness/installed?scenario={S}", json={"adapter": "claude_code"})
    assert noted.status_code == 200
    # a rule in the person's own Claude Code config must not reach the candidate's prompt
    leak = tmp_path / "user-home" / ".claude" / "rules" / "leak.md"
    leak.parent.mkdir(parents=True)
    leak.write_text("LEAKED_FROM_HOME\n")
    upstream.script(Text("READY"))
    home = str(leak.parents[2])

    result = run_claude_health(
        config_files(reef),
        env=routed(reef, HOME=home, CLAUDE_CONFIG_DIR=str(leak.parents[1])),
        claude=claude,
        timeout=60,
    )

    assert result.passed, result.detail
    assert result.output == "READY"
    assert result.detail.startswith(f"Claude Code {claude.version} answered in ")
    assert result.detail.endswith("'READY'")
    [request] = upstream.requests  # reef translated Claude's /v1/messages for the OpenAI upstream
    assert request.path == "/v1/chat/completions"
    sent = json.dumps(request.body)
    assert RULE_MARKER in sent and SKILL_MARKER in sent and HEALTH_TASK in sent
    assert "LEAKED_FROM_HOME" not in sent
    assert reef.reader(S).data.counts().get("record", 0) == 0


def test_settings_claude_will_not_load_fail_quoting_claude(claude, reef, upstream):
    upstream.script(Text("READY"))  # claude still answers: only its stderr says what went wrong
    files = config_files(reef, settings={"permissions": {"allow": "Bash"}})

    result = run_claude_health(files, env=routed(reef), claude=claude, timeout=60)

    assert not result.passed
    assert result.detail == (
        "Claude Code could not load the candidate's settings: These settings did not load: "
        "settings.json (permissions.allow): Expected array, but received string"
    )
    assert result.output == "READY"


def test_a_failing_endpoint_fails_quoting_claudes_stdout(claude, reef, upstream):
    upstream.script(*[Error(500, "upstream exploded", "api_error")] * 3)  # one retry, and spare

    result = run_claude_health(config_files(reef), env=routed(reef), claude=claude, timeout=60)

    assert not result.passed
    assert result.detail.startswith("claude exited 1: API Error: 502 upstream failed (500)"), result.detail
    assert "upstream exploded" in result.detail
    assert len(result.detail) < 340


BLOCK_EVERY_PROMPT = {
    "hooks": {
        "UserPromptSubmit": [
            {
                "hooks": [
                    {"type": "command", "command": """echo '{"decision":"block","reason":"not today"}'"""}
                ]
            }
        ]
    }
}


def test_a_hook_that_keeps_the_task_from_the_model_fails(claude, reef, upstream):
    result = run_claude_health(
        config_files(reef, settings=BLOCK_EVERY_PROMPT), env=routed(reef), claude=claude, timeout=60
    )

    assert not result.passed
    assert result.detail == (
        "a hook kept the health task from the model: UserPromptSubmit operation blocked by hook: not today"
    )
    assert upstream.requests == []


def test_a_hanging_endpoint_hits_the_timeout(claude, upstream):
    # straight to the scripted upstream (it speaks Anthropic too): a daemon relaying a request
    # that never ends would hold up its own shutdown
    upstream.script(Hang())
    env = claude_routing(upstream.url, S)

    result = run_claude_health(config_files(upstream), env=env, claude=claude, timeout=4)

    assert not result.passed
    assert result.detail.startswith("claude did not finish within 4s and was killed")
    assert 4 <= result.seconds < 10


def test_find_claude_honours_reef_claude_and_its_version_floor(claude, tmp_path):
    link = tmp_path / "bin" / "claude"
    link.parent.mkdir()
    link.symlink_to(claude.path.resolve())
    assert find_claude(env={"REEF_CLAUDE": str(link), "PATH": os.environ["PATH"]}) == ClaudeBinary(
        link, claude.version
    )

    old = tmp_path / "old-claude"
    old.write_text("#!/bin/sh\necho '2.0.77 (Claude Code)'\n")
    old.chmod(0o755)
    env = {"REEF_CLAUDE": str(old), "PATH": os.environ["PATH"]}
    # an explicit REEF_CLAUDE is not silently replaced by the project's own claude
    assert find_claude(env=env) is None
    result = run_claude_health({"settings.json": b"{}"}, env=env, timeout=5)
    assert not result.passed
    assert (
        f"REEF_CLAUDE: {old} is Claude Code 2.0.77, reef needs {CLAUDE_MIN_VERSION} or newer" in result.detail
    )
    assert result.detail.endswith("run scripts/setup.sh --dev, or point REEF_CLAUDE at a claude binary")


@pytest.mark.parametrize("name", ["../escape.md", "/etc/passwd", "", "rules/", ".claude.json"])
def test_config_file_paths_stay_inside_the_config_dir(claude, name):
    with pytest.raises(InvalidInput):
        run_claude_health({name: b"x"}, env={}, claude=claude)


def test_require_claude_fails_the_test_rather_than_skipping_it(monkeypatch, tmp_path):
    monkeypatch.setenv("REEF_CLAUDE", str(tmp_path / "no-such-claude"))
    with pytest.raises(pytest.fail.Exception, match=r"run scripts/setup.sh --dev"):
        require_claude()
