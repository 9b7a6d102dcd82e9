"""Beyond loopback only with a token, or open on purpose: ``reef serve`` as a real process.

Binding 0.0.0.0 listens on this machine's interfaces; every request goes to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from reef_core.config import load_settings
from reef_core.daemon import app as daemon_app
from reef_core.errors import ConfigError
from tests.cli.support import reef
from tests.daemon.test_process import REEF, start

TOKEN = "tok-exposure-0123456789"
OPEN_LINE = "with no token (--reef.allow-unauthenticated)"


def wildcard_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


def test_no_token_beyond_loopback_is_refused_before_anything_happens(tmp_path: Path, upstream):
    port = wildcard_port()
    state = tmp_path / "state"
    run = subprocess.run(
        [
            REEF,
            "serve",
            "--reef.host",
            "0.0.0.0",
            "--reef.port",
            str(port),
            "--storage.state-dir",
            str(state),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "REEF_TOKEN"},
    )
    assert run.returncode == 2, run.stderr  # usage: a configuration error
    message = " ".join(run.stderr.split())
    assert "refusing to listen on 0.0.0.0 with no token" in message
    assert "REEF_TOKEN" in message and "--reef.allow-unauthenticated" in message
    assert "serving on" not in run.stderr
    assert not state.exists()  # nothing created
    with socket.socket() as s:  # and nothing listened: the port is still free
        s.bind(("0.0.0.0", port))


def test_the_library_refuses_too_before_it_builds_or_listens(tmp_path: Path):
    for host in ("0.0.0.0", "::", "10.1.2.3", "reef.lan"):
        settings = load_settings(
            overrides=["--reef.host", host, "--storage.state-dir", str(tmp_path / "state")], env={}
        )
        with pytest.raises(ConfigError) as refused:
            asyncio.run(daemon_app.serve(settings))
        assert refused.value.field == "reef.host" and host in refused.value.message
    assert not (tmp_path / "state").exists()
    for flags, env in [
        (["--reef.host", "127.0.0.1"], {}),
        (["--reef.host", "localhost"], {}),
        (["--reef.host", "0.0.0.0"], {"REEF_TOKEN": TOKEN}),
        (["--reef.host", "0.0.0.0", "--reef.allow-unauthenticated"], {}),
    ]:
        daemon_app.check_listening(load_settings(overrides=flags, env=env))


def test_allowed_on_purpose_it_starts_says_auth_is_off_and_warns(tmp_path: Path, upstream):
    proc, url = start(tmp_path, upstream.url, "--reef.host", "0.0.0.0", "--reef.allow-unauthenticated")
    try:
        status = httpx.get(f"{url}/reef/status", timeout=10).json()
        assert status["auth"] == {"required": False, "listening": "0.0.0.0", "loopback": False}
        shown = reef("status", "--url", url)
        assert shown.exit_code == 0, shown.output
        first, warning = shown.stdout.splitlines()[:2]
        assert "auth: off" in first
        assert warning.startswith("warning: no token and listening on 0.0.0.0")
        as_json = json.loads(reef("status", "--url", url, "--json").stdout)
        assert as_json["auth"] == status["auth"]
    finally:
        err = stop(proc)
    assert "auth: off" in err
    warnings = [line for line in err.splitlines() if OPEN_LINE in line]
    assert len(warnings) == 1 and " WARNING reef: listening on 0.0.0.0:" in warnings[0]


def test_with_a_token_it_starts_beyond_loopback_silently(tmp_path: Path, upstream):
    proc, url = start(tmp_path, upstream.url, "--reef.host", "0.0.0.0", env={"REEF_TOKEN": TOKEN})
    try:
        assert httpx.get(f"{url}/reef/status", timeout=10).status_code == 401
        status = httpx.get(f"{url}/reef/status", timeout=10, headers={"authorization": f"Bearer {TOKEN}"})
        assert status.json()["auth"] == {"required": True, "listening": "0.0.0.0", "loopback": False}
        shown = reef("status", "--url", url, env={"REEF_TOKEN": TOKEN})
        assert shown.exit_code == 0, shown.output
        assert "auth: on (token required)" in shown.stdout and "warning" not in shown.stdout
    finally:
        err = stop(proc)
    assert "auth: token required" in err
    assert "WARNING" not in err and "no token" not in err and TOKEN not in err


def test_on_loopback_status_says_auth_is_off_and_local(make_reef):
    daemon = make_reef()
    status = httpx.get(f"{daemon.url}/reef/status", timeout=10).json()
    assert status["auth"] == {"required": False, "listening": "127.0.0.1", "loopback": True}
    shown = reef("status", "--url", daemon.url)
    assert "auth: off (loopback only)" in shown.stdout and "warning" not in shown.stdout


def test_the_warning_repeats_on_the_interval_until_cancelled(monkeypatch, caplog):
    """The hourly repeat, with the module's interval shortened to nothing."""
    assert daemon_app.OPEN_WARNING_EVERY_S == 3600
    monkeypatch.setattr(daemon_app, "OPEN_WARNING_EVERY_S", 0)
    caplog.set_level(logging.WARNING, logger="reef")

    async def run() -> None:
        task = asyncio.create_task(daemon_app.warn_while_open("0.0.0.0", 8900))
        while len(caplog.records) < 3:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    messages = {record.getMessage() for record in caplog.records}
    assert len(messages) == 1 and "listening on 0.0.0.0:8900 with no token" in messages.pop()
