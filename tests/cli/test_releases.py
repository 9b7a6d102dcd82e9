"""``reef releases | rollback | promote | reject`` against a real daemon, and from the repository."""

from __future__ import annotations

import json

import httpx
import pytest

from reef_core.client import DaemonUnavailable, approver
from reef_core.store import Store
from tests.cli.support import candidate, chat, publish, reef, releases_of
from tests.conftest import git


@pytest.fixture
def chain(make_reef):
    """A daemon serving scenario ``s``: v1, v2 (from c1), c2 pending, c3 rejected by the checks."""
    daemon = make_reef()
    chat(daemon)
    state = daemon.state_dir
    publish(state, "s", {"rules/style.md": b"one"})
    c1 = candidate(
        state,
        "s",
        {"rules/style.md": b"two"},
        verdict="selected",
        ask="prefer short answers",
        metrics={"score": 0.75},
    )
    publish(
        state,
        "s",
        {"rules/style.md": b"two"},
        operation="evolve",
        ask="prefer short answers",
        verdict="selected",
        source=f"candidate {c1.step}",
    )
    candidate(
        state,
        "s",
        {"rules/style.md": b"two", "extensions/hook.ts": b"export {}"},
        verdict="selected",
        ask="add a [bold]hook[/bold]",
        pending=True,
    )
    candidate(state, "s", {"rules/style.md": b"rude"}, verdict="rejected: score fell", ask="be rude")
    return daemon


def test_releases_table_marks_current_and_pending(chain):
    result = reef("releases", "s", "--url", chain.url)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    current = next(line for line in lines if " v2 " in f" {line} ")
    assert "●" in current and "evolve" in current and "prefer short answers" in current
    assert "score=0.75" in current
    assert any("c2" in line and "pending" in line for line in lines)
    assert any("c3" in line and "rejected: score fell" in line for line in lines)
    assert not any(line.lstrip().startswith("c1") for line in lines)  # published as v2
    assert "add a [bold]hook[/bold]" in result.stdout  # an ask is shown as written, never as markup
    assert "current: v2" in lines
    assert any("reef promote s c2" in line for line in lines)


def test_releases_json_is_the_daemons_listing_and_the_repository_gives_the_same(chain):
    route = httpx.get(f"{chain.url}/reef/scenarios/s/releases").json()
    from_daemon = reef("releases", "s", "--url", chain.url, "--json")
    assert from_daemon.exit_code == 0 and json.loads(from_daemon.stdout) == route
    # no daemon at the (default, dead) URL: the same listing, read from the repository
    from_repo = reef("--debug", "releases", "s", "--state-dir", str(chain.state_dir), "--json")
    assert from_repo.exit_code == 0, from_repo.output
    assert json.loads(from_repo.stdout) == route
    assert "source: the repositories in" in from_repo.stderr
    assert "source: the daemon at" in reef("--debug", "releases", "s", "--url", chain.url).stderr
    assert "source" not in reef("releases", "s", "--url", chain.url).output  # only with --debug


def test_rollback_publishes_a_new_release_and_a_stale_expected_is_a_conflict(chain):
    state = chain.state_dir
    v1 = Store(state).reader("s").releases.get("v1")
    stale = reef("rollback", "s", "v1", "--expected", v1.commit, "--url", chain.url)
    assert stale.exit_code == 3
    assert stale.stderr.count("\n") == 1 and "moved" in stale.stderr and "Traceback" not in stale.output
    assert releases_of(state, "s") == ["v2", "v1"]  # nothing changed

    done = reef("rollback", "s", "v1", "--url", chain.url)
    assert done.exit_code == 0, done.output
    assert "v3 now serves the content of v1" in done.stdout
    tip = Store(state).reader("s").releases.tip()
    assert tip.name == "v3" and tip.operation == "rollback" and tip.tree == v1.tree

    again = reef("rollback", "s", "v2", "--expected", tip.commit, "--url", chain.url, "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["release"] == "v4"


def test_rollback_bad_arguments(chain):
    bad = reef("rollback", "s", "banana", "--url", chain.url)
    assert bad.exit_code == 2 and "'banana' is not a release" in bad.stderr
    missing = reef("rollback", "s", "v9", "--url", chain.url)
    assert missing.exit_code == 1 and "no release v9" in missing.stderr
    unknown = reef("rollback", "nope", "v1", "--url", chain.url)
    assert unknown.exit_code == 1 and "no scenario 'nope'" in unknown.stderr
    assert reef("rollback", "s").exit_code == 2  # typer: missing argument
    assert releases_of(chain.state_dir, "s") == ["v2", "v1"]


@pytest.mark.parametrize("command", ["rollback s v1", "promote s c2", "reject s c2"])
def test_operations_need_a_daemon_and_say_so_in_one_line(no_daemon_by_default, command):
    result = reef(*command.split())
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        f"error: no reef daemon answers at {no_daemon_by_default} ([Errno 111] Connection refused)"
    )


