"""The requests the real harnesses sent, replayed against each kind of upstream.

``tests/fixtures/harness_requests/<harness>-<version>/`` holds, per harness and version reef
supports, the agent's first turn (``first.json``: the model is offered the harness's tools) and
the turn carrying a tool's result (``tool_result.json``), as reef recorded them from the real
binary (``scripts/capture_harness_requests.sh`` made them; their README says how).  Each is
sent to a real daemon on the route the harness used, streamed as the harness streamed it and
once not streamed, with the harness's own client (the official ``openai`` or ``anthropic``
SDK, which parses the answer as the harness's format defines it), in front of an upstream
that speaks OpenAI chat completions only, OpenAI with the Responses API, or Anthropic messages
only.  To the first turn the model answers by calling one of the harness's tools (Codex's
namespaced ``spawn_agent`` where the upstream has no Responses API), to the second with text.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.adapters.test_matrix import MARKER, UPSTREAMS  # the captures' marker, the upstream kinds
from tests.fakes.upstream import ScriptedUpstream, Text, ToolCall, tool_results

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "harness_requests"
CELLS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
SCENARIO = "fixtures"
SPEAKS = {"chat": "/v1/chat/completions", "responses": "/v1/chat/completions", "anthropic": "/v1/messages"}


def fixture(cell: str, turn: str) -> dict[str, Any]:
    return json.loads((FIXTURES / cell / f"{turn}.json").read_text())


def test_every_supported_harness_has_its_fixtures():
    assert CELLS == ["claude-2.1.332", "codex-0.171.0", "opencode-1.18.33", "pi-0.73.1", "pi-1.6.0"]
    for cell in CELLS:
        first, second = fixture(cell, "first"), fixture(cell, "tool_result")
        assert first["stream"] and second["stream"]  # every harness streams every turn
        assert MARKER not in json.dumps(first) and MARKER in json.dumps(second)


def called_tool(cell: str, request: dict[str, Any], kind: str) -> tuple[str, str | None, str]:
    """The tool the model calls: (the name the upstream sees, the namespace the harness
    should get back, the name it should get back)."""
    tools = request["tools"]
    if cell.startswith("codex") and kind != "responses":
        [space] = [t for t in tools if t["type"] == "namespace"]
        inner = space["tools"][0]["name"]
        return f"{space['name']}__{inner}", space["name"], inner
    first = tools[0]
    name = first["function"]["name"] if "function" in first else first["name"]
    return name, None, name


def split(create: Any, body: dict[str, Any]) -> dict[str, Any]:
    """The body as keyword arguments of an SDK's ``create``: what it does not name goes in
    ``extra_body``, as sent."""
    known = inspect.signature(create).parameters
    kwargs = {k: v for k, v in body.items() if k in known}
    extra = {k: v for k, v in body.items() if k not in known}
    return {**kwargs, "extra_body": extra} if extra else kwargs


def ask(reef_url: str, record: dict[str, Any], body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """Send ``body`` as the harness sent it, with its format's SDK; the answer's tool calls
    as ``{name, namespace?, arguments}`` and its text."""
    headers = {
        "x-reef-scenario": SCENARIO,
        "x-reef-harness": record["harness"],
        "x-reef-tag-session": "replay",
    }
    stream = body.get("stream") is True
    if record["route"] == "messages":
        client = anthropic.Anthropic(
            base_url=reef_url, api_key="k", max_retries=0, timeout=30, default_headers=headers
        )
        if stream:
            beta = client.beta.messages
            rest = {k: v for k, v in body.items() if k != "stream"}
            with beta.stream(**split(beta.stream, rest)) as s:
                message = s.get_final_message()
        else:
            message = client.beta.messages.create(**split(client.beta.messages.create, body))
        blocks = [b.to_dict() for b in message.content]
        calls = [{"name": b["name"], "arguments": b["input"]} for b in blocks if b["type"] == "tool_use"]
        return calls, "".join(b["text"] for b in blocks if b["type"] == "text")
    client = openai.OpenAI(
        base_url=f"{reef_url}/v1", api_key="k", max_retries=0, timeout=30, default_headers=headers
    )
    if record["route"] == "responses":
        if stream:
            events = list(client.responses.create(**split(client.responses.create, body)))
            assert events[-1].type == "response.completed"
            response = events[-1].response
        else:
            response = client.responses.create(**split(client.responses.create, body))
        items = [item.to_dict() for item in response.output]
        calls = [
            {k: i[k] for k in ("name", "namespace", "arguments") if k in i}
            for i in items
            if i["type"] == "function_call"
        ]
        return calls, response.output_text
    create = client.chat.completions.create
    if stream:
        calls_by_index: dict[int, dict[str, Any]] = {}
        text = []
        for chunk in create(**split(create, body)):
            for choice in chunk.choices:
                text.append(choice.delta.content or "")
                for call in choice.delta.tool_calls or []:
                    got = calls_by_index.setdefault(call.index, {"name": "", "arguments": ""})
                    if call.function is not None:
                        got["name"] += call.function.name or ""
                        got["arguments"] += call.function.arguments or ""
        return list(calls_by_index.values()), "".join(text)
    message = create(**split(create, body)).choices[0].message
    calls = [{"name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls or []]
    return calls, message.content or ""


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("kind", list(UPSTREAMS))
@pytest.mark.parametrize("cell", CELLS)
def test_a_harness_s_real_turns_are_answered_in_its_format_through_each_kind_of_upstream(
    make_reef, upstream: ScriptedUpstream, cell: str, kind: str, streamed: bool
):
    api, upstream.responses_api = UPSTREAMS[kind]
    reef = make_reef(api=api)
    first, second = fixture(cell, "first"), fixture(cell, "tool_result")
    forwarded = cell.startswith("codex") and kind == "responses"
    upstream_name, namespace, name = called_tool(cell, first["request"], kind)
    upstream.script(
        ToolCall(upstream_name, {"path": "notes.txt"}, call_id="call_fx"), Text(f"It says {MARKER}.")
    )

    def body(record: dict[str, Any]) -> dict[str, Any]:
        sent = dict(record["request"])
        if not streamed:
            sent["stream"] = False
            sent.pop("stream_options", None)
        return sent

    calls, _ = ask(reef.url, first, body(first))
    [call] = calls
    assert call["name"] == name and call.get("namespace") == namespace
    given = call["arguments"]  # a JSON string (OpenAI's formats) or an object (Anthropic's)
    assert (json.loads(given) if isinstance(given, str) else given) == {"path": "notes.txt"}
    calls, text = ask(reef.url, second, body(second))
    assert calls == [] and text == f"It says {MARKER}."
    # the upstream got the harness's tool result in its own format, on the one API it speaks
    inference = [r for r in upstream.requests if r.method == "POST"]
    if kind == "chat" and first["route"] == "responses":  # asked once, answered 404
        assert inference[0].path == "/v1/responses"
        inference = inference[1:]
    assert {r.path for r in inference} == {"/v1/responses" if forwarded else SPEAKS[kind]}
    assert any(MARKER in out for out in tool_results(inference[-1].path, inference[-1].body))
    # every turn is on the record, complete, as the harness sent it, with its session
    listed = httpx.get(f"{reef.url}/reef/scenarios/{SCENARIO}/records", params={"limit": 10}).json()[
        "records"
    ]
    assert [(r["complete"], r["status"], r["harness"]) for r in listed] == [(True, 200, first["harness"])] * 2
    assert [r["request"] for r in listed] == [body(first), body(second)]
    assert {r["tags"]["session"] for r in listed} == {"replay"}
    left = [x["kind"] for r in listed for x in r.get("left_out", [])]
    assert ("web_search" in left) == (cell.startswith("codex") and not forwarded)
