"""``GET /reef/harness/install?adapter=pi`` and the script it returns, run by a real sh."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from adapters.pi.install import plain_http_beyond_loopback
from reef_core.harness import Entry, HarnessTree
from reef_core.store import Store, build_tree
from tests.adapters.conftest import SCENARIO, Machine, run_records
from tests.reefine.pi import PI_NEXT, require_pi

SKILL_A = (
    "---\nname: bisect\ndescription: Use when a regression has an unknown cause.\n---\nRun git bisect.\n"
)
SKILL_B = "---\nname: tests-first\ndescription: Use when fixing a bug.\n---\nWrite a failing test first.\n"
TOKEN = "s3cret-install-token"
GREETING = "Hello from the scripted upstream."


def publish(reef, *trees: HarnessTree) -> None:
    """Releases v1, v2, … written straight into the scenario's repository (the daemon has not
    opened it yet: the install route only reads)."""
    scenario = Store(reef.state_dir).open(SCENARIO, create=True)
    try:
        expected = None
        for tree in trees:
            oid = build_tree(scenario.handle.repo, tree.files())
            expected = scenario.releases.publish(oid, expected=expected, operation="evolve", ask="x").commit
    finally:
        scenario.close()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------------------------ the route


def test_the_route_refuses_what_it_cannot_install_with_clear_errors(make_reef):
    reef = make_reef()
    url = f"{reef.url}/reef/harness/install"
    cases = [
        ({"scenario": SCENARIO}, 400, "adapter"),
        ({"adapter": "vim", "scenario": SCENARIO}, 400, "adapter"),
        ({"adapter": "pi"}, 400, "scenario"),
        ({"adapter": "pi", "scenario": "../etc"}, 400, "scenario"),
        ({"adapter": "pi", "scenario": SCENARIO, "release": "c2"}, 400, "release"),
        ({"adapter": "pi", "scenario": SCENARIO, "release": "v3"}, 404, "release"),
    ]
    for params, status, field in cases:
        response = httpx.get(url, params=params)
        assert response.status_code == status, (params, response.text)
        assert response.json()["error"]["param"] == field, (params, response.text)
    refused = httpx.get(url, params=cases[1][0]).json()["error"]["message"]
    assert "use one of claude_code, codex, opencode, pi" in refused
    # the scenario may come as the header too
    assert httpx.get(url, params={"adapter": "pi"}, headers={"x-reef-scenario": SCENARIO}).status_code == 200


def test_with_a_token_the_route_needs_it_and_the_script_never_holds_it(make_reef):
    reef = make_reef(env={"REEF_TOKEN": TOKEN})
    url = f"{reef.url}/reef/harness/install?adapter=pi&scenario={SCENARIO}"
    assert httpx.get(url).status_code == 401
    script = httpx.get(url, headers={"authorization": f"Bearer {TOKEN}"}).text
    assert script.startswith("#!/bin/sh\n")
    assert TOKEN not in script
    assert "export REEF_TOKEN" in script  # the script tells the person where the token goes


# ------------------------------------------------------------------------------------ the script


@pytest.mark.e2e
def test_the_script_installs_the_release_and_a_rerun_writes_nothing(make_reef, machine: Machine):
    reef = make_reef()
    publish(reef, HarnessTree.of([Entry("skill", "bisect", SKILL_A), Entry("rule", "style", "Be brief.\n")]))
    run = machine.install(reef)
    assert "v1 installed" in run.stdout

    agent = machine.agent
    assert (agent / "skills/bisect/SKILL.md").read_text() == SKILL_A
    assert "## style\n\nBe brief." in (agent / "AGENTS.md").read_text()
    assert 'registerCommand("versions"' in (agent / "extensions/reef.ts").read_text()
    provider = json.loads((agent / "models.json").read_text())["providers"]["reef"]
    assert provider["baseUrl"] == f"{reef.url}/v1"
    # values every supported pi reads from the environment (reef-pi sets them)
    assert provider["apiKey"] == "!printenv REEF_API_KEY"
    assert provider["headers"] == {
        "x-reef-scenario": "!printenv REEF_SCENARIO",
        "x-reef-tag-run": "!printenv REEF_RUN_TAG",
        "x-reef-tag-release": "!printenv REEF_RELEASE_TAG",  # the tree the session runs (a canary's?)
        "x-reef-harness": "pi",  # so the record says which harness sent it
    }
    settings = json.loads((agent / "settings.json").read_text())
    assert settings["defaultProvider"] == "reef"

    sidecar = machine.sidecar()
    assert sidecar["release"] == "v1" and sidecar["scenario"] == SCENARIO and sidecar["url"] == reef.url
    assert sidecar["commit"] == Store(reef.state_dir).reader(SCENARIO).releases.tip().commit
    assert sidecar["pi"] == machine.env["REEF_PI"] and sidecar["installed_at"].endswith("Z")
    assert sorted(sidecar["files"]) == sorted(
        str(p.relative_to(agent)) for p in agent.rglob("*") if p.is_file()
    )
    for path, digest in sidecar["files"].items():
        assert sha256(agent / path) == digest, path

    launcher = machine.launcher
    assert launcher.stat().st_mode & 0o111
    # the daemon's interpreter (this process's: the daemon runs in it) and URL, baked in
    assert launcher.read_text().splitlines()[0] == f"#!{sys.executable}"
    assert f"URL = {reef.url!r}" in launcher.read_text()

    before = machine.files()
    again = machine.install(reef)
    assert "up to date" in again.stdout and "nothing written" in again.stdout
    assert machine.files() == before

    # a file changed by hand is put back, and only that one
    (agent / "AGENTS.md").write_text("edited\n")
    repaired = machine.install(reef)
    assert [line for line in repaired.stdout.splitlines() if "wrote" in line] == [
        f"reef:   wrote {agent}/AGENTS.md"
    ]
    assert sha256(agent / "AGENTS.md") == sidecar["files"]["AGENTS.md"]


@pytest.mark.e2e
def test_installing_another_release_removes_what_it_no_longer_has(make_reef, machine: Machine):
    reef = make_reef()
    publish(
        reef,
        HarnessTree.of([Entry("skill", "bisect", SKILL_A)]),
        HarnessTree.of([Entry("skill", "tests-first", SKILL_B)]),
    )
    machine.install(reef, release="v1")
    assert machine.sidecar()["release"] == "v1"
    (machine.agent / "auth.json").write_text("{}\n")  # pi's own file: never reef's to remove
    run = machine.install(reef)
    assert machine.sidecar()["release"] == "v2"
    assert not (machine.agent / "skills/bisect").exists()
    assert f"removed {machine.agent}/skills/bisect/SKILL.md" in run.stdout
    assert (machine.agent / "skills/tests-first/SKILL.md").read_text() == SKILL_B
    assert (machine.agent / "auth.json").exists()


@pytest.mark.e2e
def test_without_sha256sum_and_base64_the_script_falls_back_on_python(make_reef, machine: Machine, tmp_path):
    """Only POSIX tools on PATH (no coreutils sha256sum or base64, as on some systems)."""
    bindir = tmp_path / "posix-bin"
    bindir.mkdir()
    tools = "sh cat mkdir dirname chmod mv rm rmdir sed grep tr tail cut date env node".split()
    for tool in tools:
        found = shutil.which(tool)
        assert found, tool
        (bindir / tool).symlink_to(found)
    reef = make_reef()
    publish(reef, HarnessTree.of([Entry("skill", "bisect", SKILL_A)]))
    env = {**machine.env, "PATH": str(bindir)}
    for expected in ("v1 installed", "nothing written"):
        run = subprocess.run(
            [str(bindir / "sh"), "-s"], input=machine.script(reef), env=env, capture_output=True, text=True
        )
        assert run.returncode == 0 and expected in run.stdout, run.stdout + run.stderr
    for path, digest in machine.sidecar()["files"].items():
        assert sha256(machine.agent / path) == digest, path


@pytest.mark.e2e
def test_a_wrong_pi_fails_the_install_before_anything_is_written(make_reef, machine: Machine):
    reef = make_reef()
    run = subprocess.run(
        ["sh", "-s"],
        input=machine.script(reef),
        env={**machine.env, "REEF_PI": "/bin/true"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert "REEF_PI=/bin/true is not pi 0.73.1 or newer" in run.stderr
    assert machine.files() == {}


def node_is_older_than(machine: Machine, major: int, minor: int) -> bool:
    """The node on the machine's PATH is older than ``major.minor``."""
    said = subprocess.run(["node", "--version"], capture_output=True, text=True, env=machine.env).stdout
    found = tuple(int(part) for part in said.strip().lstrip("v").split(".")[:2])
    return found < (major, minor)


