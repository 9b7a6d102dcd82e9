"""The health check drives the real pi 0.73.1 against a real HTTP endpoint (the scripted upstream)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from adapters.pi.health import PI_MIN_VERSION as PI_VERSION
from adapters.pi.health import find_pi, run_health
from reef_core.errors import InvalidInput
from reef_core.harness import HEALTH_TASK
from reef_core.harness import HarnessBinary as PiBinary
from tests.fakes.upstream import Hang, ScriptedUpstream, Text, free_port
from tests.reefine.pi import require_pi
from tests.store.procs import alive

pytestmark = pytest.mark.e2e

ENV = {"REEF_API_KEY": "sk-health-test", "REEF_SCENARIO": "health-demo"}
AGENTS_MARKER = "Answer in the house style: AGENTS_MD_IS_LOADED."
SKILL_MARKER = "Use when bisecting a regression (SKILL_IS_LOADED)."
HELLO_EXTENSION = (
    'export default function (pi: any) {\n  pi.registerCommand("hello", {handler: async () => {}});\n}\n'
)


@pytest.fixture(scope="module")
def pi() -> PiBinary:
    return require_pi(PI_VERSION)


@pytest.fixture
def up() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as server:
        yield server


def agent_files(base_url: str, **extra: str) -> dict[str, bytes]:
    """A candidate's rendered agent dir, written by hand (the renderer is tested elsewhere)."""
    models = {
        "providers": {
            "reef": {
                "baseUrl": base_url + "/v1",
                "api": "openai-completions",
                "apiKey": "REEF_API_KEY",
                "headers": {"x-reef-scenario": "REEF_SCENARIO"},
                "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                "models": [{"id": "served", "name": "Served", "contextWindow": 32000, "maxTokens": 512}],
            }
        }
    }
    files = {
        "models.json": json.dumps(models),
        "settings.json": json.dumps({"defaultProvider": "reef", "defaultModel": "served"}),
        "AGENTS.md": f"# House rules\n{AGENTS_MARKER}\n",
        "skills/bisect/SKILL.md": f"---\nname: bisect\ndescription: {SKILL_MARKER}\n---\nRun git bisect.\n",
        "prompts/review.md": "---\ndescription: Review a file\n---\nReview $1.\n",
        "extensions/hello.ts": HELLO_EXTENSION,
        **extra,
    }
    return {name: text.encode() for name, text in files.items()}


