"""What reef emits, read by the official SDKs: if they accept it, real clients will.

The SDKs' own stream accumulators (the code behind ``client.messages.stream`` and
``client.chat.completions.stream``) must build the same result as reef's assemblers.
Importing the anthropic SDK dominates this suite's run time (about 1.5 s).
"""

from __future__ import annotations

from typing import Any

import pytest

anthropic_types = pytest.importorskip("anthropic.types")
openai_chat = pytest.importorskip("openai.types.chat")

from anthropic.lib.streaming._messages import accumulate_event  # noqa: E402
from openai.lib.streaming.chat import ChatCompletionStreamState  # noqa: E402
from openai.types import Model as OpenAIModel  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402

from reef_core.wire import anthropic as wire_anthropic  # noqa: E402
from reef_core.wire.models import anthropic_models_to_openai, openai_models_to_anthropic  # noqa: E402
from reef_core.wire.openai import receipt_chunk  # noqa: E402
from reef_core.wire.translate import (  # noqa: E402
    AnthropicToOpenAIStream,
    OpenAIToAnthropicStream,
    anthropic_response_to_openai,
    openai_response_to_anthropic,
)
from tests.wire.test_responses import ANTHROPIC_MESSAGE, OPENAI_COMPLETION, OPENAI_MODELS  # noqa: E402
from tests.wire.test_streams import (  # noqa: E402
    ANTHROPIC_STREAM,
    OPENAI_STREAM,
    _assemble_anthropic,
    _assemble_openai,
)

ChatCompletion = openai_chat.ChatCompletion
ChatCompletionChunk = openai_chat.ChatCompletionChunk
StreamEvent: TypeAdapter[Any] = TypeAdapter(anthropic_types.RawMessageStreamEvent)


@pytest.mark.parametrize(
    "reason", ["end_turn", "stop_sequence", "max_tokens", "tool_use", "refusal", "pause_turn"]
)
def test_translated_anthropic_responses_validate(reason: str):
    body = {**ANTHROPIC_MESSAGE, "stop_reason": reason}
    ChatCompletion.model_validate(anthropic_response_to_openai(body, created=1))


@pytest.mark.parametrize("reason", ["stop", "length", "tool_calls", "function_call", "content_filter"])
def test_translated_openai_responses_validate(reason: str):
    choice = {**OPENAI_COMPLETION["choices"][0], "finish_reason": reason}
    anthropic_types.Message.model_validate(
        openai_response_to_anthropic({**OPENAI_COMPLETION, "choices": [choice]})
    )


def test_assembled_streams_validate():
    ChatCompletion.model_validate(_assemble_openai(OPENAI_STREAM))
    anthropic_types.Message.model_validate(_assemble_anthropic(ANTHROPIC_STREAM).result())


def test_openai_sdk_reads_translated_chunks_and_the_receipt_like_reef_does():
    stream = AnthropicToOpenAIStream("claude-sonnet-4-5", created=1700000000)
    chunks = [chunk for event, data in ANTHROPIC_STREAM for chunk in stream.feed(event, data)]
    # the receipt copies the last chunk: the SDK takes usage from whichever chunk came last
    chunks.append(receipt_chunk(chunks[-1], "rec_0193a1b2c3d4e5f60718293a4b5c"))
    state = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    final = state.get_final_completion()
    ours = _assemble_openai(chunks)
    message = ours["choices"][0]["message"]
    assert final.choices[0].message.content == message["content"]
    assert final.choices[0].finish_reason == ours["choices"][0]["finish_reason"]
    calls = final.choices[0].message.tool_calls or []
    assert [(c.id, c.function.name, c.function.arguments) for c in calls] == [  # type: ignore[union-attr]
        (c["id"], c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]
    ]
    assert final.usage is not None and final.usage.model_dump(exclude_none=True) == ours["usage"]
    assert ChatCompletionChunk.model_validate(chunks[-1]).model_extra == {
        "reef": {"agent_record_id": "rec_0193a1b2c3d4e5f60718293a4b5c"}
    }


def test_anthropic_sdk_reads_translated_events_and_the_receipt_like_reef_does():
    stream = OpenAIToAnthropicStream("gpt-4o-2024-08-06")
    events = [event for chunk in OPENAI_STREAM for event in stream.feed(chunk)] + stream.finish()
    name, data = events[-1]
    events[-1] = (name, wire_anthropic.with_receipt(data, "rec_1"))
    snapshot = None
    buffers: dict[int, bytes] = {}
    for name, data in events:
        event = StreamEvent.validate_python(data)
        assert event.type == name
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=buffers)
    assert snapshot is not None
    ours = anthropic_types.Message.model_validate(_assemble_anthropic(events).result())
    assert snapshot.model_dump(exclude_none=True) == ours.model_dump(exclude_none=True)


def test_model_lists_and_error_bodies_validate():
    for model in openai_models_to_anthropic(OPENAI_MODELS)["data"]:
        anthropic_types.ModelInfo.model_validate(model)
    page = openai_models_to_anthropic(OPENAI_MODELS)
    for model in anthropic_models_to_openai(page)["data"]:
        OpenAIModel.model_validate(model)
    anthropic_types.ErrorResponse.model_validate(wire_anthropic.error_body("nope", "overloaded_error"))
