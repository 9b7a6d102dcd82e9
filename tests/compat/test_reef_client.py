"""The original Reef's own client, ``reef-client`` 0.3.1 from PyPI, against reef unchanged.

Its functions are called as its users call them; what they return, write and check is theirs.
"""

from __future__ import annotations

import json
from pathlib import Path

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
