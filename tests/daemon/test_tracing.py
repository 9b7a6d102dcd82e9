"""Traces (``ops.otlp-endpoint``) reach a real OTLP/HTTP receiver on loopback, decoded with
OpenTelemetry's own protobuf messages: a request's span with its parts as children, the trace id
in the record, a learning step's span with its checks; a collector that is down costs nothing
but a log line a minute."""

from __future__ import annotations

import logging
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.conftest import wait_for
from tests.fakes.upstream import ScriptedUpstream

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
H = {"x-reef-scenario": "s"}


class Receiver:
    """An OTLP/HTTP trace receiver: every span it was sent, as dicts."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        spans = self.spans

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            spans.append(
                                {
                                    "name": span.name,
                                    "trace_id": span.trace_id.hex(),
                                    "span_id": span.span_id.hex(),
                                    "parent": span.parent_span_id.hex(),
                                    "attributes": {a.key: _value(a.value) for a in span.attributes},
                                }
                            )
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def named(self, name: str) -> list[dict[str, Any]]:
        return [span for span in self.spans if span["name"] == name]


def _value(value: Any) -> Any:
    return getattr(value, value.WhichOneof("value"))


@pytest.fixture
def receiver():
    running = Receiver()
    yield running
    running.server.shutdown()


def test_a_request_s_spans_reach_the_collector_with_their_parents_and_the_record_names_its_trace(
    make_reef, upstream: ScriptedUpstream, receiver: Receiver
):
    reef = make_reef(
        "--ops.otlp-endpoint", receiver.url, "--recipe.implementation", "tests.cli.recipes:AskRecipe"
    )
    plain = httpx.post(f"{reef.url}/v1/chat/completions", json=CHAT, headers=H, timeout=10)
    receipt = plain.headers["x-reef-agent-record-id"]
    with httpx.stream(
        "POST", f"{reef.url}/v1/chat/completions", json={**CHAT, "stream": True}, headers=H, timeout=10
    ) as streamed:
        assert [line for line in streamed.iter_lines() if line]
    assert httpx.post(f"{reef.url}/reef/train", json={"text": "be brief"}, headers=H).status_code == 200
    assert wait_for(lambda: reef.reader("s").releases.tip() is not None, timeout=30)
    reef.stop()  # the spans still queued go out at shutdown

    servers = receiver.named("POST /v1/chat/completions")
    assert len(servers) == 2 and all(s["attributes"]["http.response.status_code"] == 200 for s in servers)
    record = reef.reader("s").data.get(receipt).data
    [first] = [s for s in servers if s["trace_id"] == record["trace_id"]]  # the record leads to its trace
    children = {s["name"] for s in receiver.spans if s["parent"] == first["span_id"]}
    assert children == {"parse", "upstream", "relay", "record"}
    [other] = [s for s in servers if s is not first]
    streamed_children = {s["name"] for s in receiver.spans if s["parent"] == other["span_id"]}
    assert streamed_children == {"parse", "upstream connect", "relay", "record"}
    [step] = receiver.named("learning step")
    assert step["attributes"]["reef.verdict"] == "selected" and step["attributes"]["reef.scenario"] == "s"
    checks = [s for s in receiver.spans if s["parent"] == step["span_id"]]
    assert checks and all(s["name"].startswith("check ") for s in checks)
    assert all(s["trace_id"] == step["trace_id"] for s in checks)


def test_a_collector_that_is_down_fails_no_request_and_is_said_once(
    make_reef, upstream: ScriptedUpstream, caplog: pytest.LogCaptureFixture
):
    with socket.socket() as nobody:  # bound, never listening: every export is refused
        nobody.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{nobody.getsockname()[1]}"
        reef = make_reef("--ops.otlp-endpoint", down)
        with caplog.at_level(logging.WARNING, logger="reef_core.daemon.tracing"):
            for _ in range(20):
                answered = httpx.post(f"{reef.url}/v1/chat/completions", json=CHAT, headers=H, timeout=10)
                assert answered.status_code == 200
            reef.stop()
    said = [r.getMessage() for r in caplog.records if r.name == "reef_core.daemon.tracing"]
    assert len(said) == 1 and "could not be sent to the OTLP endpoint" in said[0], said
    assert len(list(reef.reader("s").data.iter_items(["record"]))) == 20  # every exchange recorded


def test_an_endpoint_that_is_no_url_or_without_the_sdk_stops_the_start_naming_it(tmp_path, monkeypatch):
    from reef_core.config import load_settings
    from reef_core.daemon.tracing import Tracing
    from reef_core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"ops\.otlp-endpoint"):
        load_settings(overrides=["--ops.otlp-endpoint", "not a url"], env={}, cwd=tmp_path)
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if the extra were not installed
    with pytest.raises(ConfigError, match=r"pip install 'reef\[otel\]'"):
        Tracing("http://127.0.0.1:4318")
