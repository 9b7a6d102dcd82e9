"""``reef-pi`` while a canary runs: the real pi, a real daemon, the scripted model.

The launcher asks the daemon which tree a new session gets: the canary's share of sessions
(by a hash of the session tag) runs the canary's tree, laid out beside the installed release,
and the rest run the installed release; every request says which tree it came from.
"""

from __future__ import annotations

import hashlib
import io
import json
from typing import Any

import pytest

from adapters.canary import session_tree
from adapters.launcher import Context, Layout
from adapters.pi.launcher import PI
from reef_core.learning.canary import arm_of
from tests.adapters.conftest import SCENARIO, Machine, run_records
from tests.fakes.upstream import ScriptedUpstream
from tests.reefine.conftest import evolve, rule, step

FLAGS = (
    "--recipe.config.health", "false",
    "--recipe.config.usage-min-sessions", "100000",
    "--recipe.config.canary-share", "0.5",
)  # fmt: skip


def _context(url: str, env: dict[str, str]) -> Context:
    """What ``reef-pi`` builds from its environment, for calling the launcher's parts directly."""
    layout = Layout.of(env, SCENARIO, PI)
    return Context(PI, url, SCENARIO, None, layout, env, None, io.StringIO(), io.StringIO())


def canary_after_install(reefine, upstream: ScriptedUpstream, machine) -> Any:
    """A daemon whose scenario has v1 (rule tests-first), installed on ``machine``, and canary c2
    (rule small-diffs) running."""
    reef = reefine(*FLAGS)
    upstream.script(*step(rule("tests-first", "Write the failing test first.")))
    assert evolve(reef, SCENARIO, "write the failing test first")["result"]["release"] == "v1"
    machine.install(reef)
    upstream.script(*step(rule("small-diffs", "Keep each diff small.")))
    assert evolve(reef, SCENARIO, "keep diffs small")["result"]["verdict"] == "canary"
    return reef


def tag_for(arm: str) -> str:
    return next(f"run-{i}" for i in range(1000) if arm_of("c2", f"run-{i}", 0.5) == arm)


@pytest.mark.e2e
def test_the_canary_share_of_sessions_runs_the_canary_tree_and_the_rest_the_installed_one(
    reefine, upstream: ScriptedUpstream, machine: Machine
):
    reef = canary_after_install(reefine, upstream, machine)
    installed = dict(machine.sidecar()["files"])  # path -> sha256 of what the installer wrote

    trial = machine.reef_pi("-p", "hi", REEF_SESSION=tag_for("canary"))
    assert trial.returncode == 0, trial.stderr
    assert (
        "reef: this session tries canary c2, a candidate after v1, given to 50% of new sessions"
        in trial.stderr
    )
    [record] = run_records(reef, tag_for("canary"))
    assert record["tags"]["release"] == "c2"
    prompt = json.dumps(record["request"]["messages"][0]["content"])
    assert "Keep each diff small." in prompt and "Write the failing test first." in prompt
    assert (machine.base / "canary" / "c2" / "agent").is_dir()

    plain = machine.reef_pi("-p", "hi", REEF_SESSION=tag_for("control"))
    assert plain.returncode == 0, plain.stderr
    assert "canary" not in plain.stderr
    [record] = run_records(reef, tag_for("control"))
    assert record["tags"]["release"] == "v1"
    prompt = json.dumps(record["request"]["messages"][0]["content"])
    assert "Keep each diff small." not in prompt and "Write the failing test first." in prompt

    # the installed release was never touched
    assert {p: hashlib.sha256((machine.config / p).read_bytes()).hexdigest() for p in installed} == installed
    assert machine.sidecar()["release"] == "v1"

    # over many new sessions, the share is the canary's and each lands where its hash says
    ctx = _context(reef.url, machine.env)
    trees = {f"s{i}": session_tree(ctx, f"s{i}", "v1").release for i in range(200)}
    assert all(tree == ("c2" if arm_of("c2", s, 0.5) == "canary" else "v1") for s, tree in trees.items())
    assert 60 <= sum(tree == "c2" for tree in trees.values()) <= 140

    # REEF_CANARY=off runs the installed tree, whatever the hash
    ctx_off = _context(reef.url, {**machine.env, "REEF_CANARY": "off"})
    assert session_tree(ctx_off, tag_for("canary"), "v1").release == "v1"


def test_without_a_daemon_answer_the_installed_tree_runs(tmp_path):
    """An older daemon (404), or none: the session runs what is installed, nothing fails."""
    ctx = _context("http://127.0.0.1:9", {"HOME": str(tmp_path)})
    tree = session_tree(ctx, "s1", "v3")
    assert tree.release == "v3" and tree.config == ctx.layout.config and tree.notice is None


@pytest.mark.e2e
def test_reef_claude_runs_the_canary_tree_for_its_share_and_tags_the_requests_with_it(
    reefine, upstream: ScriptedUpstream, tmp_path
):
    from tests.adapters.claude_machine import ClaudeMachine, require_claude

    claude = ClaudeMachine(tmp_path / "claude", require_claude())
    reef = canary_after_install(reefine, upstream, claude)

    for arm, tree in (("canary", "c2"), ("control", "v1")):
        run = claude.reef_claude("-p", "hi", "--output-format", "json", REEF_SESSION=tag_for(arm))
        assert run.returncode == 0, run.stdout + run.stderr
        assert ("reef: this session tries canary c2" in run.stderr) == (arm == "canary")
        [record] = run_records(reef, tag_for(arm))
        assert record["tags"]["release"] == tree
        said = json.dumps(record["request"])
        assert ("Keep each diff small." in said) == (arm == "canary")
        assert "Write the failing test first." in said
