"""A daemon whose state directory fills up: 507s a user can act on, one log line, a status
that says so, nothing acknowledged lost, and recording that resumes by itself."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import httpx
from typer.testing import CliRunner

from reef_cli.main import app as cli
from tests.conftest import git
from tests.daemon.conftest import RunningReef
from tests.fakes.upstream import Text

H = {"x-reef-scenario": "s"}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def chat(reef: RunningReef, path: str = "/v1/chat/completions") -> httpx.Response:
    body = {**CHAT, "max_tokens": 5} if path == "/v1/messages" else CHAT
    return httpx.post(f"{reef.url}{path}", json=body, headers=H, timeout=10)


def test_a_full_disk_is_a_507_naming_the_state_directory_and_recording_resumes(small_disk, upstream, caplog):
    upstream.script(*[Text("ok")] * 400)
    reef = RunningReef(
        small_disk.path, "--recipe", "reefine", "--inference.upstream-url", upstream.url
    ).start()
    try:
        acknowledged = [chat(reef).headers["x-reef-agent-record-id"] for _ in range(5)]
        state_dir = str(reef.state_dir)
        small_disk.fill()

        with caplog.at_level(logging.INFO):
            with ThreadPoolExecutor(8) as pool:  # eight clients, as in the report
                answers = list(pool.map(lambda _: chat(reef), range(40)))
            anthropic = chat(reef, "/v1/messages")
            report = httpx.post(
                f"{reef.url}/reef/report",
                json={"score": 1, "references": [acknowledged[0]]},
                headers=H,
                timeout=10,
            )
            ask = httpx.post(f"{reef.url}/reef/train", json={"text": "be brief"}, headers=H, timeout=10)
            # a stream has gone out by the time its record is written: it ends in an error event
            streamed = httpx.post(
                f"{reef.url}/v1/chat/completions", json={**CHAT, "stream": True}, headers=H, timeout=10
            ).text
        assert '"ok"' in streamed and "no space left" in streamed and "[DONE]" not in streamed
        assert "agent_record_id" not in streamed

        for response in [*answers, report, ask]:
            assert response.status_code == 507, response.text
            error = response.json()["error"]  # the OpenAI envelope
            assert state_dir in error["message"] and "free" in error["message"]
            assert error["code"] == "disk_full"
            assert "x-reef-agent-record-id" not in response.headers
        assert anthropic.status_code == 507 and anthropic.json()["type"] == "error"  # Anthropic's
        assert state_dir in anthropic.json()["error"]["message"]
        # one line for the 44 refusals, none per request
        full_lines = [r for r in caplog.records if "no space left" in r.getMessage()]
        assert len(full_lines) == 1
        assert not [r for r in caplog.records if "internal error" in r.getMessage() or r.exc_info]

        health = httpx.get(f"{reef.url}/healthz", timeout=10)
        assert health.status_code == 200 and health.json()["status"] == "degraded"
        assert state_dir in health.json()["reason"]
        status = httpx.get(f"{reef.url}/reef/status", timeout=10).json()
        assert status["disk_full"]["state_dir"] == state_dir and status["disk_full"]["failed_writes"] == 44
        shown = CliRunner().invoke(cli, ["status", "--url", reef.url])
        assert shown.exit_code == 0, shown.output
        assert "disk full" in shown.output and "507" in shown.output

        small_disk.make_room()
        resumed = chat(reef)
        assert resumed.status_code == 200
        acknowledged.append(resumed.headers["x-reef-agent-record-id"])
        assert httpx.get(f"{reef.url}/healthz", timeout=10).json()["status"] == "ok"
        assert httpx.get(f"{reef.url}/reef/status", timeout=10).json()["disk_full"] is None
        assert "disk full" not in CliRunner().invoke(cli, ["status", "--url", reef.url]).output
    finally:
        reef.stop()
    repo = reef.repo("s")
    git("--git-dir", repo, "fsck", "--strict", "--no-progress")
    stored = [item.id for item in reef.reader("s").data.iter_items()]
    assert stored == acknowledged  # every acknowledged record, and nothing refused
