"""Every harness through every kind of upstream, end to end with the real binaries.

Each cell installs a harness with ``reef install`` in a fresh HOME, as a new user does, runs
one prompt through its launcher against a real daemon whose upstream speaks one API only, and
plays a model that first calls the harness's own file-reading tool on a file holding a
marker, then answers with what the tool gave back.  The harness must run the tool (its call
came back in the harness's own format), the tool's output must reach the upstream in the
upstream's own format, the harness must print the answer, and every record must be complete
and carry the harness's session.

The harnesses are the oldest and newest pi reef supports, Claude Code, Codex and opencode; the
upstreams speak OpenAI chat completions only (no ``/v1/responses``: a 404, as llama.cpp's
server answers), OpenAI with the Responses API, or Anthropic messages only.  Each harness
streams as it always does.  The scripted upstream checks tools as the real servers do (chat
completions takes function tools alone).  ``scripts/capture_harness_requests.sh`` runs the
Responses column with ``REEF_CAPTURE`` set, which keeps each harness's requests as the
fixtures of ``tests/fixtures/harness_requests/`` (``tests/wire/test_harness_fixtures.py``
replays them against each kind of upstream).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.claude_code.install import CLAUDE_VERSION
from adapters.codex.install import CODEX_VERSION
from adapters.opencode.render import OPENCODE_VERSION
from adapters.pi.launcher import PI_MIN_VERSION
from reef_core.sessions import session_of
from tests.adapters.claude_machine import ClaudeMachine, require_claude
from tests.adapters.codex_machine import CodexMachine, require_codex
from tests.adapters.conftest import SCENARIO, Machine
from tests.adapters.opencode_machine import OpencodeMachine, require_opencode
from tests.fakes.upstream import ScriptedUpstream, Text, ToolCall, tool_results
from tests.reefine.pi import PI_NEXT, require_pi

pytestmark = pytest.mark.e2e

MARKER = "reef-marker-7f3a"
ASKED = "What do the notes in notes.txt say?"
ANSWER = f"The notes say {MARKER}."
TITLE = "Notes"  # what a harness's aside (opencode's title request) gets
PROMPT = "{prompt}"


@dataclass(frozen=True)
class Harness:
    """How to run one harness once, and the model's call of its file-reading tool."""

    machine: Callable[[Path], Machine]
    args: tuple[str, ...]  # the launcher's arguments, the prompt where PROMPT stands
    tool: Callable[[Path], tuple[str, dict[str, Any]]]  # the work dir -> (tool name, arguments)
    name: str  # the record's ``harness``


HARNESSES = {
    f"pi-{PI_MIN_VERSION}": Harness(
        lambda root: Machine(root, require_pi(PI_MIN_VERSION).path),
        ("-p", PROMPT),
        lambda work: ("read", {"path": str(work / "notes.txt")}),
        "pi",
    ),
    f"pi-{PI_NEXT}": Harness(
        lambda root: Machine(root, require_pi(PI_NEXT).path),
        ("-p", PROMPT),
        lambda work: ("read", {"path": str(work / "notes.txt")}),
        "pi",
    ),
    f"claude-{CLAUDE_VERSION}": Harness(
        lambda root: ClaudeMachine(root, require_claude()),
        ("-p", PROMPT, "--allowedTools", "Read"),
        lambda work: ("Read", {"file_path": str(work / "notes.txt")}),
        "claude_code",
    ),
    f"codex-{CODEX_VERSION}": Harness(
        lambda root: CodexMachine(root, require_codex()),
        # Codex's own sandbox cannot start under /tmp (it will not put its helper there), where
        # the test's HOME is; a person's ~/.reef is not under /tmp
        ("exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", PROMPT),
        lambda work: ("exec_command", {"cmd": "cat notes.txt"}),
        "codex",
    ),
    f"opencode-{OPENCODE_VERSION}": Harness(
        lambda root: OpencodeMachine(root, require_opencode()),
        ("run", PROMPT),
        lambda work: ("read", {"filePath": str(work / "notes.txt")}),
        "opencode",
    ),
}
_PATHS = {"openai": "chat/completions", "responses": "responses", "anthropic": "messages"}
#: each kind of upstream: the daemon's ``inference.upstream-api``, and whether it serves /v1/responses
UPSTREAMS = {"chat": ("openai", False), "responses": ("openai", True), "anthropic": ("anthropic", False)}


