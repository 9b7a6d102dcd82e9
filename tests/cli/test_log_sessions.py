"""``reef log SCENARIO --sessions``: sessions with their turns and reports, from either source."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.cli.support import publish, reef
from tests.fakes.upstream import Text, ToolCall

SCENARIO = "s"


@dataclass
class Busy:
    daemon: object
    run: list[str]  # the pi run's receipts
    chat: list[str]  # the anthropic session's receipts
    judge: str
    person: str


def report(daemon, body: dict) -> str:
    response = httpx.post(
        f"{daemon.url}/reef/report", headers={"x-reef-scenario": SCENARIO}, json=body, timeout=10
    )
    assert response.status_code == 200, response.text
    return response.json()["agent_record_id"]


@pytest.fixture
def busy(make_reef, upstream) -> Busy:
    """A pi run (tool call, then a second turn on a new release) interleaved with an Anthropic
    chat, and reports."""
    daemon = make_reef()
    httpx.post(f"{daemon.url}/reef/scenarios", json={"name": SCENARIO}, timeout=10).raise_for_status()
    publish(daemon.state_dir, SCENARIO, {"rules/a.md": b"a"})
    pi = openai.OpenAI(
        base_url=f"{daemon.url}/v1",
        api_key="k",
        max_retries=0,
        timeout=20,
        default_headers={"x-reef-scenario": SCENARIO, "x-reef-tag-run": "run-1"},
    )
    claude = anthropic.Anthropic(
        base_url=daemon.url,
        api_key="k",
        max_retries=0,
        timeout=20,
        default_headers={"x-reef-scenario": SCENARIO, "x-reef-tag-session": "chat-2"},
    )
    upstream.script(
        ToolCall("bash", {"cmd": "pytest"}, call_id="call_1"),
        Text("Paris."),
        Text("The test\nfails on line 3."),
        Text("Done."),
    )
    opening = [{"role": "user", "content": "fix the [bold]failing[/bold] test"}]
    raw = pi.chat.completions.with_raw_response.create(model="m", messages=opening)
    call = raw.parse().choices[0].message.tool_calls[0]
    run = [raw.headers["x-reef-agent-record-id"]]
    raw_chat = claude.messages.with_raw_response.create(
        model="m", max_tokens=50, messages=[{"role": "user", "content": "capital of France?"}]
    )
    chat = [raw_chat.headers["x-reef-agent-record-id"]]
    with_result = [
        *opening,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "1 failed"},
    ]
    raw = pi.chat.completions.with_raw_response.create(model="m", messages=with_result)
    run.append(raw.headers["x-reef-agent-record-id"])
    publish(daemon.state_dir, SCENARIO, {"rules/a.md": b"b"})
    second_turn = [
        *with_result,
        {"role": "assistant", "content": "The test fails on line 3."},
        {"role": "user", "content": "then fix line 3"},
    ]
    raw = pi.chat.completions.with_raw_response.create(model="m", messages=second_turn)
    run.append(raw.headers["x-reef-agent-record-id"])
    judge = report(daemon, {"score": 0.25, "references": run[:2], "metadata": {"source": "judge"}})
    person = report(daemon, {"score": 0, "feedback": "it edited the test, not the code", "references": run})
    return Busy(daemon, run, chat, judge, person)


def test_sessions_show_turns_and_scores(busy):
    result = reef("log", SCENARIO, "--sessions", "--url", busy.daemon.url)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = lines[0]
    assert header.startswith("run-1 ") and "2 turns 3 records" in header
    assert header.endswith("score=0 (person) negative v1,v2")
    assert lines[1] == "  1. user: fix the [bold]failing[/bold] test → The test fails on line 3."
    assert lines[2] == "  2. user: then fix line 3 → Done."
    assert lines[3].startswith(f"  report {busy.judge} score=0.25 [judge]")
    assert lines[4] == f'  report {busy.person} score=0 [person] "it edited the test, not the code"'
    assert lines[5].startswith("chat-2 ") and lines[5].endswith("1 turn 1 record score=- (none) v1")
    assert lines[6] == "  1. user: capital of France? → Paris."
    assert len(lines) == 7


def test_json_is_one_session_per_line_as_the_daemon_serves_it(busy):
    result = reef("log", SCENARIO, "--sessions", "--json", "--url", busy.daemon.url)
    assert result.exit_code == 0, result.output
    shown = [json.loads(line) for line in result.stdout.splitlines()]
    served = httpx.get(f"{busy.daemon.url}/reef/scenarios/{SCENARIO}/sessions", timeout=10).json()
    assert shown == served["sessions"]
    assert [(s["session"], s["records"]) for s in shown] == [("run-1", busy.run), ("chat-2", busy.chat)]


@pytest.mark.parametrize("as_json", [False, True])
def test_the_repository_and_the_daemon_agree(busy, as_json):
    flags = ["--json"] if as_json else []
    over_http = reef("--debug", "log", SCENARIO, "--sessions", *flags, "--url", busy.daemon.url)
    assert "source: the daemon at" in over_http.stderr
    from_repo = reef(
        "--debug", "log", SCENARIO, "--sessions", *flags, "--state-dir", str(busy.daemon.state_dir)
    )
    assert "source: the repositories in" in from_repo.stderr
    assert from_repo.exit_code == 0, from_repo.output
    assert from_repo.stdout == over_http.stdout and over_http.stdout


@pytest.mark.parametrize("where", ["url", "state-dir"])
def test_limit_counts_sessions_and_after_cuts_into_one(busy, where):
    source = ["--url", busy.daemon.url] if where == "url" else ["--state-dir", str(busy.daemon.state_dir)]
    limited = reef("log", SCENARIO, "--sessions", "--json", "-n", "1", *source)
    [only] = [json.loads(line) for line in limited.stdout.splitlines()]
    assert only["session"] == "run-1" and only["records"] == busy.run
    after = reef("log", SCENARIO, "--sessions", "--json", "--after", busy.run[0], *source)
    shown = [json.loads(line) for line in after.stdout.splitlines()]
    assert [(s["session"], s["records"], s["continues"]) for s in shown] == [
        ("chat-2", busy.chat, False),
        ("run-1", busy.run[1:], True),
    ]
    text = reef("log", SCENARIO, "--sessions", "--after", busy.run[0], *source)
    assert "(continues)" in text.stdout.splitlines()[2]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--follow"], "cannot be used with --follow"),
        (["--kind", "record"], "cannot be used with --kind"),
        (["--after", "x"], "not a reef id"),
    ],
)
def test_sessions_usage_errors(args, says, tmp_path: Path):
    result = reef("log", SCENARIO, "--sessions", *args, "--state-dir", str(tmp_path))
    assert result.exit_code == 2 and says in result.stderr


def test_unknown_scenario(make_reef, tmp_path: Path):
    daemon = make_reef()
    assert reef("log", "nope", "--sessions", "--url", daemon.url).exit_code == 1
    missing = reef("log", "nope", "--sessions", "--state-dir", str(tmp_path))
    assert missing.exit_code == 1 and "no scenario 'nope'" in missing.stderr
