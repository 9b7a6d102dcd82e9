"""The agent proposer sees only what it needs: no ``~/.ssh``, no state dir, no unix socket, no token.

A reefine daemon with ``REEF_PROPOSER_SANDBOX=bwrap`` and a token answers an ask with the agent
proposer; the scripted model drives the agent's bash tool to read a private key in the daemon's
home, the scenario repository in the state dir, a listening unix socket (an ssh-agent's, named by
``SSH_AUTH_SOCK``) and its own environment.  Whatever the tool reads goes back to the model, so
the scripted upstream's requests are what the agent could leak: none of it is there.  The home,
the state dir and the socket live outside ``/tmp``, which any sandbox replaces with its own.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fakes.upstream import ScriptedUpstream, Text, ToolCall
from tests.reefine.conftest import APPROVE, HEALTHY, evolve

pytestmark = pytest.mark.e2e

S = "dev"
TOKEN = "tok-daemon-" + uuid.uuid4().hex
SECRET = "-----BEGIN OPENSSH PRIVATE KEY-----\nsecret-" + uuid.uuid4().hex + "\n"
SKILL = "---\nname: x\ndescription: Use when fixing a bug.\n---\nWrite a failing test first.\n"
DESIGN = "A skill x: write a failing test before fixing a bug."

PROBE = """cat {home}/.ssh/id_ed25519 2>&1
ls {state}/scenarios 2>&1
cat {state}/scenarios/dev.git/HEAD 2>&1
{python} -I -c 'import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
print("SOCKET_CONNECTED")' {socket} 2>&1 | tail -1
ls /run /home 2>&1
echo "SSH_AUTH_SOCK=[$SSH_AUTH_SOCK] KEY=[$REEF_API_KEY]"
"""


class Listener:
    """A listening unix socket that counts the connections it accepts (an ssh-agent's stand-in)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.accepted = 0
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        self._server.listen(8)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._server.close()


@pytest.fixture
def agent_socket(outside_tmp: Path) -> Iterator[Listener]:
    listener = Listener(outside_tmp / "agent.sock")
    yield listener
    listener.close()


def tool_result(upstream: ScriptedUpstream, call_id: str) -> str:
    for request in upstream.requests:
        for message in (request.body or {}).get("messages", []):
            if message.get("role") == "tool" and message.get("tool_call_id") == call_id:
                content = message["content"]
                return content if isinstance(content, str) else json.dumps(content)
    raise AssertionError(f"no tool result {call_id}")


def test_the_agent_proposer_reads_no_key_no_state_no_socket_and_holds_no_token(
    reefine, upstream: ScriptedUpstream, outside_tmp: Path, agent_socket: Listener, monkeypatch, sandbox
):
    home = outside_tmp / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(SECRET)
    # the daemon runs in this process: its home and its ssh-agent are these
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SSH_AUTH_SOCK", str(agent_socket.path))
    state = outside_tmp / "state"
    reef = reefine(
        "--storage.state-dir", str(state), env={"REEF_TOKEN": TOKEN, "REEF_PROPOSER_SANDBOX": "bwrap"}
    )
    reef.state_dir = state  # the flag given last wins
    upstream.script(Text("hello"))
    answer = httpx.post(
        f"{reef.url}/v1/chat/completions",
        json={"model": "scripted-model", "messages": [{"role": "user", "content": "a recorded hello"}]},
        headers={"x-reef-scenario": S, "Authorization": f"Bearer {TOKEN}"},
    )
    assert answer.status_code == 200, answer.text
    assert (state / "scenarios" / "dev.git" / "HEAD").is_file()  # the record is there to be read
    upstream.reset()
    probe = PROBE.format(home=home, state=state, python=sys.executable, socket=agent_socket.path)
    upstream.script(
        ToolCall("bash", {"command": probe}, call_id="call_probe"),
        ToolCall("write", {"path": "skills/x/SKILL.md", "content": SKILL}, call_id="call_write"),
        Text(DESIGN),
        HEALTHY,
        APPROVE,
    )

    result = evolve(reef, S, "write a failing test first", token=TOKEN)["result"]

    probed = tool_result(upstream, "call_probe")
    sent = "\n".join(json.dumps({"headers": r.headers, "body": r.body}) for r in upstream.requests)
    assert "secret-" not in sent, probed  # the private key never reached the model
    assert "dev.git" not in probed.splitlines() and "ref: refs/heads" not in probed, probed  # nor the state
    assert "SOCKET_CONNECTED" not in probed and agent_socket.accepted == 0, probed
    assert TOKEN not in sent, probed  # nor the daemon's token
    assert "KEY=[reef-sandbox-" in probed and "SSH_AUTH_SOCK=[]" in probed, probed
    assert probed.count("No such file or directory") >= 5, probed  # key, state x2, /run, /home
    assert result["verdict"] == "selected", result  # and the agent still did its work
    candidate = reef.reader(S).releases.candidate(result["step"])
    assert candidate.record["proposer"] == "agent (bwrap)"
