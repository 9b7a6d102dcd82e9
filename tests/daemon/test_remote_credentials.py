"""Issue 44 (5): remotes, tidied.

A credential in a remote's URL (a password, a token as the user name, a query-string token) is
refused at ``remote add`` and never echoed; one a person wrote into the scenario's git config by
hand is redacted everywhere reef shows or keeps the URL (API answers, sync reports,
``reef-sync/<remote>.json``, log lines, ``reef remote list``).  Only https, http, ssh, git and
local paths are transports: ``ext::``, ``fd::`` and other ``<helper>::`` forms are refused at
add, quickly, and git itself refuses them for reef even when written by hand.  ``create: true``
over HTTP makes a repository only under the state directory.
"""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from reef_core.store.repo import init_bare
from tests.cli.support import reef as reef_cli
from tests.conftest import git
from tests.fakes.git_http import GitHttpServer

S = "s"
GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
PAT = "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"
GLPAT = "glpat-" + "x1Y2z3W4v5U6t7S8r9Q0"
PASSWORD = "hunter2-very-secret"
QUERY = "q5ecret-access-t0ken-value"
SECRETS = (GHP, PAT, GLPAT, PASSWORD, QUERY)


@pytest.fixture
def node(make_reef):
    daemon = make_reef("--storage.sync-timeout-s", "30")
    assert httpx.post(f"{daemon.url}/reef/scenarios", json={"name": S}, timeout=10).status_code in (200, 201)
    return daemon


def _add(daemon, url: str, **extra: object) -> httpx.Response:
    body = {"name": "origin", "url": url, **extra}
    return httpx.post(f"{daemon.url}/reef/scenarios/{S}/remotes", json=body, timeout=30)


def _remotes(daemon) -> list[dict]:
    (row,) = [
        r for r in httpx.get(f"{daemon.url}/reef/scenarios", timeout=10).json()["scenarios"] if r["name"] == S
    ]
    return row["remotes"]


def _hand_configured(daemon, name: str, url: str) -> None:
    """A remote a person wrote into the scenario repository's git config with plain git."""
    repo = daemon.repo(S)
    git("--git-dir", repo, "config", f"remote.{name}.url", url)
    git("--git-dir", repo, "config", f"remote.{name}.fetch", f"+refs/heads/*:refs/remotes/{name}/heads/*")


def _files_holding(root: Path, secrets: tuple[str, ...], *, but: tuple[Path, ...] = ()) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and path not in but:
            data = path.read_bytes()
            found += [f"{path.relative_to(root)}: {s[:8]}…" for s in secrets if s.encode() in data]
    return found


@pytest.mark.parametrize(
    "url",
    [
        f"https://{GHP}@github.com/o/r.git",
        f"https://{PAT}@github.com/o/r.git",
        f"https://oauth2:{GLPAT}@gitlab.com/o/r.git",
        f"https://alice:{PASSWORD}@forge.example/o/r.git",
        f"https://forge.example/o/r.git?access_token={QUERY}",
        f"https://forge.example/o/r.git?private_token={QUERY}&x=1",
    ],
    ids=["ghp-user", "github-pat", "glpat-password", "password", "access-token", "private-token"],
)
def test_a_url_carrying_a_credential_is_refused_without_echoing_it(node, url):
    refused = _add(node, url)
    assert refused.status_code == 400 and "credential helper" in refused.text
    assert not any(secret in refused.text for secret in SECRETS)
    assert _remotes(node) == []  # nothing was written
    cli = reef_cli("remote", "add", S, "origin", url, "--state-dir", str(node.state_dir), "--url", node.url)
    assert cli.exit_code != 0 and "credential helper" in cli.output
    assert not any(secret in cli.output for secret in SECRETS)
    assert _files_holding(node.state_dir, SECRETS) == []


