"""``reef-codex``, its installer and reef's Codex hooks, with the real Codex CLI 0.171.0, offline,
against a real daemon (its Responses route) and the scripted upstream.

``codex exec --json`` prints ``thread.started`` with the session id first; a prompt that reef's
``UserPromptSubmit`` hook blocks reaches no model (exec shows no reason; the TUI does, see the
tmux test at the end).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

from reef_core.harness import Entry, HarnessTree
from tests.adapters.codex_machine import SCENARIO, CodexMachine, require_codex
from tests.adapters.test_pi_install import publish
from tests.adapters.test_reef_claude import plays_reefine, records, reports
from tests.adapters.tmux import Pane, pane_in
from tests.fakes.upstream import ScriptedUpstream, Text
from tests.reefine.conftest import rule, skill

pytestmark = pytest.mark.e2e

GREETING = "Hello from the scripted upstream."
SKILL = "---\nname: bisect\ndescription: Use when a regression has an unknown cause.\n---\nRun git bisect.\n"
RULE = "Answer in one short paragraph."
EXEC = ("exec", "--skip-git-repo-check", "--json")


@pytest.fixture
def codex_machine(tmp_path: Path) -> CodexMachine:
    return CodexMachine(tmp_path, require_codex())


def events(run: subprocess.CompletedProcess) -> list[dict[str, Any]]:
    assert run.returncode == 0, run.stdout + run.stderr
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]


def session_of(run: subprocess.CompletedProcess) -> str:
    return next(e["thread_id"] for e in events(run) if e["type"] == "thread.started")


def said(run: subprocess.CompletedProcess) -> list[str]:
    return [e["item"]["text"] for e in events(run) if e.get("item", {}).get("type") == "agent_message"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_run_reaches_the_upstream_through_reef_recorded_with_codex_s_session(
    make_reef, upstream: ScriptedUpstream, codex_machine: CodexMachine
):
    reef = make_reef()
    codex_machine.install(reef)
    run = codex_machine.reef_codex(*EXEC, "hi")
    assert said(run) == [GREETING]
    session = session_of(run)
    [record] = records(reef, f"session:{session}")
    assert record["harness"] == "codex"
    assert record["tags"] == {"run": codex_machine.last_tag(), "session": session, "release": "none"}
    assert upstream.requests[-1].path == "/v1/responses"  # passed through to an OpenAI upstream
    # the person's own ~/.codex is never made: every run's CODEX_HOME is the install
    assert not (codex_machine.home / ".codex").exists()
    [listed] = httpx.get(f"{reef.url}/reef/scenarios/{SCENARIO}/sessions").json()["sessions"]
    assert listed["session"] == session and listed["records"] == [record["id"]]


def test_the_installer_writes_the_home_checks_every_file_and_a_rerun_writes_nothing(
    make_reef, codex_machine: CodexMachine
):
    reef = make_reef()
    own = codex_machine.home / ".codex"
    own.mkdir()
    (own / "config.toml").write_text('model = "mine"\n')
    publish(
        reef,
        HarnessTree.of(
            [
                Entry("skill", "bisect", SKILL),
                Entry("rule", "style", RULE + "\n"),
                Entry("command", "review", "---\ndescription: Review the diff.\n---\nReview $ARGUMENTS.\n"),
                Entry("extension", "hello", "export default function (pi) {}\n"),
            ]
        ),
    )
    run = codex_machine.install(reef, release="v1")
    assert "codex harness of scenario dev: release v1 installed" in run.stdout
    assert "extensions/hello.ts is a pi extension: Codex cannot run it" in run.stdout + run.stderr
    home = codex_machine.config
    assert (home / "skills/bisect/SKILL.md").read_text() == SKILL
    assert "## style\n\nAnswer in one short paragraph." in (home / "AGENTS.md").read_text()
    assert "Review the text after the command." in (home / "skills/review/SKILL.md").read_text()
    assert 'wire_api = "responses"' in (home / "reef-config.toml").read_text()
    sidecar = codex_machine.sidecar()
    assert sidecar["release"] == "v1"
    for name, digest in sidecar["files"].items():
        assert sha256(home / name) == digest, name

    before = codex_machine.files()
    codex_machine.install(reef, release="v1")
    assert codex_machine.files() == before  # nothing written, not even the sidecar
    assert (own / "config.toml").read_text() == 'model = "mine"\n'


def test_an_ask_becomes_v1_that_update_installs_and_the_next_request_carries(
    reefine, upstream: ScriptedUpstream, codex_machine: CodexMachine
):
    reef = reefine()  # the health check runs the real codex exec on the candidate
    codex_machine.install(reef)
    plays_reefine(
        upstream, skill("failing-test-first", "Write the failing test first."), rule("brevity", RULE)
    )
    evolved = codex_machine.reef_codex(
        "evolve", "write a failing test before a fix", "--wait", "--timeout", "180"
    )
    assert evolved.returncode == 0, evolved.stdout + evolved.stderr
    assert "selected: v1" in evolved.stdout and "reef-codex update" in evolved.stdout
    assert reef.reader(SCENARIO).data.get(evolved.stdout.split()[1]).data["harness"] == "codex"

    assert said(codex_machine.reef_codex(*EXEC, "hi")) == [GREETING]
    assert RULE not in json.dumps(upstream.requests[-1].body)  # v1 is not installed yet
    updated = codex_machine.reef_codex("update")
    assert updated.returncode == 0 and "v1 installed" in updated.stdout, updated.stdout + updated.stderr
    assert said(codex_machine.reef_codex(*EXEC, "hi")) == [GREETING]
    sent = json.dumps(upstream.requests[-1].body)
    assert RULE in sent and "failing-test-first" in sent  # the rule in AGENTS.md, the skill listed


def test_in_session_commands_are_answered_by_reef_s_hook_without_a_model_call(
    make_reef, upstream: ScriptedUpstream, codex_machine: CodexMachine
):
    reef = make_reef("--recipe.name", "reefine")
    codex_machine.install(reef)
    session = session_of(codex_machine.reef_codex(*EXEC, "hello"))
    [receipt] = [r["id"] for r in records(reef, f"session:{session}")]
    asked, recorded = len(upstream.requests), reef.reader(SCENARIO).data.counts()["record"]

    events(codex_machine.reef_codex(*EXEC, ":versions"))
    events(codex_machine.reef_codex(*EXEC, "resume", session, ":feedback too slow"))
    events(codex_machine.reef_codex(*EXEC, "resume", session, ":good"))
    assert [(r["references"], r.get("score"), r["feedback"]) for r in reports(reef)] == [
        ([receipt], None, "too slow"),
        ([receipt], 1, None),
    ]
    assert reports(reef)[0]["metadata"] == {
        "harness": "codex",
        "session": session,
        "source": "user",
        "command": "feedback",
    }
    assert len(upstream.requests) == asked  # none of it reached the model
    assert reef.reader(SCENARIO).data.counts()["record"] == recorded


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"model_providers": {"x": {"base_url": "http://127.0.0.1:9/v1"}}}, "model_providers"),
        ({"openai_base_url": "http://127.0.0.1:9/v1"}, "openai_base_url"),
        ({"features": {"plugins": True}}, "features.plugins"),
        ({"model_provider": "openai"}, "model_provider"),
    ],
)
def test_a_tree_that_would_route_around_reef_is_refused_naming_the_key(make_reef, codex_machine, config, key):
    reef = make_reef()
    publish(reef, HarnessTree.of([Entry("config", "codex", json.dumps(config) + "\n")]))
    response = httpx.get(
        f"{reef.url}/reef/harness/install", params={"adapter": "codex", "scenario": SCENARIO, "release": "v1"}
    )
    assert response.status_code == 400, response.text
    assert key in response.json()["error"]["message"] and "reef owns" in response.json()["error"]["message"]
    assert not codex_machine.base.exists()


# -- interactive -------------------------------------------------------------------------------


def typed(pane: Pane, text: str) -> None:
    """Codex's composer takes a pasted line and its Enter apart, or the Enter is lost."""
    pane.send(text)
    time.sleep(0.5)
    pane.send("Enter")


