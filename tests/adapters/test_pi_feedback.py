"""``/good``, ``/bad`` and ``/feedback`` in the real pi, started by ``reef-pi``, against a real daemon.

pi's print mode takes several messages and runs them in order in one session (one process, so
one ``REEF_RUN_TAG``): ``reef-pi -p hi "/good" …`` is a session that reached the model, then the
commands, each awaited before the next.  What the extension says goes to stderr in print mode.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.adapters.conftest import SCENARIO, Machine, both_pis, run_records
from tests.fakes.upstream import ScriptedUpstream

pytestmark = pytest.mark.e2e

GREETING = "Hello from the scripted upstream."
FEEDBACK = "please always run the tests first"
KEY = "sk-" + "A1b2C3d4E5" * 4  # the shape of an OpenAI key
NO_TAG = "reef: this pi has no run tag (REEF_RUN_TAG) to find its receipts by: start it with reef-pi"


def reports(reef) -> list[dict[str, Any]]:
    response = httpx.get(f"{reef.url}/reef/scenarios/{SCENARIO}/items", params={"kind": "report"})
    assert response.status_code == 200, response.text
    return response.json()["items"]


def said(run: subprocess.CompletedProcess) -> list[str]:
    """The extension's lines, in order."""
    return [line for line in run.stderr.splitlines() if line.startswith("reef: ")]


@both_pis
def test_good_bad_and_feedback_report_on_this_sessions_receipts_only(
    make_reef, upstream: ScriptedUpstream, machine: Machine
):
    reef = make_reef()
    machine.install(reef)
    earlier = machine.reef_pi("-p", "hi")  # another run's receipt, which no report may name
    assert earlier.returncode == 0, earlier.stderr
    earlier_tag = json.loads((machine.base / "last-run.json").read_text())["tag"]

    asked = len(upstream.requests)
    run = machine.reef_pi(
        "-p", "/good",  # before anything reached the model: nothing to report on
        "hi", "and again",
        "/good", "/bad", f"/feedback {FEEDBACK}",
        f"/feedback the key was {KEY}",  # refused by the daemon's screen
        "/feedback   ",  # no text: a usage line
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == GREETING
    assert len(upstream.requests) == asked + 2  # the two turns; the commands call no model
    tag = json.loads((machine.base / "last-run.json").read_text())["tag"]
    receipts = [r["id"] for r in run_records(reef, tag)]
    assert len(receipts) == 2 and tag != earlier_tag
    assert not set(receipts) & {r["id"] for r in run_records(reef, earlier_tag)}

    made = reports(reef)
    assert [(r["score"], r["feedback"], r["metadata"]["command"]) for r in made] == [
        (1, None, "good"),
        (0, None, "bad"),
        (None, FEEDBACK, "feedback"),
    ]
    for report in made:
        assert report["references"] == receipts
        assert report["metadata"] == {
            "harness": "pi", "session": tag, "source": "user", "command": report["metadata"]["command"]
        }  # fmt: skip

    lines = said(run)
    assert lines == [
        "reef: nothing to report on yet: this session has not reached the model through reef",
        f"reef: /good noted as {made[0]['id']} on 2 receipts of this session",
        f"reef: /bad noted as {made[1]['id']} on 2 receipts of this session",
        f"reef: feedback noted as {made[2]['id']} on 2 receipts of this session",
        "reef: the feedback was refused by the screen (credential:openai-key); nothing was stored. "
        "Rephrase it without credentials, instruction overrides or chat-template tokens",
        "reef: usage: /feedback <what was good or bad in this session>",
    ]
    assert KEY not in run.stderr

    # reef-pi report names the same session in its metadata, and keeps the run
    reported = machine.reef_pi("report", "--score", "0.5")
    assert reported.returncode == 0, reported.stderr
    [*_, last] = reports(reef)
    assert last["metadata"] == {"harness": "pi", "run": tag, "session": tag}
    assert last["references"] == receipts


def test_without_a_run_tag_the_commands_say_to_start_pi_with_reef_pi(make_reef, machine: Machine):
    reef = make_reef()
    machine.install(reef)
    # as `reef install` says once the script ran (fetching it creates nothing): the scenario
    # exists, so "no report" below is a count, not a 404
    noted = httpx.post(
        f"{reef.url}/reef/harness/installed", params={"scenario": SCENARIO}, json={"adapter": "pi"}
    )
    assert noted.status_code == 200, noted.text
    pi = machine.env["REEF_PI"]
    env = {
        **machine.env,
        "PATH": f"{Path(pi).parent}:{machine.env['PATH']}",  # the node a newer pi needs sits next to it
        "PI_CODING_AGENT_DIR": str(machine.agent),
        "PI_OFFLINE": "1",
        "REEF_URL": reef.url,
        "REEF_SCENARIO": SCENARIO,
    }
    run = subprocess.run(
        [pi, "-p", "/good", "/feedback fine"],
        env=env,
        cwd=machine.work,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert said(run) == [NO_TAG, NO_TAG]
    assert reports(reef) == []  # nothing was written