def test_credentials_written_by_hand_are_redacted_in_answers_reports_files_logs_and_the_cli(
    node, tmp_path, caplog
):
    caplog.set_level(logging.DEBUG)
    init_bare(tmp_path / "git" / "r.git")
    with GitHttpServer(tmp_path / "git", auth=f"alice:{PASSWORD}") as server:
        base = server.url("r.git").removeprefix("http://")
        _hand_configured(node, "pw", f"http://alice:{PASSWORD}@{base}")  # works: git uses it
        _hand_configured(node, "tok", f"http://{GHP}@{base}")  # refused by the server
        _hand_configured(node, "query", f"http://{base}?access_token={QUERY}&token={GLPAT}")
        answer = httpx.post(f"{node.url}/reef/scenarios/{S}/sync", json={}, timeout=60)
        assert answer.status_code == 200, answer.text
        reports = {r["remote"]: r for r in answer.json()["remotes"]}
        assert reports["pw"]["outcome"] == "ok" and reports["pw"]["url"] == f"http://alice:***@{base}"
        assert reports["tok"]["outcome"] == "auth" and reports["tok"]["url"] == f"http://***@{base}"
        assert "access_token=***" in reports["query"]["url"]
        listed = reef_cli("remote", "list", S, "--state-dir", str(node.state_dir), "--json")
    shown = [
        answer.text,
        httpx.get(f"{node.url}/reef/scenarios", timeout=10).text,
        listed.output,
        caplog.text,
    ]
    assert "alice:***@" in listed.output
    for text in shown:
        assert not any(secret in text for secret in SECRETS), text
    assert sorted(p.name for p in (Path(node.repo(S)) / "reef-sync").iterdir()) == [
        "pw.json",
        "query.json",
        "tok.json",
    ]
    # git's own config keeps what the person wrote there; no other file under the state dir does
    assert _files_holding(node.state_dir, SECRETS, but=(Path(node.repo(S)) / "config",)) == []


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("ext::sh -c touch% {marker}", "ext::"),
        ("fd::3", "fd::"),
        ("fd::0,1/repo", "fd::"),
        ("file::{marker}", "file::"),
        ("ftp://127.0.0.1/r.git", "ftp://"),
    ],
)
def test_other_transports_are_refused_at_add_quickly(node, tmp_path, url, named):
    marker = tmp_path / "pwned"
    refused = _add(node, url.format(marker=marker))  # a 30 s client timeout: fd::3 once held 120 s
    assert refused.status_code == 400 and named in refused.text, refused.text
    assert _remotes(node) == [] and not marker.exists()


def test_git_refuses_other_transports_written_by_hand(node, tmp_path):
    marker = tmp_path / "pwned"
    _hand_configured(node, "ext", f"ext::sh -c touch% {marker}")
    _hand_configured(node, "fd", "fd::3")
    answer = httpx.post(f"{node.url}/reef/scenarios/{S}/sync", json={}, timeout=60)
    assert answer.status_code == 200, answer.text
    for report in answer.json()["remotes"]:
        assert report["outcome"] != "ok" and "not allowed" in report["error"], report
        assert "gave no answer" not in report["error"]  # refused, not waited out
    assert not marker.exists()


def test_create_makes_a_repository_only_under_the_state_dir(node, tmp_path):
    outside = tmp_path / "elsewhere" / "r.git"
    refused = _add(node, str(outside), create=True)
    assert refused.status_code == 400 and "under the state directory" in refused.text
    assert not outside.exists() and _remotes(node) == []
    as_scenario = node.state_dir / "scenarios" / "other.git"
    refused = _add(node, str(as_scenario), create=True)
    assert refused.status_code == 400 and not as_scenario.exists()
    inside = node.state_dir / "remotes" / "r.git"
    made = _add(node, str(inside), create=True)
    assert made.status_code == 200, made.text
    assert made.json()["sync"]["outcome"] == "ok" and (inside / "HEAD").exists()
    # the CLI makes one where the person says, as the person, then adds it through the daemon
    mine = tmp_path / "mine.git"
    cli = reef_cli(
        "remote",
        "add",
        S,
        "mine",
        str(mine),
        "--create",
        "--trusted",
        "--state-dir",
        str(node.state_dir),
        "--url",
        node.url,
    )
    assert cli.exit_code == 0, cli.output
    assert (mine / "HEAD").exists()
    assert {r["name"]: r["trusted"] for r in _remotes(node)} == {"origin": False, "mine": True}