def test_promote_names_the_code_it_runs_and_asks_first(chain):
    url = ("--url", chain.url)
    said_no = reef("promote", "s", "c2", *url, input="n\n")
    assert said_no.exit_code == 1 and "serves" not in said_no.stdout
    assert "The harness runs this code with your privileges:\n  extensions/hook.ts (new)\n" in said_no.stderr
    assert "rules/style.md" not in said_no.stderr  # a rule runs nothing
    assert "Approve c2 of s? It runs extensions/hook.ts with your privileges. [y/N]:" in said_no.stderr
    assert "add a [bold]hook[/bold]" in said_no.stderr  # the ask, as written
    assert said_no.stderr.rstrip().endswith("error: c2 stays pending; nothing was changed")
    unasked = reef("promote", "s", "c2", *url)  # no terminal, no --yes: nobody to ask
    assert unasked.exit_code == 1 and "c2 stays pending: there was no answer" in unasked.stderr
    assert "--yes" in unasked.stderr
    assert releases_of(chain.state_dir, "s") == ["v2", "v1"]
    assert Store(chain.state_dir).reader("s").releases.pending() == [2]

    result = reef("promote", "s", "c2", *url, input="y\n")
    assert result.exit_code == 0, result.output
    assert "v3 serves it" in result.stdout


def test_promote_publishes_a_pending_candidate_with_its_approver_and_twice_is_a_conflict(chain):
    result = reef("promote", "s", "c2", "--yes", "--url", chain.url)
    assert result.exit_code == 0, result.output
    assert "v3 serves it" in result.stdout and "Approve" not in result.output
    reader = Store(chain.state_dir).reader("s")
    tip = reader.releases.tip()
    assert tip.name == "v3" and tip.source == "candidate 2" and reader.releases.pending() == []
    assert "extensions/hook.ts" in reader.releases.files(tip)
    who = approver("reef promote")
    assert tip.approved_by == who and who.endswith(" via reef promote")
    shown = git("--git-dir", chain.repo("s"), "log", "-1", "release").stdout
    assert f"Reef-Approved-By: {who}" in shown and "Reef-Approved-At: " in shown
    listing = json.loads(reef("releases", "s", "--url", chain.url, "--json").stdout)
    v3 = listing["releases"][0]
    assert (v3["approved_by"], v3["approved_at"]) == (who, tip.approved_at)
    c2 = next(s for s in listing["steps"] if s["name"] == "c2")
    assert (c2["approved_by"], c2["executable"]) == (who, None)  # published: no longer waits
    again = reef("promote", "s", "c2", "--url", chain.url)
    assert again.exit_code == 3 and again.stderr.startswith("error: ")
    assert releases_of(chain.state_dir, "s") == ["v3", "v2", "v1"]


def test_promote_of_a_candidate_that_is_not_pending_is_a_conflict(chain):
    result = reef("promote", "s", "c3", "--url", chain.url, "--json")
    assert result.exit_code == 3 and result.stdout == ""
    assert releases_of(chain.state_dir, "s") == ["v2", "v1"]


def test_reject_turns_a_pending_candidate_down(chain):
    result = reef("reject", "s", "c2", "--url", chain.url, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"step": 2, "name": "c2", "rejected": True}
    reader = Store(chain.state_dir).reader("s")
    assert reader.releases.pending() == [] and reader.releases.rejected() == [2]
    assert releases_of(chain.state_dir, "s") == ["v2", "v1"]
    listed = reef("releases", "s", "--url", chain.url)
    assert any("c2" in line and "rejected by a person" in line for line in listed.stdout.splitlines())