def _text(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


def test_a_good_candidate_passes_and_reaches_the_endpoint_in_isolation(pi, up, tmp_path):
    # a skill in the user's own HOME must not reach the candidate's prompt
    leak = tmp_path / "user-home" / ".agents" / "skills" / "leak" / "SKILL.md"
    leak.parent.mkdir(parents=True)
    leak.write_text("---\nname: leak\ndescription: LEAKED_FROM_HOME\n---\nx\n")
    up.script(Text("READY"))

    result = run_health(agent_files(up.url), env={**ENV, "HOME": str(leak.parents[3])}, pi=pi, timeout=30)

    assert result.passed, result.detail
    assert result.output == "READY"
    assert result.detail.startswith(f"pi {PI_VERSION} answered in ") and result.detail.endswith("'READY'")
    assert 0 < result.seconds < 30
    [request] = up.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["x-reef-scenario"] == "health-demo"
    assert request.headers["authorization"] == "Bearer sk-health-test"
    assert request.body is not None
    system, user = request.body["messages"][0], request.body["messages"][-1]
    assert system["role"] == "system"
    assert AGENTS_MARKER in _text(system)
    assert SKILL_MARKER in _text(system)
    assert "LEAKED_FROM_HOME" not in _text(system)
    assert user["role"] == "user" and HEALTH_TASK in _text(user)


SYNTAX_ERROR = "export default function (pi: any) {\n  const x = ;\n}\n"
THROWS_AT_LOAD = "export default function (pi: any) {\n  throw new Error('boom while loading');\n}\n"
THROWS_AT_START = (
    "export default function (pi: any) {\n"
    "  pi.on('session_start', async () => { throw new Error('boom at session start'); });\n}\n"
)


@pytest.mark.parametrize(
    ("broken", "quoted"),
    [
        (
            {"extensions/bad.ts": SYNTAX_ERROR},
            'Error: Failed to load extension "extensions/bad.ts": Failed to load extension: '
            "ParseError: Unexpected token extensions/bad.ts:2:12",
        ),
        (
            {"extensions/boom.ts": THROWS_AT_LOAD},
            'Error: Failed to load extension "extensions/boom.ts": Failed to load extension: '
            "boom while loading",
        ),
        (
            {"extensions/late.ts": THROWS_AT_START},
            "Extension error (extensions/late.ts): boom at session start",
        ),
        (
            {"models.json": "{ not json"},
            "pi exited 1: Failed to parse models.json: Expected property name or '}' in JSON at position 2 "
            "(print mode said: No API key found for the selected model.)",
        ),
        ({"settings.json": "{ not json"}, "settings) Expected property name or '}' in JSON at position 2"),
    ],
    ids=["extension-syntax", "extension-throws-at-load", "extension-throws-later", "models-json", "settings"],
)
def test_a_broken_candidate_fails_quoting_pi(pi, up, broken, quoted):
    up.script(Text("READY"))

    result = run_health(agent_files(up.url, **broken), env=ENV, pi=pi, timeout=30)

    assert not result.passed
    assert quoted in result.detail
    assert len(result.detail) < 400
    assert result.stderr_tail


def test_a_dead_endpoint_fails_fast(pi):
    dead = f"http://127.0.0.1:{free_port()}"

    result = run_health(agent_files(dead), env=ENV, pi=pi, timeout=30)

    assert not result.passed
    assert result.detail == "pi exited 1: Connection error."
    # pi's own agent-level retries would sleep 2 s, 4 s and 8 s: 14 s before the last attempt
    assert result.seconds < 12


EXTENSION_WITH_A_CHILD = """
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
export default function (pi: any) {
  pi.on("session_start", async () => {
    const child = spawn("sleep", ["300"], { stdio: "ignore" });
    writeFileSync(process.env.REEF_TEST_PIDS as string, `${process.pid} ${child.pid}`);
  });
}
"""


def test_a_hanging_endpoint_hits_the_timeout_and_the_process_group_is_killed(pi, up, tmp_path):
    pids_file = tmp_path / "pids"
    up.script(Hang())
    files = agent_files(up.url, **{"extensions/child.ts": EXTENSION_WITH_A_CHILD})

    # 10 s: pi compiles the extension and starts in about 2 s alone, but took past 4 s beside the
    # suite's other workers on 2 cores, and was killed before it sent its request
    result = run_health(files, env={**ENV, "REEF_TEST_PIDS": str(pids_file)}, pi=pi, timeout=10)

    assert not result.passed
    assert result.detail.startswith("pi did not finish within 10s and was killed")
    assert result.seconds >= 10
    assert len(up.requests) == 1
    pids = [int(pid) for pid in pids_file.read_text().split()]
    deadline = time.monotonic() + 3  # the orphaned child is reaped by init, soon
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [pid for pid in pids if alive(pid)] == []


def test_find_pi_honours_reef_pi(pi, tmp_path):
    link = tmp_path / "bin" / "pi"
    link.parent.mkdir()
    link.symlink_to(pi.path.resolve())

    found = find_pi(env={"REEF_PI": str(link), "PATH": os.environ["PATH"]})

    assert found == PiBinary(link, PI_VERSION)


def test_find_pi_rejects_another_version_and_the_check_says_so(tmp_path):
    other = tmp_path / "pi"
    other.write_text("#!/bin/sh\necho 0.72.0 >&2\n")  # pi prints its version on stderr
    other.chmod(0o755)
    env = {"REEF_PI": str(other), "PATH": os.environ["PATH"]}

    # an explicit REEF_PI is not silently replaced by the project's own pi
    assert find_pi(env=env) is None
    result = run_health(agent_files("http://127.0.0.1:9"), env=env, timeout=5)
    assert not result.passed
    assert f"REEF_PI: {other} is pi 0.72.0, reef needs {PI_VERSION}" in result.detail


@pytest.mark.parametrize("name", ["../escape.md", "/etc/passwd", "", "skills/"])
def test_agent_file_paths_stay_inside_the_agent_dir(pi, name):
    with pytest.raises(InvalidInput, match="must be relative"):
        run_health({name: b"x"}, env=ENV, pi=pi)


def test_a_file_cannot_also_be_a_directory(pi):
    with pytest.raises(InvalidInput, match="skills is also a directory"):
        run_health({"skills": b"x", "skills/a/SKILL.md": b"y"}, env=ENV, pi=pi)


def test_require_pi_fails_the_test_rather_than_skipping_it(monkeypatch, tmp_path):
    monkeypatch.setenv("REEF_PI", str(tmp_path / "no-such-pi"))
    with pytest.raises(pytest.fail.Exception, match=r"run scripts/setup.sh --dev"):
        require_pi()
