"""``reef-pi`` and the reef pi extension, with the real pi, offline, against a real daemon."""

from __future__ import annotations

import io
import json

import httpx
import pytest

from adapters.pi.launcher import main
from adapters.verbs import versions_table
from reef_core.harness import Entry, HarnessTree
from reef_core.harness import HarnessBinary as PiBinary
from tests.adapters.conftest import SCENARIO, Machine, both_pis, run_records
from tests.adapters.test_pi_install import publish
from tests.conftest import git
from tests.fakes.upstream import ScriptedUpstream
from tests.reefine.conftest import extension, skill, step

FAILING_TEST = "Reproduce a bug with a failing test before fixing it."
ASK = "when I ask you to fix a bug, reproduce it with a failing test first"
GREETING = "Hello from the scripted upstream."


def last_tag(machine: Machine) -> str:
    return json.loads((machine.base / "last-run.json").read_text())["tag"]


def system_prompt(upstream: ScriptedUpstream) -> str:
    return json.dumps(upstream.requests[-1].body["messages"][0]["content"])


@pytest.mark.e2e
@both_pis
def test_install_run_evolve_notice_update_and_report(reefine, upstream: ScriptedUpstream, machine: Machine):
    reef = reefine()
    machine.install(reef)

    # pi reaches the upstream through reef: the exchange is recorded in the scenario, tagged with its run
    run = machine.reef_pi("-p", "hi")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == GREETING
    first_tag = last_tag(machine)
    [record] = run_records(reef, first_tag)
    assert record["tags"] == {"run": first_tag, "release": "none"}  # no release installed yet
    assert record["request"]["messages"][-1] == {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    assert {t["function"]["name"] for t in record["request"]["tools"]} >= {"read", "bash"}  # pi's own
    assert (
        f"record {record['id']}" in git("--git-dir", reef.repo(SCENARIO), "log", "--oneline", "data").stdout
    )

    # an ask, followed to its verdict
    upstream.script(*step(skill("failing-test-first", FAILING_TEST)))
    evolved = machine.reef_pi("evolve", ASK, "--wait", "--timeout", "120")
    assert evolved.returncode == 0, evolved.stdout + evolved.stderr
    out = evolved.stdout
    assert f"filed for scenario {SCENARIO}" in out
    assert f"progress: {reef.url}/reef/harness/requests/ask_" in out
    assert "selected: v1 (c1)" in out and "next: reef-pi update" in out

    # /versions in pi: a table on stderr (print mode), and no model call
    asked = len(upstream.requests)
    versions = machine.reef_pi("-p", "/versions")
    assert versions.returncode == 0 and versions.stdout == ""
    table = versions.stderr[versions.stderr.index("version  ") :].splitlines()
    assert table[0].split() == ["version", "id", "result", "installed/current", "ask"]
    assert table[1].split()[0] == "v1" and table[1].split()[2:4] == ["selected", "current"]
    assert table[1].index("selected") == table[0].index("result")  # aligned
    assert ASK[:40] in table[1]
    assert len(upstream.requests) == asked

    # the next session says a newer release exists; v1 is not in pi's prompt yet
    noticed = machine.reef_pi("-p", "hi")
    assert noticed.returncode == 0 and noticed.stdout.strip() == GREETING
    assert 'reef: v1 is available (installed: none): "when I ask you to fix a bug' in noticed.stderr
    assert "failing-test-first" not in system_prompt(upstream)

    updated = machine.reef_pi("update")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert "v1 installed" in updated.stdout
    assert machine.sidecar()["release"] == "v1"

    # the skill is in pi's system prompt now, and the notice is gone
    after = machine.reef_pi("-p", "hi")
    assert after.returncode == 0 and "is available" not in after.stderr
    prompt = system_prompt(upstream)
    assert "failing-test-first" in prompt and "Use when reproduce a bug" in prompt
    listed = machine.reef_pi("versions")
    assert listed.stdout.splitlines()[1].split()[2:4] == ["selected", "installed,"]

    # feedback on the last run's receipts, and only on those
    reported = machine.reef_pi("report", "--score", "1", "--feedback", "it tested first")
    assert reported.returncode == 0, reported.stderr
    receipts = [r["id"] for r in run_records(reef, last_tag(machine))]
    assert len(receipts) == 1 and receipts[0] != record["id"]
    report_id = reported.stdout.split()[1]
    assert reported.stdout.startswith(f"report {report_id} (score 1) on 1 receipt of the run started")
    report = reef.reader(SCENARIO).data.get(report_id).data
    assert report["references"] == receipts
    assert report["score"] == 1 and report["feedback"] == "it tested first"
    assert (
        f"report {report_id} score=1 refs={receipts[0]}"
        in git("--git-dir", reef.repo(SCENARIO), "log", "--oneline", "data").stdout
    )


@pytest.mark.e2e
def test_a_pending_release_waits_and_print_mode_will_not_approve_it(
    reefine, upstream: ScriptedUpstream, machine: Machine
):
    reef = reefine()
    machine.install(reef)
    upstream.script(*step(extension("hello")))
    evolved = machine.reef_pi("evolve", "add a /hello command", "--wait")
    assert "pending: c1 adds or changes code" in evolved.stdout
    assert f"reef promote {SCENARIO} c1" in evolved.stdout

    refused = machine.reef_pi("-p", "/versions c1 install")
    assert refused.returncode == 0
    assert "reef: c1 waits for approval" in refused.stderr  # the session-start notice
    assert "needs a person's approval, which print mode cannot ask for" in refused.stderr
    assert "pi runs this code with your privileges:\n  extensions/hello.ts (new)\n" in refused.stderr
    assert f"  reef promote {SCENARIO} c1\n" in refused.stderr
    listing = httpx.get(f"{reef.url}/reef/scenarios/{SCENARIO}/releases").json()
    assert listing["releases"] == [] and [s["pending"] for s in listing["steps"]] == [True]
    assert machine.sidecar()["release"] is None

    link = machine.reef_pi("-p", "/versions c1")
    assert f"reef: c1: {reef.url}/reef/harness/releases/1/page?scenario={SCENARIO}" in link.stderr

    # /evolve files an ask from inside pi, with no exchange with the model
    records = reef.reader(SCENARIO).data.counts().get("record", 0)
    filed = machine.reef_pi("-p", "/evolve document every public function")
    assert filed.returncode == 0 and filed.stdout == ""
    assert "reef: ask ask_" in filed.stderr and f"filed for scenario {SCENARIO}" in filed.stderr
    ask_id = filed.stderr.split("reef: ask ", 1)[1].split()[0]
    ask = reef.reader(SCENARIO).data.get(ask_id).data
    assert ask["text"] == "document every public function" and ask["harness"] == "pi"
    assert reef.reader(SCENARIO).data.counts().get("record", 0) == records


@pytest.mark.e2e
def test_doctor_passes_then_without_the_daemon_doctor_and_a_pi_run_say_to_start_it(
    make_reef, machine: Machine, pi_bin: PiBinary
):
    reef = make_reef()
    machine.install(reef)
    ok = machine.reef_pi("doctor")
    assert ok.returncode == 0, ok.stdout
    lines = ok.stdout.splitlines()
    assert [line.split()[1] for line in lines] == [
        "python", "reef", "token", "installed", "files", "pi", "PATH"
    ]  # fmt: skip
    assert all(line.startswith("ok ") for line in lines)
    reef.stop()
    said = (
        f"no reef daemon answers at {reef.url} ([Errno 111] Connection refused): start it with `reef serve`"
    )
    down = machine.reef_pi("doctor")
    assert down.returncode == 1
    assert f"FAIL  reef daemon  {said}" in down.stdout.splitlines()

    # a run of pi checks first, says the same, and never starts pi (which would say only
    # "Connection error." after its first model call)
    ran = machine.reef_pi("-p", "hello")
    assert ran.returncode == 1
    assert ran.stderr == f"reef-pi: {said}\n" and ran.stdout == ""
    assert not (machine.base / "last-run.json").exists()  # written just before pi starts
    # pi's own --version needs no daemon: it still runs
    version = machine.reef_pi("--version")
    assert version.returncode == 0 and pi_bin.version in version.stdout + version.stderr


@pytest.mark.e2e
def test_with_a_token_reef_pi_and_the_extension_send_it_and_install_from_inside_pi(
    make_reef, machine: Machine
):
    token = "s3cret-reef-pi-token"
    reef = make_reef(env={"REEF_TOKEN": token})
    publish(reef, HarnessTree.of([Entry("rule", "brief", "Answer in one sentence.\n")]))
    machine.install(reef, release=None, token=token)  # the current release: v1
    refused = machine.reef_pi("versions")
    assert refused.returncode == 1
    assert "this reef requires a token" in refused.stderr and "export REEF_TOKEN" in refused.stderr
    listed = machine.reef_pi("versions", REEF_TOKEN=token)
    assert listed.returncode == 0 and "installed, current" in listed.stdout

    # pi itself sends the token (as its API key) and the extension does for its own calls
    ran = machine.reef_pi("-p", "hi", REEF_TOKEN=token)
    assert ran.returncode == 0 and ran.stdout.strip() == GREETING, ran.stderr
    assert reef.reader(SCENARIO).data.counts().get("record", 0) == 1
    shown = machine.reef_pi("-p", "/versions v1", REEF_TOKEN=token)
    assert f"reef: v1: {reef.url}/reef/harness/releases/v1/page?scenario={SCENARIO}&key=" in shown.stderr

    # /versions vN install in print mode: reef-pi update under the hood, then "/reload"
    (machine.agent / "AGENTS.md").write_text("stale\n")
    installed = machine.reef_pi("-p", "/versions v1 install", REEF_TOKEN=token)
    assert "reef: installed v1. Type /reload to load it into this session." in installed.stderr
    assert "Answer in one sentence." in (machine.agent / "AGENTS.md").read_text()


# ------------------------------------------------------------------------------ without pi


def run_main(tmp_path, *argv: str, url: str = "http://127.0.0.1:9") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), url=url, scenario=SCENARIO, env={"HOME": str(tmp_path)}, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_usage_errors_exit_2_and_say_what_is_wrong(tmp_path):
    code, _, err = run_main(tmp_path, "report")
    assert code == 2 and "--score" in err and "usage: reef-pi" in err
    code, _, err = run_main(tmp_path, "evolve", "  ")
    assert code == 2 and "the ask is empty" in err


