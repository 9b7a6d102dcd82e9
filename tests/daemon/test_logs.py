"""``reef serve --log-format json``: every line of a real daemon's log is one JSON object, and the
lines of a request carry its id, its scenario and its receipt."""

from __future__ import annotations

import json
import signal

import httpx

from tests.daemon.test_process import CHAT, start
from tests.fakes.upstream import ScriptedUpstream

TOKEN = "log-test-token-0123456789"
AUTH = {"authorization": f"Bearer {TOKEN}"}


def test_every_line_is_json_and_a_request_s_lines_carry_its_id_scenario_and_receipt(
    tmp_path, upstream: ScriptedUpstream
):
    proc, url = start(tmp_path, upstream.url, "--log-format", "json", env={"REEF_TOKEN": TOKEN})
    try:
        plain = httpx.post(
            f"{url}/v1/chat/completions",
            json=CHAT,
            headers={**AUTH, "x-reef-scenario": "p", "x-request-id": "req-42"},
            timeout=10,
        )
        assert plain.status_code == 200 and plain.headers["x-request-id"] == "req-42"
        receipt = plain.headers["x-reef-agent-record-id"]
        with httpx.stream(
            "POST", f"{url}/s/q/v1/chat/completions", json={**CHAT, "stream": True}, headers=AUTH, timeout=10
        ) as streamed:
            made = streamed.headers["x-request-id"]  # none was given: reef made one
            events = [line for line in streamed.iter_lines() if line.startswith("data: {")]
        streamed_receipt = json.loads(events[-1][6:])["reef"]["agent_record_id"]
        refused = httpx.get(f"{url}/reef/scenarios", timeout=10)  # no token
        assert refused.status_code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]  # each one parses
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    assert any("serving on" in line["message"] for line in lines)
    requests = [line for line in lines if line["logger"] == "reef.request"]
    [first] = [line for line in requests if line.get("request_id") == "req-42"]
    assert (first["scenario"], first["receipt"], first["status"], first["path"]) == (
        "p",
        receipt,
        200,
        "/v1/chat/completions",
    )
    [second] = [line for line in requests if line.get("request_id") == made]
    assert (second["scenario"], second["receipt"]) == ("q", streamed_receipt)
    assert any(line["status"] == 401 and line["path"] == "/reef/scenarios" for line in requests)
    assert TOKEN not in err  # a token never reaches the log