@pytest.mark.parametrize("name", ["x2", "c", "c0", "v2", "-"])
def test_a_candidate_name_that_is_not_one_is_a_usage_error(chain, name):
    for command in ("promote", "reject"):
        result = reef(command, "s", "--url", chain.url, "--", name)
        assert result.exit_code == 2, (command, name, result.output)
    assert Store(chain.state_dir).reader("s").releases.pending() == [2]


def test_debug_lets_the_error_through_with_its_traceback(no_daemon_by_default):
    result = reef("--debug", "rollback", "s", "v1")
    assert result.exit_code != 0 and isinstance(result.exception, DaemonUnavailable)


def test_the_promote_route_names_a_bad_approver_and_records_an_unnamed_one(chain):
    route = f"{chain.url}/reef/scenarios/s/promote"
    for bad in (7, "", "alice\nReef-Release: 9"):
        answer = httpx.post(route, json={"release": "c2", "approved_by": bad})
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["param"] == "approved_by" and "approved_by must" in error["message"]
    assert Store(chain.state_dir).reader("s").releases.pending() == [2]
    done = httpx.post(route, json={"release": "c2"})  # an older client: it names nobody
    assert done.status_code == 200, done.text
    assert Store(chain.state_dir).reader("s").releases.tip().approved_by == "an unnamed client"


def test_releases_shows_each_release_in_use(chain):
    first, second = chat(chain), chat(chain)  # v2 serves them, each a session of its own
    httpx.post(
        f"{chain.url}/reef/report",
        headers={"x-reef-scenario": "s"},
        json={"score": 1, "references": [first], "metadata": {"source": "judge"}},
        timeout=10,
    ).raise_for_status()
    listing = httpx.get(f"{chain.url}/reef/scenarios/s/releases", timeout=10).json()
    v2 = listing["evidence"]["v2"]
    assert next(row for row in listing["releases"] if row["release"] == "v2")["evidence"] == v2
    assert (v2["sessions"], v2["requests"], v2["person"]["count"], v2["judge"]["count"]) == (2, 2, 0, 1)
    records = [
        httpx.get(f"{chain.url}/reef/scenarios/s/records/{r}", timeout=10).json() for r in (first, second)
    ]
    latencies = sorted(r["timings"]["total_ms"] for r in records)
    assert v2["latency_ms"]["p50"] == pytest.approx(sum(latencies) / 2)
    assert v2["latency_ms"]["p95"] == pytest.approx(latencies[0] + 0.95 * (latencies[1] - latencies[0]))
    usage = [r["response"]["usage"] for r in records]
    assert v2["tokens"] == {
        "in": sum(u["prompt_tokens"] for u in usage),
        "out": sum(u["completion_tokens"] for u in usage),
        "requests": 2,
    }
    for width in ("80", "100"):
        result = reef("releases", "s", "--url", chain.url, env={"COLUMNS": width})
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert all(len(line) <= int(width) for line in lines), "\n".join(lines)
        header = next(line for line in lines if line.startswith("in use"))
        assert header.split() == [
            "in",
            "use",
            "sessions",
            "requests",
            "score",
            "p50/p95",
            "ms",
            "tokens",
            "in/out",
            "errors",
        ]
        below = lines[lines.index(header) :]
        shown = next(line for line in below if " v2 " in f" {line} ").split()
        p50, p95 = (
            f"{x:.0f}" if x >= 100 else f"{x:.1f}" for x in (v2["latency_ms"]["p50"], v2["latency_ms"]["p95"])
        )
        tokens = f"{v2['tokens']['in']}/{v2['tokens']['out']}"
        # the judge's score, marked: no person scored v2
        assert shown == ["●", "v2", "2", "2", "1.00", "(1)", "j", f"{p50}/{p95}", tokens, "0.0%"]
        assert next(line for line in below if " v1 " in f" {line} ").split() == [
            "v1",
            "0",
            "0",
            "-",
            "-",
            "-",
            "-",
        ]
        assert "j: the judge's score (no person scored it)" in result.stdout
        assert "prefer short answers" in next(
            line for line in lines if " v2 " in f" {line} "
        )  # the chain's table
