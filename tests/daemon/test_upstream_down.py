"""An upstream that is down: the client hears which upstream, by its address, and never its
credentials, in the envelope of the API it called."""

from __future__ import annotations

import socket

import httpx
import pytest

from reef_core.upstream.client import origin

SCENARIO = "down"
SECRET = "s3cret-upstream-pw"


@pytest.fixture
def closed_port() -> int:
    """A loopback port that nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ask(reef, route: str, *, stream: bool = False) -> httpx.Response:
    messages = [{"role": "user", "content": "hi"}]
    body = {"model": "m", "messages": messages, "stream": stream}
    if route == "/v1/messages":
        body["max_tokens"] = 16
    return httpx.post(f"{reef.url}{route}", json=body, headers={"x-reef-scenario": SCENARIO}, timeout=20)


def message_of(response: httpx.Response) -> str:
    return response.json()["error"]["message"]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/messages"])
def test_the_error_names_the_upstream_by_its_address(make_reef, closed_port, api, route):
    reef = make_reef("--inference.upstream-url", f"http://127.0.0.1:{closed_port}/v1", api=api)
    for stream in (False, True):
        answer = ask(reef, route, stream=stream)
        assert answer.status_code == 502, answer.text
        assert message_of(answer).startswith(f"upstream http://127.0.0.1:{closed_port} unreachable: ")
        if route == "/v1/messages":
            assert answer.json()["type"] == "error"  # Anthropic's envelope


def test_the_upstreams_credentials_never_reach_the_client(make_reef, closed_port):
    url = f"http://reef-user:{SECRET}@127.0.0.1:{closed_port}/v1?api_key={SECRET}"
    reef = make_reef("--inference.upstream-url", url)
    for route in ("/v1/chat/completions", "/v1/messages"):
        answer = ask(reef, route)
        assert answer.status_code == 502, answer.text
        assert f"upstream http://127.0.0.1:{closed_port} unreachable: " in message_of(answer)
        assert SECRET not in answer.text and "reef-user" not in answer.text


def test_origin_keeps_scheme_host_and_port_only():
    assert origin("http://u:p@127.0.0.1:11434/v1?key=k#f") == "http://127.0.0.1:11434"
    assert origin("https://api.example.com") == "https://api.example.com"
    assert origin("http://[::1]:8080/x") == "http://[::1]:8080"
    assert origin("http://host:notaport/") == "http://host"
