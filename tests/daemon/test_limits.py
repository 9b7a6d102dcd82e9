"""The daemon's caps, tried as an attacker or a runaway client would (issue 44, part 6).

Each refusal names the setting that raises it, and changes nothing: no scenario past
``storage.max-scenarios``, no answer read past ``inference.max-answer-bytes`` (a gzip bomb
included), no connection held open by a client that never finishes its request head
(``reef.header-timeout-s``), and a bearer that is not UTF-8 is a 401, not a 500.
"""

from __future__ import annotations

import gzip
import json
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cli.support import chat
from tests.daemon.test_process import start
from tests.fakes.fixed import FixedServer
from tests.fakes.upstream import ScriptedUpstream, Text

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _post(reef, scenario: str, **kwargs) -> httpx.Response:
    return httpx.post(
        f"{reef.url}/v1/chat/completions",
        json=CHAT,
        headers={"x-reef-scenario": scenario},
        timeout=30,
        **kwargs,
    )


def test_a_scenario_past_the_cap_is_refused_naming_the_setting(make_reef, upstream):
    reef = make_reef("--storage.max-scenarios", "2")
    chat(reef, "first")
    chat(reef, "second")

    refused = _post(reef, "third")
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert error["code"] == "limit_reached" and "storage.max-scenarios" in error["message"]
    created = httpx.post(f"{reef.url}/reef/scenarios", json={"name": "fourth"}, timeout=10)
    assert created.status_code == 403 and "storage.max-scenarios" in created.text
    scenarios = sorted(p.name for p in (reef.state_dir / "scenarios").iterdir() if not p.name.startswith("."))
    assert scenarios == ["first.git", "second.git"]  # nothing half-made for the refused ones
    assert chat(reef, "first")  # the scenarios within the cap keep working


def test_concurrent_creations_at_the_cap_make_no_more_than_it(make_reef, upstream):
    reef = make_reef("--storage.max-scenarios", "3")
    statuses: list[int] = []

    def one(n: int) -> None:
        statuses.append(_post(reef, f"s{n}").status_code)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [200] * 3 + [403] * 5
    assert len([p for p in (reef.state_dir / "scenarios").glob("*.git")]) == 3


def test_a_bearer_that_is_not_utf8_is_a_401(make_reef, upstream):
    reef = make_reef(env={"REEF_TOKEN": "tok-limits-123456"})
    for value in (b"Bearer \xff\xfe", b"Bearer \xc3(", b"\xff\xfe"):
        answer = httpx.post(
            f"{reef.url}/v1/chat/completions",
            json=CHAT,
            headers={"x-reef-scenario": "s", "Authorization": value},
            timeout=10,
        )
        assert answer.status_code == 401, (value, answer.text)
    page = httpx.get(f"{reef.url}/reef/harness/releases/1/page?scenario=s&key=%FF%FE", timeout=10)
    assert page.status_code in (401, 404)
    assert not (reef.state_dir / "scenarios" / "s.git").exists()


def test_an_upstream_answer_past_the_cap_is_a_502_naming_the_setting(make_reef, upstream):
    reef = make_reef("--inference.max-answer-bytes", "4000")
    upstream.script(Text("word " * 2000))
    answer = _post(reef, "s")
    assert answer.status_code == 502
    assert answer.json()["error"]["code"] == "upstream_too_large"
    assert "inference.max-answer-bytes" in answer.json()["error"]["message"]

    upstream.script(Text("word " * 2000))
    streamed = httpx.post(
        f"{reef.url}/v1/chat/completions",
        json={**CHAT, "stream": True},
        headers={"x-reef-scenario": "s"},
        timeout=30,
    )
    text = "".join(
        (json.loads(line[6:])["choices"] or [{}])[0].get("delta", {}).get("content") or ""
        for line in streamed.text.splitlines()
        if line.startswith("data: {") and '"choices"' in line
    )
    assert len(text) < 4000  # cut off: never the whole 10,000 characters
    last = json.loads([line for line in streamed.text.splitlines() if line.startswith("data: {")][-1][6:])
    assert "inference.max-answer-bytes" in last["error"]["message"]  # the stream ends saying why

    upstream.script(Text("a short answer"))
    assert _post(reef, "s").status_code == 200  # answers within the cap still pass


@pytest.fixture
def gzip_bomb() -> Iterator[str]:
    """An upstream whose answer is 64 MB of JSON that travels as about 64 KB of gzip."""
    body = gzip.compress(b'{"id": "x", "choices": [], "pad": "' + b" " * 64_000_000 + b'"}', 9)
    assert len(body) < 200_000

    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    with FixedServer(body, headers) as bomb:
        yield f"http://127.0.0.1:{bomb.port}"


def test_a_compressed_answer_is_capped_once_decoded(tmp_path: Path, gzip_bomb: str):
    from tests.daemon.conftest import RunningReef

    reef = RunningReef(
        tmp_path, "--inference.upstream-url", gzip_bomb, "--inference.max-answer-bytes", "1000000"
    ).start()
    try:
        answer = _post(reef, "s")
    finally:
        reef.stop()
    assert answer.status_code == 502 and answer.json()["error"]["code"] == "upstream_too_large"


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the daemon closes ``sock`` before ``seconds`` pass (it sends nothing first)."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1024) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_a_request_head_that_never_ends_is_cut_off(tmp_path: Path, upstream: ScriptedUpstream):
    proc, url = start(tmp_path, upstream.url, "--reef.header-timeout-s", "1")
    port = int(url.rsplit(":", 1)[1])
    try:
        dribbling = socket.create_connection(("127.0.0.1", port))
        dribbling.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nx-reef-scenario: s\r\n")
        silent = socket.create_connection(("127.0.0.1", port))
        # 1 s is the setting; 30 s only bounds the wait (before: aiohttp's 3630 s)
        assert _closed_within(dribbling, 30)
        assert _closed_within(silent, 30)
        dribbling.close()
        silent.close()
        assert (
            httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers={"x-reef-scenario": "s"}).status_code
            == 200
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