def test_without_an_install_or_a_daemon_the_errors_say_what_to_do(tmp_path, make_reef):
    code, out, err = run_main(tmp_path, "-p", "hi")
    assert code == 1 and out == ""
    assert err == (
        "reef-pi: no reef daemon answers at http://127.0.0.1:9 ([Errno 111] Connection refused): "
        "start it with `reef serve`\n"
    )
    code, _, err = run_main(tmp_path, "evolve", "be brief")
    assert code == 1 and "no reef daemon answers at http://127.0.0.1:9" in err
    reef = make_reef()
    code, _, err = run_main(tmp_path, "-p", "hi", url=reef.url)
    assert code == 1 and "pi is not installed for scenario dev" in err
    assert f"curl -fsSL '{reef.url}/reef/harness/install?adapter=pi&scenario=dev' | sh" in err
    code, _, err = run_main(tmp_path, "--version")  # pi's own: no daemon needed, only pi
    assert code == 1 and "pi is not installed for scenario dev" in err
    code, _, err = run_main(tmp_path, "report", "--score", "1", url=reef.url)
    assert code == 1 and "no run to report on" in err


def test_versions_table_aligns_pending_steps_then_releases():
    listing = {
        "releases": [
            {"release": "v2", "commit": "b" * 40, "operation": "rollback", "current": True, "ask": None},
            {
                "release": "v1",
                "commit": "a" * 40,
                "operation": "evolve",
                "verdict": "selected",
                "ask": "x " * 50,
            },
        ],
        "steps": [
            {"step": 3, "name": "c3", "pending": True, "base": "v2", "ask": "add a /hello command"},
            {"step": 1, "name": "c1", "pending": False, "ask": "x"},
        ],
    }
    lines = versions_table(listing, {"release": "v1", "commit": "a" * 40}).splitlines()
    assert [line.split()[0] for line in lines] == ["version", "c3", "v2", "v1"]
    assert lines[1].split()[1:3] == ["-", "pending"] and "needs approval, on v2" in lines[1]
    assert lines[2].split()[1:4] == ["bbbbbbb", "rollback", "current"]
    assert lines[3].split()[1:4] == ["aaaaaaa", "selected", "installed"]
    column = lines[0].index("ask")
    assert {line.index("add a") if "add a" in line else column for line in lines} == {column}
    assert lines[3].endswith("…") and len(lines[3]) - column == 60
