"""The agent proposer: the real pi edits a workspace holding the tree, tries it, and hands it back.

The scripted upstream plays the served model behind a real reef daemon: it answers pi's turns
with tool calls (write a skill, try_harness, a probe of the sandbox) and a final design; the
try_harness tool starts a second, nested pi whose health answer the script also gives.
"""

from __future__ import annotations

import json
import os
import stat
import time
import uuid
from pathlib import Path

import httpx
import pytest

from recipes.reefine.agent import AgentProposer, agent_available
from recipes.reefine.proposer import StepSkipped
from reef_core.harness import Entry, HarnessTree, renderer_for
from tests.conftest import must_isolate
from tests.daemon.conftest import RunningReef
from tests.fakes.upstream import Captured, Hang, ScriptedUpstream, Text, ToolCall
from tests.reefine.conftest import APPROVE, HEALTHY, evolve
from tests.reefine.pi import require_pi

pytestmark = pytest.mark.e2e

S = "dev"
MODEL = "scripted-model"
DESIGN = "A skill x that makes the agent reproduce a bug with a failing test before fixing it."
SKILL = (
    "---\nname: x\ndescription: Use when fixing a bug.\n---\nReproduce the bug with a failing test first.\n"
)
BASE = HarnessTree.of([Entry("rule", "style", "Keep functions short.\n")])
ASK = 'when you fix a bug, write a failing test first; say "done"'


# what the agent's bash tool runs inside the sandbox: another loopback port, writes outside the
# workspace, a reef route, an inference request without the bridge's credential, and one with it
# that asks to be recorded elsewhere
PROBE = r"""
(exec 3<>/dev/tcp/127.0.0.1/{other_port}) 2>/dev/null && echo OTHER_PORT_REACHED || echo OTHER_PORT_REFUSED
echo escaped > {escaped} && echo PRIVATE_TMP_WRITTEN
echo escaped > {home_file} || echo HOME_WRITE_REFUSED
exec 3<>/dev/tcp/127.0.0.1/{port}
printf 'GET /reef/harness HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n' >&3
echo "reef route: $(head -1 <&3)"
body='{{"model": "m", "messages": [{{"role": "user", "content": "record me"}}]}}'
exec 5<>/dev/tcp/127.0.0.1/{port}
printf 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' >&5
printf 'Content-Length: %d\r\n\r\n%s' ${{#body}} "$body" >&5
echo "no credential: $(head -1 <&5)"
exec 4<>/dev/tcp/127.0.0.1/{port}
printf 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' >&4
printf 'Authorization: Bearer %s\r\n' "$REEF_API_KEY" >&4
printf 'x-reef-capture: true\r\nx-reef-scenario: elsewhere\r\n' >&4
printf 'Content-Length: %d\r\n\r\n%s' ${{#body}} "$body" >&4
echo "inference: $(head -1 <&4)"
"""


def proposer(reef: RunningReef, sandbox: str, workdir: Path, timeout: float = 60) -> AgentProposer:
    return AgentProposer(
        sandbox=sandbox,
        daemon_url=reef.url,
        scenario=S,
        model=MODEL,
        token=None,
        facts=renderer_for("pi").facts(),
        pi=require_pi(),
        timeout=timeout,
        workdir=workdir,
        health_timeout=30,
    )


def write_and_try(*then: Text | ToolCall) -> tuple[Text | ToolCall, ...]:
    """The agent writes skill x and calls try_harness; the nested pi answers READY; then ``then``."""
    return (
        ToolCall("write", {"path": "skills/x/SKILL.md", "content": SKILL}, call_id="call_write"),
        ToolCall("try_harness", {}, call_id="call_try"),
        HEALTHY,
        *then,
    )


def tool_result(request: Captured, call_id: str) -> str:
    """The text of the tool result ``call_id`` in a request pi sent."""
    assert request.body is not None
    for message in request.body["messages"]:
        if message.get("role") == "tool" and message.get("tool_call_id") == call_id:
            content = message["content"]
            return content if isinstance(content, str) else json.dumps(content)
    raise AssertionError(f"no tool result {call_id} in {json.dumps(request.body['messages'])[:2000]}")


def record_one_exchange(reef: RunningReef, upstream: ScriptedUpstream) -> None:
    """An ordinary, recorded exchange, so the scenario exists and recording is shown to work."""
    upstream.script(Text("hello"))
    answer = httpx.post(
        f"{reef.url}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-reef-scenario": S},
    )
    assert answer.status_code == 200, answer.text
    assert reef.reader(S).data.counts().get("record", 0) == 1
    upstream.reset()


def assert_proposal_adds_skill_x(proposal, sandbox: str) -> None:
    assert [(c.op, c.kind, c.name) for c in proposal.changes] == [("create", "skill", "x")]
    assert proposal.changes[0].content == SKILL
    assert proposal.tree.get("rule", "style") is not None  # the rest of the tree is kept
    assert proposal.tree.get("skill", "x").content == SKILL
    assert proposal.design == DESIGN
    assert proposal.self_review == {"verdict": "delivers", "missing": ""}
    assert (proposal.revisions, proposal.retries) == (0, 0)
    assert f"sandbox {sandbox}" in proposal.notes[0]
    assert "it passed on the final tree" in proposal.notes[1]


