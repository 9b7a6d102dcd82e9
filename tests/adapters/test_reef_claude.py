"""``reef-claude``, its installer and reef's Claude Code hooks, with the real claude 2.1.332, offline,
against a real daemon and the scripted upstream (both wire formats).

Claude Code's print mode shows a hook's "block" answer on stdout as ``UserPromptSubmit operation
blocked by hook:\\n<answer>\\n\\nOriginal prompt: …`` and makes no model call; its session id
comes back in ``--output-format json``'s ``session_id``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from reef_core.harness import Entry, HarnessTree
from tests.adapters.claude_machine import SCENARIO, ClaudeMachine, require_claude
from tests.adapters.test_pi_install import publish
from tests.conftest import git
from tests.fakes.upstream import ScriptedUpstream, Text
from tests.reefine.conftest import rule, skill

pytestmark = pytest.mark.e2e

GREETING = "Hello from the scripted upstream."
SKILL = "---\nname: bisect\ndescription: Use when a regression has an unknown cause.\n---\nRun git bisect.\n"
RULE = "Answer in one short paragraph."
BLOCKED = "UserPromptSubmit operation blocked by hook:\n"


@pytest.fixture
def claude_machine(tmp_path) -> ClaudeMachine:
    return ClaudeMachine(tmp_path, require_claude())


def records(reef, tag: str, token: str | None = None) -> list[dict[str, Any]]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(
        f"{reef.url}/reef/scenarios/{SCENARIO}/records", params={"tag": tag, "limit": 1000}, headers=headers
    )
    assert response.status_code == 200, response.text
    return response.json()["records"]


def reports(reef) -> list[dict[str, Any]]:
    response = httpx.get(f"{reef.url}/reef/scenarios/{SCENARIO}/items", params={"kind": "report"})
    assert response.status_code == 200, response.text
    return response.json()["items"]


def answer(run: subprocess.CompletedProcess) -> str:
    """What a reef hook answered in print mode."""
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith(BLOCKED), run.stdout + run.stderr
    return run.stdout[len(BLOCKED) :].split("\n\nOriginal prompt: ", 1)[0]


def as_json(run: subprocess.CompletedProcess) -> dict[str, Any]:
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(run.stdout)


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_a_run_reaches_the_upstream_through_reef_recorded_with_its_session(
    make_reef, upstream: ScriptedUpstream, claude_machine: ClaudeMachine, api: str
):
    reef = make_reef(api=api)
    claude_machine.install(reef)
    result = as_json(claude_machine.reef_claude("-p", "hi", "--output-format", "json"))
    assert result["result"] == GREETING
    # passthrough to an Anthropic upstream, translation to an OpenAI one
    assert upstream.requests[-1].path == ("/v1/messages" if api == "anthropic" else "/v1/chat/completions")
    [record] = records(reef, f"session:{result['session_id']}")
    assert record["tags"] == {"run": claude_machine.last_tag(), "session": result["session_id"]}
    assert record["request"]["messages"][0] == {"role": "user", "content": "hi"}
    assert (
        f"record {record['id']}" in git("--git-dir", reef.repo(SCENARIO), "log", "--oneline", "data").stdout
    )
    # the session is a session to reef: reefine's judge and usage steps see it
    [session] = httpx.get(f"{reef.url}/reef/scenarios/{SCENARIO}/sessions").json()["sessions"]
    assert session["session"] == result["session_id"] and session["records"] == [record["id"]]


def test_a_project_settings_file_cannot_route_claude_around_reef(
    make_reef, upstream: ScriptedUpstream, claude_machine: ClaudeMachine
):
    reef = make_reef(api="anthropic")
    claude_machine.install(reef)
    project = claude_machine.work / ".claude"
    project.mkdir()
    elsewhere = {
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
        "ANTHROPIC_AUTH_TOKEN": "someone-elses-token",
        "ANTHROPIC_CUSTOM_HEADERS": "x-reef-scenario: other",
    }
    (project / "settings.json").write_text(json.dumps({"env": elsewhere}))
    (project / "settings.local.json").write_text(json.dumps({"env": elsewhere}))
    result = as_json(claude_machine.reef_claude("-p", "hi", "--output-format", "json"))
    assert result["result"] == GREETING
    assert len(records(reef, f"run:{claude_machine.last_tag()}")) == 1
    assert upstream.requests[-1].headers["x-api-key"] == "reef-local"  # reef's key, not the project's


def test_the_installer_writes_the_config_dir_and_a_rerun_writes_nothing(
    make_reef, claude_machine: ClaudeMachine
):
    reef = make_reef()
    # the person's own Claude Code config, which reef must never touch
    own = claude_machine.home / ".claude"
    own.mkdir()
    (own / "settings.json").write_text('{"model": "mine"}\n')
    (claude_machine.home / ".claude.json").write_text('{"hasCompletedOnboarding": false}\n')
    theirs = {p: claude_machine.files()[p] for p in (".claude/settings.json", ".claude.json")}
    publish(
        reef,
        HarnessTree.of([Entry("skill", "bisect", SKILL), Entry("rule", "style", RULE + "\n")]),
        HarnessTree.of(
            [
                Entry("rule", "style", RULE + "\n"),
                Entry("extension", "hello", "export default function (pi) {}\n"),
                Entry("config", "settings", '{"permissions": {"allow": ["Bash(npm test:*)"]}}\n'),
            ]
        ),
    )
    run = claude_machine.install(reef, release="v1")
    assert "claude_code harness of scenario dev: release v1 installed" in run.stdout
    config = claude_machine.config
    assert (config / "skills/bisect/SKILL.md").read_text() == SKILL
    assert (config / "rules/style.md").read_text() == RULE + "\n"
    assert "disable-model-invocation: true" in (config / "commands/versions.md").read_text()
    settings = json.loads((config / "settings.json").read_text())
    assert settings["env"]["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert "ANTHROPIC_BASE_URL" not in settings["env"]  # routing travels with --settings, per run
    prompt_hook = settings["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
    assert prompt_hook == '"${REEF_CLAUDE_LAUNCHER:-reef-claude}" hook prompt'
    sidecar = claude_machine.sidecar()
    assert sidecar["release"] == "v1" and sidecar["claude"] == claude_machine.env["REEF_CLAUDE"]
    assert sidecar["claude_version"] == "2.1.332"
    assert sorted(sidecar["files"]) == sorted(
        str(p.relative_to(config)) for p in config.rglob("*") if p.is_file()
    )
    for path, digest in sidecar["files"].items():
        assert sha256(config / path) == digest, path
    assert claude_machine.launcher.stat().st_mode & 0o111

    before = claude_machine.files()
    again = claude_machine.install(reef, release="v1")
    assert "up to date" in again.stdout and "nothing written" in again.stdout
    assert claude_machine.files() == before

    # v2 drops the skill and brings a pi extension, which Claude Code has no form for
    moved = claude_machine.install(reef, release="v2")
    assert "v2 installed" in moved.stdout
    assert f"removed {config}/skills/bisect/SKILL.md" in moved.stdout
    assert "note: extensions/hello.ts is a pi extension: Claude Code cannot run it" in moved.stdout
    assert not (config / "skills").exists() and not list(config.rglob("*.ts"))
    allowed = json.loads((config / "settings.json").read_text())["permissions"]["allow"]
    assert allowed == ["Bash(npm test:*)"]

    # a run seeds Claude Code's state in reef's config dir, never in the person's own
    run = claude_machine.reef_claude("-p", "hi")
    assert run.returncode == 0, run.stdout + run.stderr
    state = json.loads((config / ".claude.json").read_text())
    assert state["hasCompletedOnboarding"] is True
    assert state["projects"][str(claude_machine.work)]["hasTrustDialogAccepted"] is True
    assert [p for p, v in state["projects"].items() if v.get("hasTrustDialogAccepted")] == [
        str(claude_machine.work)
    ]
    assert {p: claude_machine.files()[p] for p in theirs} == theirs


def test_a_token_is_sent_but_never_written_where_others_can_read_it(make_reef, claude_machine: ClaudeMachine):
    token = "s3cret-claude-token"
    reef = make_reef("--reef.tokens", token)
    script = claude_machine.script(reef, authorization=f"Bearer {token}")
    assert token not in script
    claude_machine.install(reef, token=token)
    # without the token the daemon refuses the placeholder, and Claude Code says so
    refused = claude_machine.reef_claude("-p", "hi")
    assert refused.returncode == 1 and "401 the token is not valid for this reef" in refused.stdout
    run = claude_machine.reef_claude("-p", "hi", REEF_TOKEN=token)
    assert run.returncode == 0 and run.stdout.strip() == GREETING, run.stdout + run.stderr
    [record] = records(reef, f"run:{claude_machine.last_tag()}", token)
    runs = list((claude_machine.base / "runs").iterdir())
    assert [p.stat().st_mode & 0o777 for p in runs] == [0o600, 0o600]
    assert all(token in p.read_text() for p in runs[:1]) or all(token in p.read_text() for p in runs[1:])
    assert token not in json.dumps(record)


def test_versions_evolve_and_feedback_answer_in_session_without_a_model_call(
    make_reef, upstream: ScriptedUpstream, claude_machine: ClaudeMachine
):
    reef = make_reef("--recipe.name", "reefine", api="anthropic")
    claude_machine.install(reef)
    earlier = as_json(claude_machine.reef_claude("-p", "hi", "--output-format", "json"))
    first = as_json(claude_machine.reef_claude("-p", "hello", "--output-format", "json"))
    session = first["session_id"]
    [receipt] = [r["id"] for r in records(reef, f"session:{session}")]
    asked = len(upstream.requests)
    recorded = reef.reader(SCENARIO).data.counts()["record"]

    assert answer(claude_machine.reef_claude("-p", "/versions")) == (
        f"reef: scenario {SCENARIO} has no releases yet; ask for one with /evolve <what to change>"
    )
    # feedback on a resumed session: its receipts, none of another session's
    said = answer(claude_machine.reef_claude("-p", "--resume", session, "/feedback too slow"))
    assert said.startswith("reef: feedback noted as rep_") and said.endswith("on 1 receipt of this session")
    [report] = reports(reef)
    assert report["references"] == [receipt] and report["feedback"] == "too slow"
    assert report["metadata"] == {
        "harness": "claude_code",
        "session": session,
        "source": "user",
        "command": "feedback",
    }
    assert earlier["session_id"] != session
    good = answer(claude_machine.reef_claude("-p", "--resume", session, "/good"))
    assert good.startswith("reef: /good noted as rep_")
    assert [r.get("score") for r in reports(reef)] == [None, 1]
    assert len(upstream.requests) == asked

    filed = answer(claude_machine.reef_claude("-p", "/evolve document every public function"))
    assert filed.startswith("reef: ask ask_") and f"filed for scenario {SCENARIO}" in filed
    ask_id = filed.split()[2].rstrip(".")
    assert reef.reader(SCENARIO).data.get(ask_id).data["harness"] == "claude_code"
    assert answer(claude_machine.reef_claude("-p", "/feedback")) == (
        "reef: usage: /feedback <what was good or bad in this session>"
    )
    # none of it reached the model (the ask did: reefine's proposer works on it, unrecorded)
    assert reef.reader(SCENARIO).data.counts()["record"] == recorded
    assert len(records(reef, f"session:{session}")) == 1


def test_without_reef_claude_the_commands_say_how_to_start_it(make_reef, claude_machine: ClaudeMachine):
    reef = make_reef()
    claude_machine.install(reef)
    # as `reef install` says once the script ran (fetching it creates nothing): the scenario
    # exists, so "no report" below is a count, not a 404
    noted = httpx.post(
        f"{reef.url}/reef/harness/installed", params={"scenario": SCENARIO}, json={"adapter": "claude_code"}
    )
    assert noted.status_code == 200, noted.text
    env = {
        **claude_machine.env,
        "CLAUDE_CONFIG_DIR": str(claude_machine.config),
        "ANTHROPIC_BASE_URL": reef.url,
        "ANTHROPIC_AUTH_TOKEN": "reef-local",
    }
    run = subprocess.run(
        [claude_machine.env["REEF_CLAUDE"], "-p", "/good"],
        env=env,
        cwd=claude_machine.work,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        answer(run)
        == "reef: this Claude Code was not started through reef: run it with reef-claude to use /good"
    )
    assert reports(reef) == []


def test_doctor_passes_then_without_the_daemon_says_to_start_it(make_reef, claude_machine: ClaudeMachine):
    reef = make_reef()
    claude_machine.install(reef)
    doctor = claude_machine.reef_claude("doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "ok    claude       " in doctor.stdout and "is Claude Code 2.1.332" in doctor.stdout
    reef.stop()
    down = claude_machine.reef_claude("doctor")
    assert down.returncode == 1 and "start it with `reef serve`" in down.stdout
    run = claude_machine.reef_claude("-p", "hi")
    assert run.returncode == 1 and "start it with `reef serve`" in run.stderr


def test_an_open_reef_passes_the_persons_own_anthropic_key_to_the_upstream(
    make_reef, upstream: ScriptedUpstream, claude_machine: ClaudeMachine
):
    reef = make_reef(api="anthropic")  # no token, no upstream key of its own
    claude_machine.install(reef)
    key = "sk-ant-" + "k" * 24
    run = claude_machine.reef_claude("-p", "hi", ANTHROPIC_API_KEY=key)
    assert run.returncode == 0 and run.stdout.strip() == GREETING, run.stdout + run.stderr
    assert upstream.requests[-1].headers["x-api-key"] == key


# ------------------------------------------------------------------------------------ releases

FAILING_TEST = "Reproduce a bug with a failing test before fixing it."
ASK = "when I ask you to fix a bug, reproduce it with a failing test first"


def schema_name(body: dict[str, Any]) -> str | None:
    """Which structured answer reefine asks for (OpenAI ``response_format`` or Anthropic tool)."""
    wanted = (body.get("response_format") or {}).get("json_schema") or {}
    forced = body.get("tool_choice")  # a string ("auto") from a harness, an object when forced
    return wanted.get("name") or (forced.get("name") if isinstance(forced, dict) else None)


def plays_reefine(upstream: ScriptedUpstream, *changes: dict[str, Any]) -> None:
    """The upstream answers each part of an ask step by what it is asked: the proposal, the
    self-review and the reviewer by their schemas; anything else (the health checks, whichever
    harnesses run them, and Claude Code itself) with the greeting."""
    answers = {
        "harness_change": json.dumps(
            {"design": "One entry that does what was asked.", "changes": list(changes)}
        ),
        "self_review": '{"verdict": "delivers", "missing": ""}',
        "review": '{"implements_ask": true, "unrelated_changes": false, "reason": "it does what was asked"}',
    }

    def respond(route: str, body: dict[str, Any]) -> Text | None:
        name = schema_name(body)
        return Text(answers[name]) if name in answers else None

    upstream.responder = respond


def hook_outputs(run: subprocess.CompletedProcess, event: str) -> list[str]:
    """What the hooks of ``event`` printed, from ``--output-format stream-json --include-hook-events``."""
    assert run.returncode == 0, run.stdout + run.stderr
    found = []
    for line in run.stdout.splitlines():
        message = json.loads(line)
        if message.get("subtype") == "hook_response" and message.get("hook_event") == event:
            found.append(str(message.get("stdout") or message.get("output") or ""))
    return found


def test_an_ask_becomes_a_release_that_update_installs_and_the_next_request_carries(
    reefine, upstream: ScriptedUpstream, claude_machine: ClaudeMachine
):
    reef = reefine("--inference.upstream-api", "anthropic")
    claude_machine.install(reef)
    plays_reefine(upstream, skill("failing-test-first", FAILING_TEST), rule("brevity", RULE))

    evolved = claude_machine.reef_claude("evolve", ASK, "--wait", "--timeout", "180")
    assert evolved.returncode == 0, evolved.stdout + evolved.stderr
    assert "selected: v1 (c1)" in evolved.stdout and "next: reef-claude update" in evolved.stdout
    ask_id = evolved.stdout.split()[1]
    assert reef.reader(SCENARIO).data.get(ask_id).data["harness"] == "claude_code"

    # the next session says a newer release exists; v1 is not in Claude Code's request yet
    stream = ["-p", "hi", "--output-format", "stream-json", "--verbose", "--include-hook-events"]
    [notice] = hook_outputs(claude_machine.reef_claude(*stream), "SessionStart")
    said = json.loads(notice)["systemMessage"]
    assert said.startswith('reef: v1 is available (installed: none): "when I ask you to fix a bug')
    assert "install it with /versions v1 install, or reef-claude update" in said
    assert FAILING_TEST not in json.dumps(upstream.requests[-1].body)

    updated = claude_machine.reef_claude("update")
    assert updated.returncode == 0 and "v1 installed" in updated.stdout, updated.stdout + updated.stderr
    assert claude_machine.sidecar()["release"] == "v1"

    # the skill is listed to the model and the rule is in its context; the notice is gone
    after = claude_machine.reef_claude(*stream)
    assert hook_outputs(after, "SessionStart") == [""]
    sent = json.dumps(upstream.requests[-1].body)
    assert "failing-test-first" in sent and RULE in sent
    table = answer(claude_machine.reef_claude("-p", "/versions")).splitlines()
    assert table[0].split() == ["version", "id", "result", "installed/current", "ask"]
    assert table[1].split()[0] == "v1" and table[1].split()[2:4] == ["selected", "installed,"]


def test_a_hook_entry_waits_for_a_person_who_confirms_it_in_session(
    reefine, upstream: ScriptedUpstream, claude_machine: ClaudeMachine
):
    reef = reefine()
    claude_machine.install(reef)
    hook = {"PostToolUse": [{"matcher": "Edit", "hooks": [{"type": "command", "command": "echo edited"}]}]}
    settings = {"op": "create", "kind": "config", "name": "settings", "content": json.dumps({"hooks": hook})}
    plays_reefine(upstream, settings)
    evolved = claude_machine.reef_claude("evolve", "say when a file was edited", "--wait", "--timeout", "180")
    assert "pending: c1 adds or changes code" in evolved.stdout, evolved.stdout + evolved.stderr

    asked = answer(claude_machine.reef_claude("-p", "/versions c1 install"))
    assert asked.startswith("reef: c1 changes what runs on this machine and waits for a person's approval.")
    assert "config/settings.json (hooks)" in asked and "/versions c1 install yes" in asked
    listing = httpx.get(f"{reef.url}/reef/scenarios/{SCENARIO}/releases").json()
    assert listing["releases"] == [] and [s["pending"] for s in listing["steps"]] == [True]
    assert claude_machine.sidecar()["release"] is None

    done = answer(claude_machine.reef_claude("-p", "/versions c1 install yes"))
    assert done.startswith("reef: c1 is now v1.\nreef: installed v1."), done
    assert claude_machine.sidecar()["release"] == "v1"
    [release] = httpx.get(f"{reef.url}/reef/scenarios/{SCENARIO}/releases").json()["releases"]
    assert release["approved_by"].endswith(" via Claude Code /versions")
    installed = json.loads((claude_machine.config / "settings.json").read_text())["hooks"]
    assert installed["PostToolUse"] == hook["PostToolUse"]
    assert [h["hooks"][0]["command"] for h in installed["UserPromptSubmit"]] == [
        '"${REEF_CLAUDE_LAUNCHER:-reef-claude}" hook prompt'
    ]


# ------------------------------------------------------------------------------------ which claude


def test_a_new_enough_claude_on_path_is_used_and_report_finds_the_last_runs_receipts(
    make_reef, claude_machine: ClaudeMachine, tmp_path
):
    reef = make_reef()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "claude").symlink_to(claude_machine.env.pop("REEF_CLAUDE"))
    claude_machine.env["PATH"] = f"{claude_machine.env['PATH']}:{bindir}"
    run = claude_machine.install(reef)
    assert "installing" not in run.stdout
    assert claude_machine.sidecar()["claude"] == str(bindir / "claude")
    ran = claude_machine.reef_claude("-p", "hi")
    assert ran.returncode == 0 and ran.stdout.strip() == GREETING, ran.stdout + ran.stderr
    reported = claude_machine.reef_claude("report", "--score", "0", "--feedback", "it never ran the tests")
    assert reported.returncode == 0, reported.stderr
    [receipt] = [r["id"] for r in records(reef, f"run:{claude_machine.last_tag()}")]
    [report] = reports(reef)
    assert report["references"] == [receipt] and report["score"] == 0
    assert report["metadata"]["harness"] == "claude_code"
    link = answer(claude_machine.reef_claude("-p", "/versions v9"))
    assert link == f"reef: no release or pending step v9 in scenario {SCENARIO}: see /versions"


@pytest.mark.slow
def test_without_a_new_enough_claude_the_script_installs_the_pinned_one_with_npm(
    make_reef, claude_machine: ClaudeMachine, tmp_path
):
    """npm installs from the project's npm cache, offline (what scripts/setup.sh filled); an old
    claude on PATH is not used."""
    cache = Path(__file__).resolve().parents[2] / ".cache" / "npm"
    if not cache.is_dir():
        pytest.fail(f"no npm cache at {cache}: run scripts/setup.sh --dev", pytrace=False)
    reef = make_reef()
    bindir = tmp_path / "old-bin"
    bindir.mkdir()
    old = bindir / "claude"
    old.write_text("#!/bin/sh\necho '1.0.44 (Claude Code)'\n")
    old.chmod(0o755)
    npm = shutil.which("npm")
    assert npm, "npm is needed: run scripts/setup.sh --dev"
    env = {k: v for k, v in claude_machine.env.items() if k != "REEF_CLAUDE"}
    env["PATH"] = f"{env['PATH']}:{bindir}:{Path(npm).parent}"
    run = subprocess.run(
        ["sh", "-s"],
        input=claude_machine.script(reef),
        env={**env, "npm_config_cache": str(cache), "npm_config_offline": "true"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    npm_claude = claude_machine.home / ".reef" / "npm" / "bin" / "claude"
    assert "installing Claude Code 2.1.332" in run.stdout
    assert claude_machine.sidecar()["claude"] == str(npm_claude)
    ran = subprocess.run(
        ["reef-claude", "-p", "hi"],
        env=env,
        cwd=claude_machine.work,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0 and ran.stdout.strip() == GREETING, ran.stdout + ran.stderr
    again = subprocess.run(
        ["sh", "-s"], input=claude_machine.script(reef), env=env, capture_output=True, text=True
    )
    assert again.returncode == 0 and "nothing written" in again.stdout and "installing" not in again.stdout
