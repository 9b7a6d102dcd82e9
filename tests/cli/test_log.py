"""``reef log``: from the daemon or the repository, filtered, and followed as items arrive."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.cli.support import chat, reef


@pytest.fixture
def busy(make_reef):
    """A daemon with two records, a report on the first and an ask."""
    daemon = make_reef("--recipe.implementation", "tests.cli.recipes:AskRecipe")
    first, second = chat(daemon, text="what is [bold]reef[/bold]?"), chat(daemon)
    httpx.post(
        f"{daemon.url}/reef/report",
        headers={"x-reef-scenario": "s"},
        json={"score": 1, "feedback": "spot on", "references": [first]},
        timeout=10,
    ).raise_for_status()
    httpx.post(
        f"{daemon.url}/reef/train", headers={"x-reef-scenario": "s"}, json={"text": "be brief"}, timeout=10
    ).raise_for_status()
    return daemon, first, second


def test_log_shows_every_kind_in_order_from_the_daemon(busy):
    daemon, first, second = busy
    result = reef("log", "s", "--url", daemon.url)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split()[1] for line in lines] == ["record", "record", "report", "ask"]
    assert first in lines[0] and second in lines[1] and "chat.completions model=m 200" in lines[0]
    assert '"what is [bold]reef[/bold]?"' in lines[0]  # the request, never read as markup
    assert f"score=1 refs={first}" in lines[2] and '"spot on"' in lines[2]
    assert lines[3].endswith('"be brief"')
    as_json = reef("log", "s", "--url", daemon.url, "--json", "--kind", "report")
    [report] = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert report["kind"] == "report" and report["references"] == [first]


def test_records_come_over_http_and_match_the_repository(busy):
    daemon, first, second = busy
    over_http = reef("--debug", "log", "s", "--kind", "record", "--json", "--url", daemon.url)
    assert "source: the daemon at" in over_http.stderr and "read from" not in over_http.stderr
    from_repo = reef(
        "--debug", "log", "s", "--kind", "record", "--json", "--state-dir", str(daemon.state_dir)
    )
    assert "source: the repositories in" in from_repo.stderr
    assert over_http.stdout == from_repo.stdout
    assert [json.loads(line)["id"] for line in from_repo.stdout.splitlines()] == [first, second]


def test_after_and_limit(busy):
    daemon, first, second = busy
    after = reef("log", "s", "--after", first, "--json", "--url", daemon.url)
    assert [json.loads(line)["id"] for line in after.stdout.splitlines()][:1] == [second]
    limited = reef("log", "s", "-n", "1", "--json", "--url", daemon.url)
    assert [json.loads(line)["id"] for line in limited.stdout.splitlines()] == [first]


@pytest.mark.parametrize(
    ("args", "says"), [(["--kind", "nope"], "--kind must be one of"), (["--after", "x"], "not a reef id")]
)
def test_bad_arguments_are_usage_errors(args, says, tmp_path: Path):
    result = reef("log", "s", *args, "--state-dir", str(tmp_path))
    assert result.exit_code == 2 and says in result.stderr


def test_unknown_scenario_is_not_found_from_either_source(make_reef, tmp_path: Path):
    daemon = make_reef()
    assert reef("log", "nope", "--url", daemon.url).exit_code == 1
    missing = reef("log", "nope", "--state-dir", str(tmp_path))
    assert missing.exit_code == 1 and "no scenario 'nope'" in missing.stderr


def test_follow_prints_new_items_until_the_limit(make_reef):
    daemon = make_reef()
    first = chat(daemon)
    later: list[str] = []
    timer = threading.Timer(0.5, lambda: later.append(chat(daemon)))
    timer.start()
    result = reef("log", "s", "--follow", "--interval", "0.1", "-n", "2", "--json", "--url", daemon.url)
    timer.join()
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == [first, *later]


def test_follow_in_a_terminal_ends_quietly_on_ctrl_c(make_reef):
    daemon = make_reef()
    first = chat(daemon)
    reef_bin = Path(sys.executable).with_name("reef")
    process = subprocess.Popen(
        [str(reef_bin), "log", "s", "--follow", "--interval", "0.1", "--json", "--url", daemon.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        assert json.loads(process.stdout.readline())["id"] == first
        second = chat(daemon)
        assert json.loads(process.stdout.readline())["id"] == second
        process.send_signal(signal.SIGINT)
        rest, errors = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0 and rest == "" and "Traceback" not in errors and "Aborted" not in errors
