"""``reef status`` and ``reef scenario …`` through a daemon, and from the repositories without one."""

from __future__ import annotations

import json
from pathlib import Path

from reef_core.store import Store
from tests.cli.support import chat, publish, reef


def test_status_from_a_running_daemon(make_reef, upstream):
    daemon = make_reef()
    chat(daemon)
    publish(daemon.state_dir, "s", {"rules/a.md": b"a"})
    result = reef("status", "--url", daemon.url)
    assert result.exit_code == 0, result.output
    first, state, header, row = result.stdout.splitlines()[:4]
    assert first.startswith("reef ") and f"running at {daemon.url}" in first and "recipe: basic" in first
    assert upstream.url in first
    assert state == f"state: {daemon.state_dir}"
    assert header.split() == ["scenario", "records", "reports", "asks", "release", "pending", "learning"]
    assert row.split() == ["s", "1", "0", "0", "v1", "-", "-"]
    body = json.loads(reef("status", "--url", daemon.url, "--json").stdout)
    assert body["daemon"] == {"url": daemon.url, "running": True}
    assert body["recipe"] == "basic" and body["scenarios"][0]["counts"]["record"] == 1


def test_status_without_a_daemon_reads_the_repositories(make_reef, no_daemon_by_default):
    daemon = make_reef()
    chat(daemon)
    state = ["--state-dir", str(daemon.state_dir)]
    result = reef("status", *state)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"no reef daemon at {no_daemon_by_default}: read from the repositories")
    body = json.loads(reef("status", *state, "--json").stdout)
    assert body["daemon"] == {"url": no_daemon_by_default, "running": False}
    assert body["recipe"] is None and body["state_dir"] == str(daemon.state_dir)
    assert [(r["name"], r["counts"]["record"]) for r in body["scenarios"]] == [("s", 1)]
    live = json.loads(reef("status", "--url", daemon.url, "--json").stdout)
    assert [{k: r[k] for k in ("name", "counts", "release", "pending")} for r in live["scenarios"]] == [
        {k: r[k] for k in ("name", "counts", "release", "pending")} for r in body["scenarios"]
    ]


def test_status_of_an_empty_state_directory(tmp_path: Path):
    result = reef("status", "--state-dir", str(tmp_path))
    assert result.exit_code == 0 and "no scenarios yet" in result.stdout


def test_scenarios_through_the_daemon(make_reef):
    daemon = make_reef()
    url = ["--url", daemon.url]
    created = reef("scenario", "create", "alpha", *url, "--json")
    assert created.exit_code == 0 and json.loads(created.stdout) == {"name": "alpha", "created": True}
    assert reef("scenario", "create", "alpha", *url).stdout.startswith("exists: alpha")
    chat(daemon, "alpha")
    listed = json.loads(reef("scenario", "list", *url, "--json").stdout)
    assert [(r["name"], r["counts"]["record"]) for r in listed] == [("alpha", 1)]
    shown = reef("scenario", "show", "alpha", *url)
    assert "1 records" in shown.stdout and str(daemon.state_dir / "scenarios" / "alpha.git") in shown.stdout
    # the daemon holds alpha open: archiving it directly would be a conflict, through the daemon it works
    direct = reef("scenario", "archive", "alpha", "--state-dir", str(daemon.state_dir))
    assert direct.exit_code == 3 and "already open for writing" in direct.stderr
    archived = reef("scenario", "archive", "alpha", *url)
    assert archived.exit_code == 0, archived.output
    assert not Store(daemon.state_dir).exists("alpha")
    assert reef("scenario", "list", *url, "--json").stdout.strip() == "[]"
    gone = reef("scenario", "show", "alpha", *url)
    assert gone.exit_code == 1 and "no scenario 'alpha'" in gone.stderr


def test_scenario_list_from_the_repositories_matches_the_daemon(make_reef):
    daemon = make_reef()
    chat(daemon, "b")
    chat(daemon, "a")
    live = json.loads(reef("scenario", "list", "--url", daemon.url, "--json").stdout)
    offline = json.loads(reef("scenario", "list", "--state-dir", str(daemon.state_dir), "--json").stdout)
    assert [r["name"] for r in live] == ["a", "b"]
    assert [{k: r[k] for k in ("name", "counts", "release", "pending", "path")} for r in live] == [
        {k: r[k] for k in ("name", "counts", "release", "pending", "path")} for r in offline
    ]
