"""The model lent to recipes, asked for structured output, against the scripted upstream."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from reef_core.daemon.context import DAEMON
from reef_core.errors import UpstreamRejected
from reef_core.learning.model import CountingModel, ModelCaller
from tests.daemon.conftest import RunningReef
from tests.fakes.upstream import Error, ScriptedUpstream, Text, ToolCall

VERDICT = {
    "name": "verdict",
    "schema": {
        "type": "object",
        "properties": {"keep": {"type": "boolean"}, "reason": {"type": "string"}},
        "required": ["keep", "reason"],
    },
}
ASK = [{"role": "user", "content": "Keep this change?"}]


def lent_model(reef: RunningReef) -> ModelCaller:
    model = reef.app[DAEMON].learners.context.model
    assert model is not None
    return model


def bodies(upstream: ScriptedUpstream) -> list[dict[str, Any]]:
    return [r.body or {} for r in upstream.requests if r.method == "POST"]


def test_openai_upstream_gets_the_schema_as_response_format(make_reef, upstream: ScriptedUpstream) -> None:
    model = lent_model(make_reef())
    upstream.script(Text('{"keep": true, "reason": "shorter"}'))

    answer = model.complete(ASK, system="You review changes.", schema=VERDICT)

    assert json.loads(answer) == {"keep": True, "reason": "shorter"}
    [body] = bodies(upstream)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "verdict", "schema": VERDICT["schema"], "strict": False},
    }
    assert body["messages"][0] == {"role": "system", "content": "You review changes."}
    assert "tools" not in body


def test_anthropic_upstream_gets_a_forced_tool_and_its_input_is_the_answer(
    make_reef, upstream: ScriptedUpstream
) -> None:
    model = lent_model(make_reef(api="anthropic"))
    upstream.script(ToolCall("verdict", {"keep": False, "reason": "breaks the build"}, text="Let me answer."))

    answer = model.complete(ASK, system="You review changes.", schema=VERDICT)

    assert json.loads(answer) == {"keep": False, "reason": "breaks the build"}
    [request] = [r for r in upstream.requests if r.method == "POST"]
    assert request.path == "/v1/messages"
    body = request.body or {}
    assert body["tools"] == [
        {"name": "verdict", "description": "Answer with this tool.", "input_schema": VERDICT["schema"]}
    ]
    assert body["tool_choice"] == {"type": "tool", "name": "verdict"}
    assert body["system"] in ("You review changes.", [{"type": "text", "text": "You review changes."}])
    assert "response_format" not in body


def test_anthropic_answer_without_a_tool_call_falls_back_to_its_text(
    make_reef, upstream: ScriptedUpstream
) -> None:
    model = lent_model(make_reef(api="anthropic"))
    upstream.script(Text('{"keep": true, "reason": "fine"}'))

    assert json.loads(model.complete(ASK, schema=VERDICT)) == {"keep": True, "reason": "fine"}


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_schema_refused_with_400_is_retried_without_it_and_never_sent_again(
    make_reef, upstream: ScriptedUpstream, caplog: pytest.LogCaptureFixture, api: str
) -> None:
    model = lent_model(make_reef(api=api))
    upstream.script(Error(400, "response_format is not supported"), Text('{"keep": true, "reason": "a"}'))
    counted = CountingModel(model, limit=5)

    with caplog.at_level(logging.INFO, logger="reef_core.daemon.model_calls"):
        first = counted.complete(ASK, schema=VERDICT)
        upstream.script(Text('{"keep": false, "reason": "b"}'))
        second = counted.complete(ASK, schema=VERDICT)

    assert json.loads(first) == {"keep": True, "reason": "a"}
    assert json.loads(second) == {"keep": False, "reason": "b"}
    assert counted.calls == 2  # the retry is part of the call, not a call of its own
    refused, retried, later = bodies(upstream)
    assert ("response_format" in refused) if api == "openai" else ("tools" in refused)
    for body in (retried, later):
        assert "response_format" not in body and "tools" not in body and "tool_choice" not in body
    assert retried["messages"] == refused["messages"]
    said = [r for r in caplog.records if "refused a response schema" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO


def test_a_400_without_the_schema_too_is_raised_and_nothing_is_remembered(
    make_reef, upstream: ScriptedUpstream
) -> None:
    model = lent_model(make_reef())
    upstream.script(Error(400, "bad request"), Error(400, "bad request"))

    with pytest.raises(UpstreamRejected) as raised:
        model.complete(ASK, schema=VERDICT)
    assert raised.value.status == 400
    upstream.script(Text('{"keep": true, "reason": "c"}'))
    assert json.loads(model.complete(ASK, schema=VERDICT)) == {"keep": True, "reason": "c"}

    with_schema, without, next_call = bodies(upstream)
    assert "response_format" in with_schema
    assert "response_format" not in without
    assert "response_format" in next_call


def test_other_refusals_are_raised_without_a_retry(make_reef, upstream: ScriptedUpstream) -> None:
    model = lent_model(make_reef())
    upstream.script(Error(422, "unprocessable"))

    with pytest.raises(UpstreamRejected) as raised:
        model.complete(ASK, schema=VERDICT)

    assert raised.value.status == 422
    assert len(bodies(upstream)) == 1


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_without_a_schema_the_request_asks_for_nothing_more(
    make_reef, upstream: ScriptedUpstream, api: str
) -> None:
    counted = CountingModel(lent_model(make_reef(api=api)), limit=1)
    upstream.script(Text("plain words"))

    assert counted.complete(ASK) == "plain words"
    assert counted.calls == 1
    [body] = bodies(upstream)
    assert not {"response_format", "tools", "tool_choice"} & body.keys()
