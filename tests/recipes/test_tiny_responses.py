"""The embedded model behind the Responses API: reef translates to chat completions, which is
all the engine speaks; embeddings it does not serve are its 404."""

from __future__ import annotations

import openai
import pytest

S = "resp"


def _client(reef) -> openai.OpenAI:
    headers = {"x-reef-scenario": S}
    return openai.OpenAI(
        base_url=f"{reef.url}/v1", api_key="k", max_retries=0, timeout=60, default_headers=headers
    )


def test_responses_on_the_embedded_model_stream_and_not(tiny_reef):
    reef = tiny_reef()
    client = _client(reef)
    raw = client.responses.with_raw_response.create(model="tiny", input="the cat", max_output_tokens=8)
    answer = raw.parse()
    receipt = raw.headers["x-reef-agent-record-id"]
    assert answer.object == "response" and answer.status in ("completed", "incomplete")
    assert [item.type for item in answer.output] == ["message"]
    record = reef.reader(S).data.get(receipt).data
    assert record["route"] == "responses" and record["response"]["id"] == answer.id
    events = list(client.responses.create(model="tiny", input="the dog", max_output_tokens=8, stream=True))
    assert events[0].type == "response.created"
    last = events[-1]  # 8 tokens may cut the answer short: incomplete, as OpenAI says it
    assert last.type in ("response.completed", "response.incomplete")
    streamed = reef.reader(S).data.get(last.reef["agent_record_id"]).data  # type: ignore[union-attr]
    assert streamed["stream"] is True and streamed["complete"] is True
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert streamed["response"]["output"][0]["content"][0]["text"] == text


def test_embeddings_on_the_embedded_model_are_its_404(tiny_reef):
    reef = tiny_reef()
    with pytest.raises(openai.NotFoundError):
        _client(reef).embeddings.create(model="tiny", input="x")