@pytest.mark.e2e
@pytest.mark.slow
def test_without_a_pi_the_script_installs_the_pinned_one_with_npm(make_reef, machine: Machine):
    """npm installs pi 1.6.0 (and, on a machine whose node is older than the 22.19 it needs, a
    node next to it) from the project's npm cache, offline (what scripts/setup.sh --dev filled)."""
    cache = Path(__file__).resolve().parents[2] / ".cache" / "npm"
    if not cache.is_dir():
        pytest.fail(f"no npm cache at {cache}: run scripts/setup.sh --dev", pytrace=False)
    reef = make_reef()
    env = {k: v for k, v in machine.env.items() if k != "REEF_PI"}
    assert subprocess.run(["sh", "-c", "command -v pi"], env=env).returncode != 0  # no pi on PATH
    run = subprocess.run(
        ["sh", "-s"],
        input=machine.script(reef),
        env={**env, "npm_config_cache": str(cache), "npm_config_offline": "true"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    npm_bin = machine.home / ".reef" / "npm" / "bin"
    if node_is_older_than(machine, 22, 19):
        assert f"installing pi 1.6.0 and the node it needs into {npm_bin.parent} with npm" in run.stdout
        node = subprocess.run([npm_bin / "node", "--version"], capture_output=True, text=True)
        assert node.stdout.strip() == "v22.23.5"
    else:
        assert f"installing pi 1.6.0 into {npm_bin.parent} with npm" in run.stdout
    assert (machine.sidecar()["pi"], machine.sidecar()["pi_version"]) == (str(npm_bin / "pi"), "1.6.0")
    assert f"(pi: {npm_bin / 'pi'}, 1.6.0)" in run.stdout

    # reef-pi runs that pi with its node, with no REEF_PI and nothing of it on PATH
    version = machine.reef_pi("--version", REEF_PI="")
    assert version.returncode == 0 and "1.6.0" in version.stdout + version.stderr, version.stderr
    ran = machine.reef_pi("-p", "hi", REEF_PI="")
    assert ran.returncode == 0 and ran.stdout.strip() == GREETING, ran.stderr
    tag = json.loads((machine.base / "last-run.json").read_text())["tag"]
    assert [r["tags"] for r in run_records(reef, tag)] == [{"run": tag, "release": "none"}]

    # the next install finds that pi and installs nothing more
    again = subprocess.run(["sh", "-s"], input=machine.script(reef), env=env, capture_output=True, text=True)
    assert again.returncode == 0 and "nothing written" in again.stdout
    assert "installing pi" not in again.stdout


@pytest.mark.e2e
def test_a_newer_pi_on_path_is_accepted_and_nothing_is_installed(make_reef, machine: Machine):
    """pi 1.6.0 on PATH, its node next to it (older than it needs on the rest of PATH): the
    script takes it, and reef-pi runs it with that node even when PATH no longer has either."""
    newer = require_pi(PI_NEXT).path
    reef = make_reef()
    publish(reef, HarnessTree.of([Entry("skill", "bisect", SKILL_A)]))
    env = {k: v for k, v in machine.env.items() if k != "REEF_PI"}
    run = subprocess.run(
        ["sh", "-s"],
        input=machine.script(reef),
        env={**env, "PATH": f"{newer.parent}:{env['PATH']}", "npm_config_offline": "true"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "v1 installed" in run.stdout and "installing" not in run.stdout
    assert (machine.sidecar()["pi"], machine.sidecar()["pi_version"]) == (str(newer), PI_NEXT)
    assert not (machine.home / ".reef" / "npm").exists()

    ran = machine.reef_pi("-p", "hi", REEF_PI="")
    assert ran.returncode == 0 and ran.stdout.strip() == GREETING, ran.stderr
    doctor = machine.reef_pi("doctor", REEF_PI="")
    assert doctor.returncode == 0, doctor.stdout
    assert f"{newer} is pi {PI_NEXT}" in doctor.stdout


@pytest.mark.parametrize(
    ("url", "warns"),
    [
        ("http://10.1.2.3:8900", True),
        ("HTTP://reef.lan", True),
        ("http://0.0.0.0:8900", True),
        ("https://10.1.2.3:8900", False),
        ("http://127.0.0.1:8900", False),
        ("http://localhost:8900", False),
        ("http://[::1]:8900", False),
    ],
)
def test_the_script_warns_for_plain_http_beyond_loopback_only(url: str, warns: bool):
    assert plain_http_beyond_loopback(url) is warns


@pytest.mark.e2e
def test_over_plain_http_from_beyond_loopback_the_script_warns_before_it_writes(make_reef, machine: Machine):
    """The script's URL is the one the caller used (the Host header): here 10.1.2.3, while the
    request itself goes to 127.0.0.1; the script never contacts its URL."""
    reef = make_reef()
    port = reef.url.rsplit(":", 1)[1]
    script = machine.script(reef, host=f"10.1.2.3:{port}")
    assert f"  url=http://10.1.2.3:{port}\n" in script
    run = subprocess.run(
        ["sh", "-s"],
        input=script,
        env=machine.env,
        cwd=machine.home,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, in the order the script wrote it
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout
    lines = run.stdout.splitlines()
    assert lines[0].startswith(
        f"reef: warning: this installer came over plain http from http://10.1.2.3:{port}"
    )
    assert "anyone on the network path could read the token or change what is installed" in " ".join(
        lines[:4]
    )
    first_write = next(i for i, line in enumerate(lines) if "wrote" in line)
    assert first_write > 0 and not any("warning" in line for line in lines[first_write:])
    # from loopback, the same daemon's script says nothing of the kind
    assert "warning" not in machine.install(reef).stderr


# ------------------------------------------------------------------------------------ run tags


def test_records_can_be_read_by_tag(make_reef):
    reef = make_reef()
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    sent = {}
    for run in ("one", "two", "one"):
        response = httpx.post(
            f"{reef.url}/v1/chat/completions",
            json=chat,
            headers={"x-reef-scenario": SCENARIO, "x-reef-tag-run": run, "x-reef-tag-who": "me"},
        )
        sent.setdefault(run, []).append(response.headers["x-reef-agent-record-id"])
    url = f"{reef.url}/reef/scenarios/{SCENARIO}/records"
    assert [r["id"] for r in httpx.get(url, params={"tag": "run:one"}).json()["records"]] == sent["one"]
    both = httpx.get(url, params=[("tag", "run:two"), ("tag", "who:me")]).json()["records"]
    assert [r["id"] for r in both] == sent["two"]
    assert httpx.get(url, params={"tag": "run:three"}).json() == {"records": [], "next": None}
    page = httpx.get(url, params={"tag": "run:one", "limit": 1}).json()
    assert [r["id"] for r in page["records"]] == sent["one"][:1] and page["next"] == sent["one"][0]
    rest = httpx.get(url, params={"tag": "run:one", "after": page["next"]}).json()
    assert [r["id"] for r in rest["records"]] == sent["one"][1:]
    bad = httpx.get(url, params={"tag": "run"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tag"
