"""``reef export``: records joined with their reports, as JSONL a trainer can read."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from tests.cli.support import chat, reef
from tests.fakes.upstream import Error, Text


def report(daemon, score: float, feedback: str, *refs: str) -> None:
    httpx.post(
        f"{daemon.url}/reef/report",
        headers={"x-reef-scenario": "s"},
        json={"score": score, "feedback": feedback, "references": list(refs)},
        timeout=10,
    ).raise_for_status()


def streamed(daemon, text: str) -> str:
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": text}]}
    with httpx.stream(
        "POST", f"{daemon.url}/v1/chat/completions", json=body, headers={"x-reef-scenario": "s"}, timeout=10
    ) as response:
        events = [line for line in response.iter_lines() if line.startswith("data: {")]
    return json.loads(events[-1][len("data: ") :])["reef"]["agent_record_id"]


@pytest.fixture
def history(make_reef, upstream):
    """openai, anthropic and streamed exchanges, one failed exchange, and three reports."""
    daemon = make_reef()
    upstream.script(Text("Paris."), Text("Four."), Error(500, "upstream broke"), Text("Blue."))
    first = chat(daemon, text="capital of France?")
    time.sleep(0.01)
    second = chat(daemon, text="2+2?", anthropic=True)
    failed = httpx.post(
        f"{daemon.url}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "fail"}]},
        headers={"x-reef-scenario": "s"},
        timeout=10,
    )
    assert failed.status_code == 502
    third = streamed(daemon, "sky colour?")
    report(daemon, 1, "right", first)
    report(daemon, 0, "terse", first, second)
    return daemon, first, second, third


def lines_of(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_each_answered_record_is_one_line_with_its_reports(history):
    daemon, first, second, third = history
    result = reef("export", "s", "--url", daemon.url)
    assert result.exit_code == 0, result.output
    lines = lines_of(result.stdout)
    assert [line["id"] for line in lines] == [first, second, third]
    openai, anthropic, stream = lines
    assert openai["format"] == "openai" and openai["scenario"] == "s" and openai["model"] == "m"
    assert openai["messages"] == [{"role": "user", "content": "capital of France?"}]
    assert openai["answer"]["role"] == "assistant" and openai["answer"]["content"] == "Paris."
    assert [(r["score"], r["feedback"]) for r in openai["reports"]] == [(1.0, "right"), (0.0, "terse")]
    assert anthropic["format"] == "anthropic"
    assert anthropic["answer"] == {"role": "assistant", "content": [{"type": "text", "text": "Four."}]}
    assert [r["score"] for r in anthropic["reports"]] == [0.0]
    assert stream["answer"]["content"] == "Blue." and stream["reports"] == []
    assert result.stderr.strip() == "exported 3 records with 3 reports (1 without an answer skipped)"


def test_the_repository_gives_the_same_export_without_a_daemon(history):
    daemon = history[0]
    live = reef("export", "s", "--url", daemon.url)
    offline = reef("--debug", "export", "s", "--state-dir", str(daemon.state_dir))
    assert offline.exit_code == 0 and "source: the repositories in" in offline.stderr
    assert offline.stdout == live.stdout


def test_since_an_id_or_a_time(history):
    daemon, first, second, third = history
    url = ["--url", daemon.url]
    after_first = lines_of(reef("export", "s", "--since", first, *url).stdout)
    assert [line["id"] for line in after_first] == [second, third]
    assert [r["score"] for r in after_first[0]["reports"]] == [0.0]  # reports still joined
    at_second = lines_of(reef("export", "s", "--since", after_first[0]["created_at"], *url).stdout)
    assert [line["id"] for line in at_second] == [second, third]  # a time includes its own moment
    assert len(lines_of(reef("export", "s", "--since", "2000-01-01", *url).stdout)) == 3
    assert reef("export", "s", "--since", "2999-01-01T00:00:00+00:00", *url).stdout == ""


@pytest.mark.parametrize("since", ["yesterday", "rec_123", "2025-13-45"])
def test_a_bad_since_is_a_usage_error(since, tmp_path: Path):
    result = reef("export", "s", "--since", since, "--state-dir", str(tmp_path))
    assert result.exit_code == 2 and "--since" in result.stderr


def test_out_writes_a_file_and_json_gives_the_summary(history, tmp_path: Path):
    daemon = history[0]
    folder = tmp_path / "out"
    folder.mkdir()
    target = folder / "train.jsonl"
    result = reef("export", "s", "--out", str(target), "--url", daemon.url, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary == {"scenario": "s", "out": str(target), "records": 3, "reports": 3, "skipped": 1}
    assert target.read_text() == reef("export", "s", "--url", daemon.url).stdout
    assert [p.name for p in folder.iterdir()] == ["train.jsonl"]  # no temporary file left


def test_an_unknown_scenario_writes_no_file(make_reef, tmp_path: Path):
    daemon = make_reef()
    folder = tmp_path / "out"
    folder.mkdir()
    result = reef("export", "nope", "--out", str(folder / "out.jsonl"), "--url", daemon.url)
    assert result.exit_code == 1 and "no scenario 'nope'" in result.stderr
    assert list(folder.iterdir()) == []
