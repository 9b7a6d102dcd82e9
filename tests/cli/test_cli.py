"""The reef command: CliRunner for behaviour, one real subprocess for the entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from reef_cli.main import app
from reef_core import __version__
from reef_core.store import Store

runner = CliRunner()


def invoke(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, list(args), env=env)


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0 and result.output.strip() == f"reef {__version__}"


def test_print_config_shows_values_and_sources_with_secrets_masked(tmp_path: Path):
    result = invoke(
        "serve",
        "--print-config",
        "--reef.port",
        "9123",
        "--storage.state-dir",
        str(tmp_path),
        env={"REEF_UPSTREAM_API_KEY": "sk-very-secret-value"},
    )
    assert result.exit_code == 0, result.output
    assert "sk-very-secret" not in result.output
    lines = {line.split()[0]: line.split()[1:] for line in result.output.splitlines()[1:] if line.strip()}
    assert lines["reef.port"] == ["9123", "flag:--reef.port"]
    assert lines["inference.upstream-api-key"] == ["********", "env:REEF_UPSTREAM_API_KEY"]
    as_json = invoke("serve", "--print-config", "--json")
    rows = {row["key"]: row for row in json.loads(as_json.output)}
    assert rows["reef.port"] == {"key": "reef.port", "value": "8900", "source": "default"}


def test_config_errors_are_one_line_and_exit_2():
    result = invoke("serve", "--print-config", "--reef.prot", "1")
    assert result.exit_code == 2
    assert "unknown setting 'reef.prot'" in result.output and "Traceback" not in result.output


def test_scenario_round_trip(tmp_path: Path):
    state = ["--state-dir", str(tmp_path)]
    created = invoke("scenario", "create", "demo", *state)
    assert created.exit_code == 0 and "created demo" in created.output
    again = invoke("scenario", "create", "demo", *state, "--json")
    assert json.loads(again.output)["created"] is False
    with Store(tmp_path).open("demo") as scenario:
        rec = scenario.append_sync("record", {"status": 200})
    listed = json.loads(invoke("scenario", "list", *state, "--json").output)
    assert [(r["name"], r["counts"]["record"]) for r in listed] == [("demo", 1)]
    shown = invoke("scenario", "show", "demo", *state)
    assert "1 records" in shown.output and "log --oneline data" in shown.output
    logged = invoke("log", "demo", *state, "--json")
    assert json.loads(logged.output.splitlines()[0])["id"] == rec
    archived = invoke("scenario", "archive", "demo", *state)
    assert archived.exit_code == 0
    assert json.loads(invoke("scenario", "list", *state, "--json").output) == []
    missing = invoke("scenario", "show", "demo", *state)
    assert missing.exit_code == 1 and "no scenario 'demo'" in missing.output


def test_invalid_scenario_name_is_a_usage_error_that_creates_nothing(tmp_path: Path):
    result = invoke("scenario", "create", "../escape", "--state-dir", str(tmp_path))
    assert result.exit_code == 2 and "not a valid scenario name" in result.output
    assert not any(tmp_path.iterdir())


def test_locked_scenario_archive_is_a_conflict(tmp_path: Path):
    with Store(tmp_path).open("busy", create=True):
        result = invoke("scenario", "archive", "busy", "--state-dir", str(tmp_path))
    assert result.exit_code == 3 and "already open for writing" in result.output


def test_installed_entry_point_runs(tmp_path: Path):
    reef = Path(sys.executable).with_name("reef")
    result = subprocess.run(
        [str(reef), "scenario", "create", "x", "--state-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "scenarios" / "x.git" / "HEAD").exists()
    bad = subprocess.run(
        [str(reef), "scenario", "create", "a/b", "--state-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_demo_refuses_an_unknown_model_before_starting_anything(tmp_path: Path) -> None:
    result = invoke("demo", "--model", "llama", "--state-dir", str(tmp_path / "demo"))
    assert result.exit_code == 2
    assert "unknown --model 'llama': use tiny or smollm2" in result.output
    assert not (tmp_path / "demo").exists()


def test_the_demo_users_held_out_requests_ask_for_things_never_taught() -> None:
    from reef_cli.demo_user import requests

    train, held = requests(0, 200), requests(0, 16, held_out=True)
    assert requests(0, 200) == train and len(train) == 200 and len(held) == 16

    def thing(request: str) -> str:
        return request[request.index(" a ") + 1 :]

    assert {thing(t) for t in train}.isdisjoint(thing(t) for t in held)