@pytest.fixture
def pane(tmp_path: Path) -> Any:
    yield from pane_in(tmp_path, "codex")


def test_an_interactive_codex_session_shows_the_notice_answers_and_versions(
    make_reef, upstream: ScriptedUpstream, codex_machine: CodexMachine, pane: Pane
):
    reef = make_reef()
    publish(
        reef,
        HarnessTree.of([Entry("rule", "style", RULE + "\n")]),
        HarnessTree.of([Entry("rule", "s", "x\n")]),
    )
    codex_machine.install(reef, release="v1")
    env = {**codex_machine.env, "TERM": "xterm-256color"}
    started = pane.tmux(
        "new-session", "-d", "-s", "codex", "-x", "200", "-y", "50", "-c", str(codex_machine.work),
        "env", "-i", *(f"{k}={v}" for k, v in env.items()), "reef-codex",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    pane.wait_for(r"To get started", timeout=90)
    upstream.script(Text(GREETING), Text(GREETING))  # the answer, and the TUI's title request
    typed(pane, "say hello")
    shown = pane.wait_for(rf"• {re.escape(GREETING)}")
    # Codex starts the session (and its SessionStart hooks) with the first prompt: the notice
    # shows above the answer; reef trusted its own hooks, so Codex asked nothing first
    assert re.search(r"reef: v2 is available \(installed: v1\)", shown), shown
    assert "install it with :versions v2 install, or reef-codex update" in shown
    assert "Hooks need review" not in shown
    sent = [r for r in upstream.requests if RULE in json.dumps(r.body)]
    assert sent, "v1's rule reached the model"

    typed(pane, ":versions")
    shown = pane.wait_for(r"v1 +[0-9a-f]{7} +\S+ +installed", timeout=30)
    assert "Blocked by hook" in shown
    typed(pane, ":good")
    pane.wait_for(r"reef: :good noted as rep_\w+ on \d+ receipts? of this session", timeout=30)


def test_a_codex_app_server_that_hangs_costs_the_trust_timeout_not_the_session(
    make_reef, upstream: ScriptedUpstream, codex_machine: CodexMachine, tmp_path: Path
):
    """An operator's Codex whose app-server never answers: the run goes on, says so, and Codex
    (which then asks the person about the hooks itself) still answers through reef."""
    real = codex_machine.env["REEF_CODEX"]
    wrapper = tmp_path / "codex"
    wrapper.write_text(f'#!/bin/sh\nif [ "$1" = app-server ]; then exec sleep 600; fi\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    codex_machine.env["REEF_CODEX"] = str(wrapper)
    reef = make_reef()
    codex_machine.install(reef)
    run = codex_machine.reef_codex(*EXEC, "hi", timeout=90)
    assert said(run) == [GREETING]
    assert "could not trust reef's hooks; Codex will ask you about them" in run.stderr
    assert not (codex_machine.config / ".reef-hooks-trusted").exists()  # tried again next start


def test_reef_trusts_its_own_hooks_and_never_a_project_s(
    make_reef, upstream: ScriptedUpstream, codex_machine: CodexMachine
):
    """A cloned repository's ``.codex/hooks.json`` is Codex's question to the person: reef-codex
    trusts the hooks of its own CODEX_HOME only, so a project's hook does not run unasked."""
    ran = codex_machine.home / "project-hook-ran"
    project = codex_machine.work / ".codex"
    project.mkdir()
    hook = {"hooks": [{"type": "command", "command": f"touch {ran}", "timeout": 5}]}
    (project / "hooks.json").write_text(json.dumps({"hooks": {"UserPromptSubmit": [hook]}}))
    reef = make_reef()
    codex_machine.install(reef)
    assert said(codex_machine.reef_codex(*EXEC, "hi")) == [GREETING]
    trusted = tomllib.loads((codex_machine.config / "config.toml").read_text())["hooks"]["state"]
    assert trusted and all(key.startswith(f"{codex_machine.config / 'hooks.json'}:") for key in trusted)
    assert not ran.exists()
