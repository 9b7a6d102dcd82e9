"""``reef evolve``: an ask through a real daemon running a real (small) recipe, followed to its verdict."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reef_core.errors import NotFound
from reef_core.store import Store
from tests.cli.support import reef, releases_of
from tests.conftest import wait_for

RECIPE = ["--recipe.implementation", "tests.cli.recipes:AskRecipe"]


@pytest.fixture
def daemon(make_reef):
    return make_reef(*RECIPE)


def test_wait_follows_an_ask_to_a_new_release(daemon):
    result = reef("evolve", "s", "prefer short answers", "--wait", "--timeout", "30", "--url", daemon.url)
    assert result.exit_code == 0, result.output
    assert "selected → v1 now serves s" in result.stdout
    assert f"page: {daemon.url}/reef/harness/releases/1/page?scenario=s" in result.stdout
    tip = Store(daemon.state_dir).reader("s").releases.tip()
    assert tip.name == "v1" and tip.operation == "evolve" and tip.ask == "prefer short answers"


def test_wait_json_carries_the_result(daemon):
    result = reef("evolve", "s", "use tabs", "--wait", "--timeout", "30", "--url", daemon.url, "--json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["agent_record_id"].startswith("ask_") and body["state"] == "settled"
    assert body["result"]["verdict"] == "selected" and body["result"]["release"] == "v1"


def test_an_ask_that_changes_code_waits_for_a_person_then_promote_publishes_it(daemon):
    url = ["--url", daemon.url]
    result = reef("evolve", "s", "add a hook that formats files", "--wait", "--timeout", "30", *url)
    assert result.exit_code == 0, result.output
    assert "pending → c1 changes code and waits for a person" in result.stdout
    assert "reef promote s c1" in result.stdout
    assert releases_of(daemon.state_dir, "s") == []
    promoted = reef("promote", "s", "c1", "--yes", *url)
    assert promoted.exit_code == 0, promoted.output
    assert releases_of(daemon.state_dir, "s") == ["v1"]


def test_a_rejected_ask_says_why_and_nothing_is_published(daemon):
    result = reef("evolve", "s", "be rude to me", "--wait", "--timeout", "30", "--url", daemon.url)
    assert result.exit_code == 0, result.output
    assert "rejected: politeness; the current release keeps serving" in result.stdout
    assert releases_of(daemon.state_dir, "s") == []


def test_without_wait_the_ask_is_stored_and_its_id_printed(daemon):
    result = reef("evolve", "s", "reproduce bugs with a failing test first", "--url", daemon.url, "--json")
    assert result.exit_code == 0, result.output
    ask_id = json.loads(result.stdout)["agent_record_id"]
    ask = Store(daemon.state_dir).reader("s").data.get(ask_id)
    assert ask.data["text"] == "reproduce bugs with a failing test first"
    human = reef("evolve", "s", "one more", "--url", daemon.url)
    assert human.exit_code == 0 and human.stdout.startswith("asked s: ask_")


def test_a_wait_that_runs_out_exits_1_and_the_ask_goes_on(daemon):
    result = reef("evolve", "s", "think slowly", "--wait", "--timeout", "0.3", "--url", daemon.url)
    assert result.exit_code == 1
    assert "is still" in result.stderr and "after 0.3s" in result.stderr and "Traceback" not in result.output
    done = reef("evolve", "s", "afterwards", "--wait", "--timeout", "30", "--url", daemon.url)
    assert done.exit_code == 0, done.output
    assert releases_of(daemon.state_dir, "s") == ["v2", "v1"]  # the slow ask settled, then this one


def asks(daemon) -> int:
    try:
        return Store(daemon.state_dir).reader("s").data.counts()["ask"]
    except NotFound:  # not created yet
        return 0


def test_ctrl_c_while_waiting_stops_the_wait_not_the_ask(daemon):
    command = [str(Path(sys.executable).with_name("reef")), "evolve", "s", "think slowly", "--wait"]
    process = subprocess.Popen(
        [*command, "--url", daemon.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        # asked (the ask is stored), and waiting on the slow proposer (1.5 s)
        assert wait_for(lambda: asks(daemon) == 1, timeout=20)
        time.sleep(0.3)
        process.send_signal(signal.SIGINT)
        _, errors = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1 and "stopped waiting" in errors and "Traceback" not in errors
    done = reef("evolve", "s", "afterwards", "--wait", "--timeout", "30", "--url", daemon.url)
    assert done.exit_code == 0, done.output
    assert releases_of(daemon.state_dir, "s") == ["v2", "v1"]  # the ask left behind still settled


def test_the_daemons_screen_refuses_credentials_and_nothing_is_stored(daemon):
    secret = "use the key sk-ant-api03-" + "a" * 40
    result = reef("evolve", "s", secret, "--url", daemon.url)
    assert result.exit_code == 2 and "refused by the screen" in result.stderr
    assert secret not in result.output
    assert not (daemon.state_dir / "scenarios" / "s.git").exists() or (
        Store(daemon.state_dir).reader("s").data.counts()["ask"] == 0
    )


@pytest.mark.parametrize("text", ["", "   ", "x" * 4001])
def test_an_empty_or_oversized_ask_is_a_usage_error_before_anything_is_sent(text):
    result = reef("evolve", "s", text)  # no daemon at the URL: refused before it is needed
    assert result.exit_code == 2 and "ask" in result.stderr


def test_a_reef_whose_recipe_takes_no_asks_says_so(make_reef):
    result = reef("evolve", "s", "prefer short answers", "--url", make_reef().url)
    assert result.exit_code != 0 and "does not learn from asks" in result.stderr


def test_no_daemon_is_one_line(no_daemon_by_default):
    result = reef("evolve", "s", "prefer short answers", "--wait")
    assert result.exit_code == 1
    assert result.stderr.strip().startswith(f"error: no reef daemon answers at {no_daemon_by_default}")
    assert "Traceback" not in result.output