def assert_tried_through_reef(upstream: ScriptedUpstream) -> None:
    asked = upstream.requests
    first = asked[0].body
    assert first is not None
    tools = {t["function"]["name"]: t["function"] for t in first["tools"]}
    assert {"read", "bash", "edit", "write", "try_harness"} <= set(tools)
    assert set(tools["write"]["parameters"]["properties"]) >= {"path", "content"}
    content = first["messages"][-1]["content"]
    prompt = content if isinstance(content, str) else "".join(part["text"] for part in content)
    assert json.dumps(ASK) in prompt  # the ask as data, quoted as a JSON string
    assert "rules/style.md" in prompt and "skill (skills/<name>/SKILL.md)" in prompt
    # try_harness started the real pi on the workspace's tree: the health request lists skill x
    health = asked[2].body
    assert health is not None and "try_harness" not in json.dumps(health["tools"])
    assert "<name>x</name>" in json.dumps(health["messages"][0])
    found = tool_result(asked[3], "call_try")
    assert "skill x" in found and "health: passed" in found and "READY" in found


# ------------------------------------------------------------------------------ availability


def test_availability_names_what_is_missing():
    pi = require_pi()
    assert agent_available(None, pi=pi) == (False, "REEF_PROPOSER_SANDBOX is unset")
    assert agent_available("", pi=pi) == (False, "REEF_PROPOSER_SANDBOX is unset")
    ok, why = agent_available("docker", pi=pi)
    assert not ok and "'docker'" in why and "bwrap, none" in why
    assert agent_available("none", pi=None) == (False, "pi 0.73.1 or newer not found")
    assert agent_available("none", pi=pi) == (True, "")


def test_a_host_without_bwrap_or_namespaces_says_why(tmp_path, monkeypatch):
    pi = require_pi()
    monkeypatch.setenv("PATH", str(tmp_path))
    assert agent_available("bwrap", pi=pi) == (
        False,
        "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)",
    )
    # a bwrap that fails the way it does in a container that forbids user namespaces
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    ok, why = agent_available("bwrap", pi=pi)
    assert not ok
    assert why.startswith(
        "bwrap cannot create namespaces here: bwrap: No permissions to create new namespace: "
        "enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1;"
    )


# ------------------------------------------------------------------------------ bwrap


def test_in_bwrap_the_agent_edits_only_its_workspace_and_reaches_only_the_daemon(
    reefine, upstream: ScriptedUpstream, tmp_path: Path
):
    ok, why = agent_available("bwrap", pi=require_pi())
    if not ok:
        if not must_isolate():
            # this host cannot isolate: the recipe falls back to the text proposer with this reason
            assert why.startswith(("bwrap is not installed", "bwrap cannot create namespaces here: "))
            return
        pytest.fail(f"bwrap is installed but cannot isolate the agent: {why}", pytrace=False)

    reef = reefine()
    record_one_exchange(reef, upstream)
    escaped = tmp_path / "escaped.txt"
    home_file = Path.home() / f".reef-probe-{uuid.uuid4().hex}"
    with ScriptedUpstream() as other:
        probe = PROBE.format(
            port=reef.url.rsplit(":", 1)[1],
            other_port=other.url.rsplit(":", 1)[1],
            escaped=escaped,
            home_file=home_file,
        )
        upstream.script(
            *write_and_try(ToolCall("bash", {"command": probe}, call_id="call_probe")),
            Text("answer to the probe"),
            Text(DESIGN),
        )
        try:
            proposal = proposer(reef, "bwrap", tmp_path).propose(BASE, ASK)
        finally:
            home_file.unlink(missing_ok=True)
        assert other.requests == []

    assert_proposal_adds_skill_x(proposal, "bwrap")
    assert_tried_through_reef(upstream)
    probed = tool_result(upstream.requests[5], "call_probe")
    assert "OTHER_PORT_REFUSED" in probed and "OTHER_PORT_REACHED" not in probed
    assert "PRIVATE_TMP_WRITTEN" in probed and not escaped.exists()  # /tmp inside is its own
    assert "Read-only file system" in probed and "HOME_WRITE_REFUSED" in probed
    assert "reef route: HTTP/1.1 403" in probed  # the bridge passes inference routes only
    assert "no credential: HTTP/1.1 401" in probed  # and only with the credential it gave
    assert "inference: HTTP/1.1 200" in probed
    assert len(upstream.requests) == 6
    # neither the agent's exchanges, nor the health check's, nor the probe's own (which asked to
    # be captured, in another scenario) were recorded: the bridge sets the scenario and capture
    assert reef.reader(S).data.counts().get("record", 0) == 1
    assert not (reef.state_dir / "scenarios" / "elsewhere.git").exists()


def require_bwrap() -> None:
    """Fail when bwrap cannot isolate on a host that must (:func:`tests.conftest.must_isolate`);
    elsewhere a host that cannot isolate skips the bwrap tests that need it, after the test above
    has asserted the reason the recipe falls back with."""
    ok, why = agent_available("bwrap", pi=require_pi())
    if ok:
        return
    if must_isolate():
        pytest.fail(f"bwrap cannot isolate the agent here: {why}", pytrace=False)
    pytest.skip(f"this host cannot isolate: {why}")


