"""`reef serve` as a real process: it starts, answers, stops cleanly, and a SIGKILL loses no receipt."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import httpx
import pytest

from reef_core.store import Store
from reef_core.store.packer import wait_for_repack
from tests.conftest import git
from tests.store.procs import descriptors

REEF = str(Path(sys.executable).with_name("reef"))
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a socket that listens on ``port`` (any local address)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in (line.split() for line in Path(table).read_text().splitlines()[1:]):
            if row[1].endswith(f":{port:04X}") and row[3] == "0A":  # 0A: LISTEN
                inodes.add(f"socket:[{row[9]}]")
    return bool(inodes & set(descriptors(pid)))


def start(
    tmp_path: Path,
    upstream_url: str,
    *flags: str,
    env: dict[str, str] | None = None,
    log: IO[str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
):
    """A real ``reef serve`` on a free port, once healthy; its output piped, or to ``log``.

    The port was free when it was picked, but another worker's daemon may bind it before this
    one does: then this daemon exits ("address in use") while the other answers on the port, so
    the port counts only once this process is the one listening on it, and a lost port is
    picked again."""
    for _ in range(3):
        port = free_port()
        proc = subprocess.Popen(
            [
                REEF,
                "serve",
                "--reef.port",
                str(port),
                "--storage.state-dir",
                str(tmp_path / "state"),
                "--inference.upstream-url",
                upstream_url,
                *flags,
            ],
            stdout=log or subprocess.PIPE,
            stderr=subprocess.STDOUT if log else subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
            preexec_fn=preexec_fn,
        )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"{url}/healthz", timeout=0.5).status_code == 200 and listening(proc.pid, port):
                    return proc, url
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        said = "" if proc.poll() is None else _said(proc, log)  # still starting: read once killed
        if "address already in use" not in said:
            break
    pytest.fail(f"reef serve did not start: {said or _said(proc, log)}")


def _said(proc: subprocess.Popen, log: IO[str] | None) -> str:
    """What a daemon wrote, once it is gone (killed if it was not): its stderr, or its log."""
    proc.kill()
    if log is None:
        return proc.communicate()[1]
    proc.wait(10)
    log.flush()
    return Path(log.name).read_text()


def test_serve_answers_and_stops_cleanly_on_sigterm(tmp_path, upstream):
    proc, url = start(tmp_path, upstream.url, env={"REEF_TOKEN": "tok-abcdef-123456"})
    try:
        response = httpx.post(
            f"{url}/v1/chat/completions",
            json=CHAT,
            timeout=10,
            headers={"x-reef-scenario": "p", "Authorization": "Bearer tok-abcdef-123456"},
        )
        assert response.status_code == 200
        receipt = response.headers["x-reef-agent-record-id"]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "serving on" in err and "tok-abcdef-123456" not in err  # tokens never reach the log
    assert Store(tmp_path / "state").reader("p").data.get(receipt).id == receipt
    git("-C", str(tmp_path / "state" / "scenarios" / "p.git"), "fsck", "--strict", "--no-dangling")


def test_start_never_mistakes_another_daemon_on_its_port_for_its_own(
    tmp_path, upstream, make_reef, monkeypatch
):
    """The race the suite's workers can lose: the port ``start`` picked is bound by another
    daemon (here an in-process one, answering /healthz) before ``reef serve`` binds it."""
    other = make_reef()
    taken = int(other.url.rsplit(":", 1)[1])
    ports = iter([taken, free_port()])
    monkeypatch.setattr(sys.modules[__name__], "free_port", lambda: next(ports))
    proc, url = start(tmp_path, upstream.url)
    try:
        assert url != other.url and listening(proc.pid, int(url.rsplit(":", 1)[1]))
        assert not listening(proc.pid, taken)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_a_taken_port_is_one_clear_line(tmp_path, upstream):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result = subprocess.run(
            [
                REEF,
                "serve",
                "--reef.port",
                str(port),
                "--storage.state-dir",
                str(tmp_path),
                "--inference.upstream-url",
                upstream.url,
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_sigkill_under_load_loses_no_returned_receipt(tmp_path, upstream):
    proc, url = start(tmp_path, upstream.url)
    receipts: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(n: int) -> None:
        with httpx.Client(timeout=5) as http:
            while not stop.is_set():
                try:
                    r = http.post(f"{url}/v1/chat/completions", json=CHAT, headers={"x-reef-scenario": "k"})
                except httpx.HTTPError:
                    return  # the daemon is gone
                if r.status_code == 200:
                    with lock:
                        receipts.append(r.headers["x-reef-agent-record-id"])

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60  # a busy CI machine answers slowly; kill under load, not by the clock
    while time.monotonic() < deadline:
        with lock:
            if len(receipts) > 40:
                break
        time.sleep(0.02)
    proc.kill()
    proc.communicate()
    stop.set()
    for t in threads:
        t.join()
    assert len(receipts) > 20
    repo = tmp_path / "state" / "scenarios" / "k.git"
    wait_for_repack(repo)
    git("-C", str(repo), "fsck", "--strict", "--no-dangling")
    with Store(tmp_path / "state").open("k") as scenario:  # the next daemon's view
        missing = [r for r in receipts if not scenario.data.exists(r)]
        assert missing == []
        assert scenario.data.counts()["record"] >= len(receipts)
