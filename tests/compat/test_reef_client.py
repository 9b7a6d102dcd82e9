"""The original Reef's own client, ``reef-client`` 0.3.1 from PyPI, against reef unchanged.

Its functions are called as its users call them; what they return, write and check is theirs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from reef_client import ReefClient as OriginalClient
from reef_client import ReefClientError

from tests.cli.support import candidate, publish

S = "s"
V1 = {
    "reef-release.json": b'{"requires": {}}\n',
    "rules/style.md": "Prefer short functions. \u2014 \u00e9t\u00e9\n".encode(),
    "skills/old/SKILL.md": b"---\nname: old\ndescription: an old skill\n---\nbody\r\nwith CRLF\n",
}
V2 = {
    "reef-release.json": b'{"requires": {}}\n',
    "rules/style.md": b"Prefer very short functions.\n",
    "skills/new/SKILL.md": b"---\nname: new\ndescription: a new skill\n---\nbody\n",
    "commands/hi.md": b"Say hi.\n",
}


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".reef-harness-version"
    }


def _two_releases(reef) -> None:
    chat = {"messages": [{"role": "user", "content": "x"}]}
    OriginalClient(reef.url).inference_with_record(S, "/v1/chat/completions", chat)  # makes the scenario
    publish(reef.state_dir, S, V1)
    made = candidate(reef.state_dir, S, V2, verdict="selected", ask="shorter", metrics={"heldout": 0.75})
    publish(reef.state_dir, S, V2, operation="evolve", ask="shorter", source=f"candidate {made.step}")


def test_inference_with_record_and_report(make_reef):
    reef = make_reef()
    client = OriginalClient(reef.url)
    body, receipt = client.inference_with_record(
        S, "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert receipt.startswith("rec_")
    report = client.report(S, {"score": 1, "feedback": "good"}, references=[receipt])
    stored = reef.reader(S).data.get(report["agent_record_id"])
    assert stored.data["references"] == [receipt] and stored.data["score"] == 1.0


def test_harness_versions_lists_releases_oldest_first_with_the_gate_metrics(make_reef):
    reef = make_reef()
    _two_releases(reef)
    versions = OriginalClient(reef.url).harness_versions(S)
    assert [v["artifact_version"] for v in versions] == ["v1", "v2"]
    assert [v["operation"] for v in versions] == ["creation", "evolve"]
    assert versions[1]["metrics"] == {"heldout": 0.75} and versions[1]["ask"] == "shorter"
    assert versions[1]["parent_artifact_version"] == "v1" and versions[1]["current"] is True


def test_harness_pull_writes_the_served_tree_and_pulling_back_removes_newer_files(make_reef, tmp_path):
    reef = make_reef()
    _two_releases(reef)
    client = OriginalClient(reef.url)
    dest = tmp_path / "harness"
    assert client.harness_pull(S, dest) == "v2"  # no version: the served release
    assert _tree(dest) == V2
    assert client.harness_pull(S, dest, version="v1") == "v1"
    assert _tree(dest) == V1  # v2's files are gone, v1's bytes back (CRLF and non-ASCII kept)
    sidecar = json.loads((dest / ".reef-harness-version").read_text())
    assert sidecar == {"artifact_version": "v1", "files": sorted(V1)}
    assert client.harness_pull(S, dest, version="v2") == "v2"
    assert _tree(dest) == V2


def test_harness_pull_of_an_unknown_version_changes_nothing(make_reef, tmp_path):
    reef = make_reef()
    _two_releases(reef)
    client = OriginalClient(reef.url)
    dest = tmp_path / "harness"
    client.harness_pull(S, dest, version="v1")
    with pytest.raises(ReefClientError) as failed:
        client.harness_pull(S, dest, version="v9")
    assert failed.value.status == 404 and "v9" in failed.value.body
    assert _tree(dest) == V1


class _DroppingProxy:
    """A loopback HTTP proxy in front of reef that forwards every request and, for the
    ``drop``-th, throws the answer away and hangs up: the batch is stored, the client never
    hears so (a lost answer)."""

    def __init__(self, target: str, drop: int) -> None:
        proxy = self
        self.seen = 0
        self.drop = drop

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")
                }
                answer = httpx.post(target + self.path, content=body, headers=headers, timeout=30)
                proxy.seen += 1
                if proxy.seen == proxy.drop:
                    self.close_connection = True
                    return
                self.send_response(answer.status_code)
                self.send_header("Content-Type", answer.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _dataset(path: Path, samples: int) -> list[dict]:
    lines = []
    for n in range(samples):
        messages = [{"role": "user", "content": f"question {n}"}]
        answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": f"answer {n}"}}]}
        lines.append(
            {
                "agent_record_id": f"sample-{n}",
                "request_type": "inference",
                "payload": {"model": "m", "messages": messages, "response": answer},
            }
        )
        if n % 2:
            payload = {"references": [f"sample-{n}"], "score": 1}
            lines.append({"agent_record_id": f"score-{n}", "request_type": "report", "payload": payload})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return lines


def _import(path: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "reef_client", "import", str(path), "--url", url, "--scenario", S]
    return subprocess.run([*command, *extra], capture_output=True, text=True, timeout=120)


def test_the_original_importer_resumes_after_a_lost_answer_and_stores_each_record_once(make_reef, tmp_path):
    reef = make_reef()
    lines = _dataset(tmp_path / "data.jsonl", 10)  # 10 records, 5 reports
    proxy = _DroppingProxy(reef.url, drop=3)
    try:
        first = _import(tmp_path / "data.jsonl", proxy.url, "--batch-size", "2", "--retries", "0")
        assert first.returncode == 1, first.stderr
        assert first.stderr.count("Acknowledged") == 2  # the third batch's answer was lost
        progress = json.loads((tmp_path / "data.jsonl.reef-import.json").read_text())
        assert progress["count"] == 4
        second = _import(tmp_path / "data.jsonl", proxy.url, "--batch-size", "2", "--retries", "0")
        assert second.returncode == 0, second.stderr
        assert "Import complete" in second.stdout + second.stderr
    finally:
        proxy.close()
    data = reef.reader(S).data
    records = {item.data["idempotency_key"]: item for item in data.iter_items(["record"])}
    reports = [item.data for item in data.iter_items(["report"])]
    assert sorted(records) == sorted(
        line["agent_record_id"] for line in lines if line["request_type"] == "inference"
    )
    assert len(reports) == 5  # the batch sent twice was stored once
    for report in reports:
        n = report["idempotency_key"].split("-")[1]
        assert report["references"] == [records[f"sample-{n}"].id]
    assert records["sample-3"].data["request"]["messages"][0]["content"] == "question 3"
