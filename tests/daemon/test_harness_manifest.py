"""``GET /reef/harness`` and ``/reef/harness/versions``: one shape for reef's consumers and the
original Reef's client."""

from __future__ import annotations

import hashlib

import httpx

from tests.cli.support import publish

S = "s"
H = {"x-reef-scenario": S}


def _get(reef, path: str, **params: str) -> httpx.Response:
    return httpx.get(f"{reef.url}{path}", params=params, headers=H, timeout=10)


def test_the_manifest_maps_each_text_file_to_its_text_and_lists_every_file(make_reef):
    reef = make_reef()
    httpx.post(f"{reef.url}/reef/scenarios", json={"name": S}, timeout=10)
    files = {"rules/a.md": "caf\u00e9\n".encode(), "config/settings.json": b'{"theme": "dark"}\n'}
    v1 = publish(reef.state_dir, S, files)
    publish(reef.state_dir, S, {"rules/a.md": b"two\n"})
    answer = _get(reef, "/reef/harness", version="v1")
    assert answer.status_code == 200 and answer.headers["x-reef-artifact-version"] == "v1"
    body = answer.json()
    assert body["files"] == {"rules/a.md": "caf\u00e9\n", "config/settings.json": '{"theme": "dark"}\n'}
    assert body["binary"] == []
    assert body["entries"] == [
        {"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for p, d in sorted(files.items())
    ]
    assert (body["release"], body["artifact_version"], body["release_id"]) == ("v1", "v1", "v1")
    assert body["commit"] == v1.commit and body["content_id"] == v1.tree
    assert body["parent_artifact_version"] is None
    for alias in ("release", "release_id"):
        assert _get(reef, "/reef/harness", **{alias: "v1"}).json() == body
    served = _get(reef, "/reef/harness").json()
    assert served["release"] == "v2" and served["parent_artifact_version"] == "v1"


def test_two_different_release_names_or_a_missing_release_are_refused(make_reef):
    reef = make_reef()
    httpx.post(f"{reef.url}/reef/scenarios", json={"name": S}, timeout=10)
    none_yet = _get(reef, "/reef/harness")
    assert none_yet.status_code == 404 and "no release yet" in none_yet.text
    assert _get(reef, "/reef/harness/versions").json() == {"scenario": S, "versions": []}
    publish(reef.state_dir, S, {"rules/a.md": b"a"})
    clash = _get(reef, "/reef/harness", release="v1", version="v2")
    assert clash.status_code == 400 and "disagree" in clash.text
    assert _get(reef, "/reef/harness", version="v7").status_code == 404
    unknown = httpx.get(f"{reef.url}/reef/harness/versions", headers={"x-reef-scenario": "nope"}, timeout=10)
    assert unknown.status_code == 404


def test_versions_and_releases_are_the_same_rows_oldest_first(make_reef):
    reef = make_reef()
    httpx.post(f"{reef.url}/reef/scenarios", json={"name": S}, timeout=10)
    for n in range(3):
        publish(reef.state_dir, S, {"rules/a.md": str(n).encode()})
    versions = _get(reef, "/reef/harness/versions").json()["versions"]
    releases = _get(reef, "/reef/harness/releases").json()["releases"]
    assert versions == releases
    assert [v["release"] for v in versions] == ["v1", "v2", "v3"]
    assert [v["current"] for v in versions] == [False, False, True]