def processes_under(path: Path) -> list[str]:
    """Processes whose command line names ``path`` or whose cwd lies under it."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if str(path) in cmdline or cwd.startswith(str(path)):
            found.append(f"{proc.name}: {cmdline[:120]}")
    return found


def test_a_hung_agent_in_bwrap_is_killed_at_the_timeout_and_leaves_nothing_behind(
    reefine, upstream: ScriptedUpstream, tmp_path: Path
):
    require_bwrap()
    reef = reefine()
    upstream.script(Hang())
    workdir = tmp_path / "work"
    workdir.mkdir()
    with pytest.raises(StepSkipped, match=r"the agent did not finish within 4s and was killed"):
        proposer(reef, "bwrap", workdir, timeout=4).propose(BASE, ASK)
    deadline = time.monotonic() + 3  # a killed sandbox's processes take a moment to be reaped
    while processes_under(workdir) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_under(workdir) == []
    assert list(workdir.iterdir()) == []
    upstream.stop()  # lets go of the daemon's hung upstream call, so the daemon stops at once


# ------------------------------------------------------------------------------ none


def test_try_harness_reports_problems_and_an_ill_formed_tree_is_not_proposed(reefine, upstream, tmp_path):
    reef = reefine()
    no_description = "---\nname: x\n---\nDo it.\n"
    upstream.script(
        ToolCall("write", {"path": "skills/x/SKILL.md", "content": no_description}, call_id="call_write"),
        ToolCall("try_harness", {}, call_id="call_try"),
        Text("Added skill x."),
    )
    with pytest.raises(
        StepSkipped, match=r"ill-formed: skills/x/SKILL\.md: frontmatter needs a non-empty desc"
    ):
        proposer(reef, "none", tmp_path).propose(BASE, ASK)
    found = tool_result(upstream.requests[2], "call_try")
    assert "problems (fix these; the health check did not run)" in found
    assert "skills/x/SKILL.md: frontmatter needs a non-empty description" in found
    assert len(upstream.requests) == 3  # no health run: the tree could not be released anyway


def test_without_a_sandbox_the_same_agent_runs_against_the_daemon(reefine, upstream, tmp_path):
    reef = reefine()
    record_one_exchange(reef, upstream)
    upstream.script(*write_and_try(Text(DESIGN)))
    proposal = proposer(reef, "none", tmp_path).propose(BASE, ASK)
    assert_proposal_adds_skill_x(proposal, "none")
    assert_tried_through_reef(upstream)
    assert len(upstream.requests) == 4
    assert reef.reader(S).data.counts().get("record", 0) == 1
    assert list(tmp_path.iterdir()) == [tmp_path / "reef0"]  # the workspace is gone


def test_an_agent_that_changes_nothing_skips_the_step(reefine, upstream, tmp_path):
    reef = reefine()
    upstream.script(Text("Nothing needs to change."))
    with pytest.raises(StepSkipped, match="the agent changed nothing"):
        proposer(reef, "none", tmp_path).propose(BASE, ASK)


def test_an_agent_that_touches_a_reserved_entry_skips_the_step(reefine, upstream, tmp_path):
    reef = reefine()
    upstream.script(
        ToolCall("write", {"path": "rules/reef-own.md", "content": "Obey.\n"}, call_id="call_w"),
        Text("Added a rule."),
    )
    with pytest.raises(StepSkipped, match="'reef-own' is reserved for reef"):
        proposer(reef, "none", tmp_path).propose(BASE, ASK)


@pytest.mark.parametrize("sandbox", ["none", "bwrap"])
def test_reefine_with_a_sandbox_set_proposes_through_the_agent(reefine, upstream, sandbox):
    """REEF_PROPOSER_SANDBOX reaches the recipe: the agent writes the skill, then the usual
    checks run (health, reviewer) and the release is published, its step naming the proposer."""
    if sandbox == "bwrap" and agent_available("bwrap", pi=require_pi())[0] is False:
        require_bwrap()
    reef = reefine(env={"REEF_PROPOSER_SANDBOX": sandbox})
    upstream.script(*write_and_try(Text(DESIGN)), HEALTHY, APPROVE)
    result = evolve(reef, S, ASK)["result"]
    assert result["verdict"] == "selected" and result["release"] == "v1", result
    candidate = reef.reader(S).releases.candidate(result["step"])
    assert candidate.record["proposer"] == f"agent ({sandbox})"
    assert candidate.record["design"] == DESIGN
    assert "skills/x/SKILL.md" in reef.reader(S).releases.files(reef.reader(S).releases.tip())


def test_an_unknown_sandbox_is_refused_when_the_daemon_starts(tmp_path, upstream):
    from reef_core.config import load_settings
    from reef_core.errors import ConfigError

    with pytest.raises(ConfigError, match="proposer-sandbox"):
        load_settings(env={"REEF_PROPOSER_SANDBOX": "docker"}, cwd=tmp_path)
