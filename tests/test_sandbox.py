"""The OS sandbox itself, with the real bwrap and tiny programs: what is inside, what is not.

The end-to-end tests run harnesses in it through the recipe (``tests/reefine/test_sandboxed_health.py``,
``tests/reefine/test_proposer_sandbox.py``); these name each wall once, directly: a unix socket
by path and by abstract name, the person's home, ``/run``, ``/etc/shadow``, the environment, the
root's writability, and the bridge's credential swap (the scripted upstream stands in for the
daemon and shows what the bridge sent it).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from reef_core.sandbox import Confinement
from tests.fakes.upstream import ScriptedUpstream, Text

PYTHON = getattr(sys, "_base_executable", sys.executable)
TOKEN = "tok-daemon-" + uuid.uuid4().hex

PROBE = r"""
import json, os, socket, sys, urllib.request
found = {}
def attempt(name, action):
    try:
        found[name] = action()
    except Exception as exc:
        found[name] = f"refused: {type(exc).__name__}"
def connect(address):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(address)
    return "connected"
paths, abstract, url = json.loads(sys.argv[1])
attempt("socket by path", lambda: connect(paths["socket"]))
attempt("abstract socket", lambda: connect(abstract))
attempt("secret", lambda: open(paths["secret"]).read())
attempt("shadow", lambda: open("/etc/shadow").read()[:10])
attempt("run", lambda: os.listdir("/run"))
attempt("write root", lambda: open("/escape", "w").write("x"))
attempt("write outside", lambda: open(paths["outside"], "w").write("x"))
attempt("write work", lambda: open(paths["work"], "w").write("x") and "written")
found["env"] = dict(os.environ)
def post(key):
    request = urllib.request.Request(url + "/v1/chat/completions", method="POST",
        data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode(),
        headers={"content-type": "application/json", **({"authorization": "Bearer " + key} if key else {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
found["without credential"] = post(None)
found["with credential"] = post(os.environ["REEF_API_KEY"])
print(json.dumps(found))
"""


@pytest.fixture
def listening(outside_tmp: Path) -> Iterator[tuple[Path, str]]:
    """A unix socket listening by path (outside /tmp) and one by abstract name."""
    path, abstract = outside_tmp / "agent.sock", f"\0reef-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX) as by_path, socket.socket(socket.AF_UNIX) as by_name:
        by_path.bind(str(path))
        by_name.bind(abstract)
        by_path.listen(1)
        by_name.listen(1)
        yield path, abstract


def test_inside_the_sandbox_only_the_bridge_and_the_given_folders_are_there(
    sandbox, listening, outside_tmp: Path, tmp_path: Path, monkeypatch
):
    socket_path, abstract = listening
    secret = outside_tmp / "id_ed25519"
    secret.write_text("secret")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("REEF_TOKEN", TOKEN)  # this process's secrets stay out of the sandbox's env
    paths = {
        "socket": str(socket_path),
        "secret": str(secret),
        "outside": str(outside_tmp / "escaped"),
        "work": str(work / "written"),
    }
    with ScriptedUpstream() as daemon, Confinement(daemon.url, "dev", TOKEN) as box:
        daemon.script(Text("hello"))
        env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "REEF_API_KEY": box.credential}
        argv = box.command(
            [PYTHON, "-I", "-c", PROBE, json.dumps([paths, abstract, box.inside_url])],
            env=env,
            writable=[work],
            programs=[PYTHON],
            chdir=work,
        )
        run = subprocess.run(argv, capture_output=True, text=True, env={}, timeout=60)
        assert run.returncode == 0, run.stderr
        found = json.loads(run.stdout)
        [sent] = daemon.requests

    for wall in (
        "socket by path",
        "abstract socket",
        "secret",
        "shadow",
        "run",
        "write root",
        "write outside",
    ):
        assert str(found[wall]).startswith("refused: "), (wall, found[wall])
    assert not (outside_tmp / "escaped").exists()
    assert found["write work"] and (work / "written").exists()  # the folder it was given
    # exactly the environment it was given (the shell-less PWD and Python's C-locale coercion aside)
    assert set(found["env"]) - {"PWD", "LC_CTYPE"} == set(env)
    assert found["without credential"] == 401 and found["with credential"] == 200
    # the bridge swapped the sandbox's credential for the daemon's token, and set the rest
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"
    assert sent.headers["x-reef-scenario"] == "dev" and sent.headers["x-reef-capture"] == "false"
    assert box.credential not in json.dumps(sent.headers)
