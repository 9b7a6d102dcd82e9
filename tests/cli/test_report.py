"""``reef report``: feedback on receipts, through a real daemon (and its token)."""

from __future__ import annotations

import json

import pytest

from reef_core.store import Store
from tests.cli.support import chat, reef


def reports_in(daemon, scenario: str = "s") -> list[dict]:
    return [item.data for item in Store(daemon.state_dir).reader(scenario).data.iter_items(["report"])]


def test_a_report_is_stored_on_its_receipts(make_reef):
    daemon = make_reef()
    first, second = chat(daemon), chat(daemon)
    result = reef(
        "report", "s", first, second, "--score", "0.5", "--feedback", "too long", "--url", daemon.url
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("reported rep_") and f"on {first}, {second} in s" in result.stdout
    [stored] = reports_in(daemon)
    assert stored["score"] == 0.5 and stored["feedback"] == "too long"
    assert stored["references"] == [first, second]
    negative = reef("report", "s", first, "--score", "-1", "--url", daemon.url, "--json")
    assert negative.exit_code == 0, negative.output
    assert json.loads(negative.stdout)["agent_record_id"].startswith("rep_")
    assert [r["score"] for r in reports_in(daemon)] == [0.5, -1.0]


def test_a_retry_with_the_same_id_is_stored_once_and_a_changed_one_conflicts(make_reef):
    daemon = make_reef()
    receipt = chat(daemon)
    args = ["report", "s", receipt, "--id", "review-7", "--url", daemon.url]
    assert reef(*args, "--score", "1").exit_code == 0
    again = reef(*args, "--score", "1")
    assert again.exit_code == 0 and again.stdout.startswith("already reported as rep_")
    changed = reef(*args, "--score", "0")
    assert changed.exit_code == 3 and "already used for a different report" in changed.stderr
    assert len(reports_in(daemon)) == 1


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["nonsense", "--score", "1"], "not a reef id"),
        (["rep_" + "0" * 28, "--score", "1"], "not a receipt"),
        (["{receipt}"], "needs --score or --feedback"),
        (["{receipt}", "--score", "nan"], "finite"),
        (["{receipt}", "--score", "high"], "Invalid value for '--score'"),
    ],
)
def test_bad_arguments_are_usage_errors_that_store_nothing(make_reef, args, says):
    daemon = make_reef()
    receipt = chat(daemon)
    result = reef("report", "s", *[a.replace("{receipt}", receipt) for a in args], "--url", daemon.url)
    assert result.exit_code == 2 and says in result.output
    assert reports_in(daemon) == []


def test_a_receipt_of_another_scenario_is_refused_by_the_daemon(make_reef):
    daemon = make_reef()
    other = chat(daemon, "other")
    chat(daemon, "s")
    result = reef("report", "s", other, "--score", "1", "--url", daemon.url)
    assert result.exit_code == 2 and f"{other} is not a record of scenario s" in result.stderr
    assert reports_in(daemon) == []


def test_the_token_comes_from_reef_token(make_reef):
    daemon = make_reef(env={"REEF_TOKEN": "s3cret-token"})
    receipt = chat(daemon, token="s3cret-token")
    denied = reef("report", "s", receipt, "--score", "1", "--url", daemon.url)
    assert denied.exit_code == 1 and "requires a token" in denied.stderr and "REEF_TOKEN" in denied.stderr
    wrong = reef("report", "s", receipt, "--score", "1", "--url", daemon.url, env={"REEF_TOKEN": "nope"})
    assert wrong.exit_code == 1 and "not valid" in wrong.stderr and "nope" not in wrong.output
    allowed = reef(
        "report", "s", receipt, "--score", "1", "--url", daemon.url, env={"REEF_TOKEN": "s3cret-token"}
    )
    assert allowed.exit_code == 0, allowed.output
    assert "s3cret" not in allowed.output
    assert len(reports_in(daemon)) == 1


def test_no_daemon_is_one_line_and_exit_1(no_daemon_by_default):
    result = reef("report", "s", "rec_" + "0" * 28, "--score", "1")
    assert result.exit_code == 1 and result.stderr.count("\n") == 1
    assert f"no reef daemon answers at {no_daemon_by_default}" in result.stderr