def install(machine: Machine, url: str) -> None:
    """``reef install SCENARIO --adapter A --url URL``, as a new user installs a harness."""
    reef = str(Path(sys.executable).with_name("reef"))
    ran = subprocess.run(
        [reef, "install", SCENARIO, "--adapter", machine.adapter, "--url", url],
        env=machine.env,
        cwd=machine.home,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert machine.launcher.exists()


def plays_a_reader(upstream: ScriptedUpstream, tool: tuple[str, dict[str, Any]]) -> None:
    """The model: a request carrying a tool's result is answered with the file's marker when
    the result holds it (else with what the tool said); the agent's first request (the one
    offering tools) calls the tool; anything else (a title) gets a title."""

    def respond(route: str, body: dict[str, Any]) -> Text | ToolCall:
        results = tool_results(f"/v1/{_PATHS[route]}", body)
        if results:
            return Text(ANSWER if any(MARKER in r for r in results) else f"The tool failed: {results}")
        if body.get("tools"):
            return ToolCall(*tool, call_id="call_read_1")
        return Text(TITLE)

    upstream.responder = respond


def capture(cell: str, machine: Machine, kept: list[dict[str, Any]]) -> None:
    """With ``REEF_CAPTURE`` set (``scripts/capture_harness_requests.sh``): the harness's own
    requests, as reef recorded them, into ``$REEF_CAPTURE/<cell>/``: the first turn (the agent's
    first request offering tools) and the turn carrying the tool's result."""
    folder = os.environ.get("REEF_CAPTURE")
    if not folder:
        return
    agent = [r for r in kept if r["request"].get("tools") and "aside" not in r["tags"]]
    turns = {
        "first.json": agent[0],
        "tool_result.json": next(r for r in agent if MARKER in json.dumps(r["request"])),
    }
    out = Path(folder) / cell
    out.mkdir(parents=True, exist_ok=True)
    home = str(machine.home)
    for name, record in turns.items():
        fixture = {
            "route": record["route"],
            "harness": record["harness"],
            "stream": record["stream"],
            "request": json.loads(json.dumps(record["request"]).replace(home, "/home/person")),
        }
        (out / name).write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n")


@pytest.mark.parametrize("kind", list(UPSTREAMS))
@pytest.mark.parametrize("cell", list(HARNESSES))
def test_a_harness_reads_a_file_through_each_kind_of_upstream(
    make_reef, upstream: ScriptedUpstream, tmp_path: Path, cell: str, kind: str
):
    harness = HARNESSES[cell]
    api, upstream.responses_api = UPSTREAMS[kind]
    reef = make_reef(api=api)
    machine = harness.machine(tmp_path)
    install(machine, reef.url)
    (machine.work / "notes.txt").write_text(f"{MARKER}\n")
    plays_a_reader(upstream, harness.tool(machine.work))

    run = machine.launch(
        *(ASKED if a == PROMPT else a for a in harness.args),
        timeout=float(os.environ.get("MATRIX_TIMEOUT", "180")),
    )

    assert run.returncode == 0, run.stdout + run.stderr
    assert ANSWER in run.stdout, run.stdout + run.stderr
    # the call went back to the harness in its own format: it ran the tool, and what the tool
    # read reached the upstream as a tool result in the upstream's own format
    results = [out for r in upstream.requests if r.body for out in tool_results(r.path, r.body)]
    assert any(MARKER in out for out in results), [r.path for r in upstream.requests]
    # each request went to the one API the upstream speaks: Codex's Responses where it is served
    chat = "/v1/chat/completions"
    speaks = {"chat": chat, "responses": chat, "anthropic": "/v1/messages"}
    if harness.name == "codex" and kind == "responses":
        speaks["responses"] = "/v1/responses"
    sent = [r.path for r in upstream.requests if r.method == "POST"]
    if harness.name == "codex" and kind == "chat":  # asked once, answered 404: translated from then on
        assert sent[0] == "/v1/responses" and upstream.responses_api is False
        sent = sent[1:]
    assert set(sent) == {speaks[kind]}
    listed = httpx.get(f"{reef.url}/reef/scenarios/{SCENARIO}/records", params={"limit": 1000})
    kept = listed.json()["records"]  # in the order they were written
    assert kept and all(r["complete"] and r["status"] == 200 for r in kept), [
        (r["status"], r["error"]) for r in kept
    ]
    assert {r["harness"] for r in kept} == {harness.name}
    assert all(session_of(r) for r in kept)
    assert len({session_of(r) for r in kept}) == 1  # one session, every turn of it
    if harness.name == "codex" and kind != "responses":  # what only OpenAI runs is left out, and said
        [first] = [r for r in kept if MARKER not in json.dumps(r["request"])]
        assert {
            "field": "tools[8]",
            "kind": "web_search",
            "why": "runs only on OpenAI's servers, which this upstream is not",
        } in first["left_out"]
    if kind == "responses":
        capture(cell, machine, kept)


@pytest.mark.parametrize("kind", ["chat", "anthropic"])
def test_codex_calls_a_namespaced_tool_and_gets_its_reasoning_back_without_responses(
    make_reef, upstream: ScriptedUpstream, tmp_path: Path, kind: str
):
    """Codex's ``multi_agent_v1`` tools reach an upstream without the Responses API as plain
    functions; the model's call of one comes back to Codex under its name and namespace, so
    Codex runs it (a sub-agent starts, and its id is the tool's result); on a chat upstream the
    model's reasoning goes back with the turn it led to."""
    api, upstream.responses_api = UPSTREAMS[kind]
    reef = make_reef(api=api)
    machine = CodexMachine(tmp_path, require_codex())
    install(machine, reef.url)
    thought = "A helper should look first."

    def respond(route: str, body: dict[str, Any]) -> Text | ToolCall:
        said = json.dumps(body)
        if "agent_id" in said:  # the tool's result: the sub-agent Codex started
            return Text("A helper is on it.")
        if "look around" in said:  # the sub-agent's own turn
            return Text("Looked around.")
        return ToolCall("multi_agent_v1__spawn_agent", {"message": "look around"}, reasoning=thought)

    upstream.responder = respond
    run = machine.launch("exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", "start a helper")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "A helper is on it." in run.stdout
    # (the chat upstream was asked for /v1/responses once, and said 404)
    answered = [r for r in upstream.requests if r.path != "/v1/responses"]
    offered = [r.body for r in answered if r.body and r.body.get("tools")]
    names = [t["function"]["name"] if kind == "chat" else t["name"] for t in offered[0]["tools"]]
    assert "multi_agent_v1__spawn_agent" in names and "web_search" not in json.dumps(offered[0]["tools"])
    [result] = [r.body for r in answered if r.body and "agent_id" in json.dumps(r.body)]
    if kind == "chat":
        [turn] = [m for m in result["messages"] if m.get("tool_calls")]
        assert turn["tool_calls"][0]["function"]["name"] == "multi_agent_v1__spawn_agent"
        assert turn["reasoning_content"] == thought
    kept = httpx.get(f"{reef.url}/reef/scenarios/{SCENARIO}/records", params={"limit": 1000}).json()[
        "records"
    ]
    [record] = [r for r in kept if "agent_id" in json.dumps(r["request"])]
    # the record holds the conversation as Codex sent it: the call under its name and namespace
    [call] = [i for i in record["request"]["input"] if i.get("type") == "function_call"]
    assert (call["name"], call["namespace"]) == ("spawn_agent", "multi_agent_v1")
