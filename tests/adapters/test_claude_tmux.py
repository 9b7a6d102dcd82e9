"""reef-claude in an interactive Claude Code (the real claude 2.1.332), driven through tmux, under strace.

Claude Code runs in a tmux server of the test's own (its socket in ``tmp_path``) with a clean
environment: the installed ``reef-claude`` on PATH, HOME in ``tmp_path``, and the person's own
``ANTHROPIC_API_KEY``, which the launcher must keep from Claude Code.  The whole session runs under
``strace -f``: every address a process of it connects or sends to is in the trace, so "no network
but loopback" is checked, not assumed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from reef_core.harness import Entry, HarnessTree
from tests.adapters.claude_machine import SCENARIO, ClaudeMachine, require_claude
from tests.adapters.test_pi_install import publish
from tests.adapters.test_reef_claude import GREETING, RULE, SKILL, records, reports
from tests.adapters.tmux import Pane, pane_in
from tests.fakes.upstream import ScriptedUpstream

pytestmark = pytest.mark.e2e

STRACE = "/usr/bin/strace"
BLOCKED = "UserPromptSubmit operation blocked by hook:"
# the prompt box: Claude Code's input line between two rules, which no first-run screen shows
PROMPT_BOX = r"─{20,}\s*\n❯[^\n]*\n─{20,}"
# what the first-run screens say (reference/harnesses.md §4.3); none may appear
FIRST_RUN_SCREENS = (
    "Unable to connect to Anthropic services",
    "Choose the text style",
    "Select login method",
    "Accessing workspace",
    "Yes, I trust this folder",
    "Detected a custom API key",
    "Not logged in",
)
_ADDRESS = re.compile(r"\{sa_family=(AF_\w+)([^}]*)\}")
_HOST = re.compile(r'inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)"')
_PORT = re.compile(r"sin6?_port=htons\((\d+)\)")
_LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


@pytest.fixture
def claude_machine(tmp_path: Path) -> ClaudeMachine:
    return ClaudeMachine(tmp_path, require_claude())


@pytest.fixture
def pane(tmp_path: Path) -> Iterator[Pane]:
    yield from pane_in(tmp_path, "claude", STRACE)


def peers(trace: str) -> list[tuple[str, str, int]]:
    """Every address in an strace of connect/sendto/sendmsg: (family, host or socket path, port).

    The trace is written with ``-s 0`` (no data shown), so an address can only be an address;
    a send on a connected socket names none (``NULL``): its connect is in the trace.
    """
    found = []
    for family, rest in _ADDRESS.findall(trace):
        host = _HOST.search(rest)
        port = _PORT.search(rest)
        found.append(
            (
                family,
                (host.group(1) or host.group(2)) if host else rest.strip(", "),
                int(port.group(1)) if port else 0,
            )
        )
    return found


def is_local(peer: tuple[str, str, int]) -> bool:
    family, host, port = peer
    if family == "AF_UNIX":
        return True
    # a resolver on loopback (127.0.0.53 and the like) is still a DNS lookup: port 53 never passes
    return family in ("AF_INET", "AF_INET6") and host in _LOOPBACK and port != 53


def test_an_interactive_claude_session_through_reef_touches_nothing_but_loopback(
    make_reef, upstream: ScriptedUpstream, claude_machine: ClaudeMachine, pane: Pane, tmp_path: Path
):
    reef = make_reef("--recipe.name", "reefine", api="anthropic")  # reefine: /evolve files an ask
    publish(
        reef,
        HarnessTree.of([Entry("rule", "style", RULE + "\n")]),
        HarnessTree.of([Entry("rule", "style", RULE + "\n"), Entry("skill", "bisect", SKILL)]),
    )
    claude_machine.install(reef, release="v1")  # v2 is newer: the session starts with a notice

    trace = tmp_path / "strace.txt"
    env = {
        **claude_machine.env,
        "TERM": "xterm-256color",
        "ANTHROPIC_API_KEY": "sk-ant-the-persons-own-key-0123456789",  # Claude Code would ask about it
    }
    started = pane.tmux(
        "new-session", "-d", "-s", "claude", "-x", "200", "-y", "50", "-c", str(claude_machine.work),
        STRACE, "-f", "-qq", "-s", "0", "-e", "trace=connect,sendto,sendmsg", "-o", str(trace),
        "env", "-i", *(f"{k}={v}" for k, v in env.items()), "reef-claude",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr

    # straight to the prompt box: no onboarding, trust or API-key screen; the update notice shown
    shown = pane.wait_for(PROMPT_BOX)
    assert [screen for screen in FIRST_RUN_SCREENS if screen in shown] == [], shown
    shown = pane.wait_for(r"reef: v2 is available \(installed: v1\)")
    assert "install it with /versions v2 install, or reef-claude update" in shown

    # a prompt reaches the scripted upstream through reef, recorded under this run, with v1's rule
    pane.send("say hello", "Enter")
    pane.wait_for(rf"● {re.escape(GREETING)}")
    [record] = records(reef, f"run:{claude_machine.last_tag()}")
    assert RULE in str(record["request"])
    session = record["tags"]["session"]
    asked = len(upstream.requests)

    # reef's commands are answered by the hook, with no model call
    pane.send("/good", "Enter")
    pane.wait_for(rf"{BLOCKED}\s+reef: /good noted as rep_\w+ on 1 receipt of this session")
    pane.send("/versions", "Enter")
    shown = pane.wait_for(r"v1 +[0-9a-f]{7} +selected +installed")
    assert re.search(r"version +id +result +installed/current +ask", shown)
    assert re.search(r"v2 +[0-9a-f]{7} +selected +current", shown)
    assert len(upstream.requests) == asked
    [report] = reports(reef)
    assert report["references"] == [record["id"]] and report["score"] == 1

    # /evolve files an ask (reefine's proposer then works on it, off the session's record)
    pane.send("/evolve answer every question in one sentence", "Enter")
    shown = pane.wait_for(rf"{BLOCKED}\s+reef: ask ask_\w+ filed for scenario {SCENARIO}\.")
    [ask_id] = re.findall(r"reef: ask (ask_\w+) filed", shown)
    ask = reef.reader(SCENARIO).data.get(ask_id).data
    assert {k: ask[k] for k in ("text", "session", "release_id", "harness")} == {
        "text": "answer every question in one sentence",
        "session": session,
        "release_id": "v1",
        "harness": "claude_code",
    }
    assert len(records(reef, f"session:{session}")) == 1

    # the session ends; then the trace is whole (exit-time flushes included)
    pane.send("/exit", "Enter")
    pane.wait_closed()
    seen = peers(trace.read_text())
    assert ("AF_INET", "127.0.0.1", int(reef.url.rsplit(":", 1)[1])) in seen  # the trace saw reef
    assert [peer for peer in seen if not is_local(peer)] == []
