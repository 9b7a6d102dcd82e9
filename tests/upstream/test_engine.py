"""The base every in-process engine shares (``reef_core.upstream.engine``), on a scripted engine
with no model: the routes, the request checks, the answer and its stream, the token record, and
the swap under the decoding lock."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pytest

from reef_core.errors import InvalidInput, UpstreamRejected, UpstreamUnavailable
from reef_core.upstream.engine import Answer, Emit, Engine

CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "hi"}]


@dataclass(frozen=True)
class Served:
    text: str
    version: int


class Scripted(Engine[Served]):
    """Answers with what the scenario is served, one piece per word; ``fail`` breaks the answer
    after its first piece."""

    label = "the scripted model"
    id_prefix = "chatcmpl-test"
    default_new_tokens = 8
    max_new_tokens = 32
    lowest_temperature = 0.5
    temperature_error = "the scripted model samples at a temperature from 0.5 to 2"

    def __init__(self) -> None:
        super().__init__("scripted", Served("the base answer", 0))
        self.fail: Exception | None = None

    def _prompt(self, request: dict[str, Any]) -> list[int]:
        return [len(str(m.get("content", ""))) for m in request["messages"] or []]

    def _origin(self) -> dict[str, Any]:
        return {"engine": "scripted"}

    def _submit(self, request: dict[str, Any], *, scenario: str | None, emit: Emit | None) -> Future[Answer]:
        done: Future[Answer] = Future()

        def run() -> None:
            with self._lock:
                served = self._serving(scenario)
            words = served.text.split(" ")[: request["max_tokens"]]
            for i, word in enumerate(words):
                if emit is not None:
                    emit(word if i == 0 else " " + word)
                if self.fail is not None:
                    done.set_exception(self.fail)
                    return
            tokens = list(range(len(words)))
            record = self._record(request["prompt"], tokens, [-0.1234567] * len(words), 1.0, served.version)
            done.set_result(Answer(" ".join(words), "stop", record))

        threading.Thread(target=run).start()
        return done

    def serve(self, scenario: str, text: str, version: int) -> float:
        return self._swap(scenario, lambda old: Served(text, version))

    async def close(self) -> None:
        pass


def body(**fields: Any) -> bytes:
    return json.dumps({"messages": HELLO, **fields}).encode()


def ask(engine: Engine[Any], scenario: str | None = None, **fields: Any) -> tuple[dict[str, Any], Any]:
    reply = asyncio.run(engine.request("POST", CHAT, headers={}, body=body(**fields), scenario=scenario))
    assert reply.status == 200 and reply.content_type == "application/json"
    return json.loads(reply.body), reply.extras


def stream(engine: Engine[Any], scenario: str | None = None, **fields: Any) -> tuple[list[Any], Any]:
    async def run() -> tuple[list[Any], Any]:
        opened = await engine.stream(CHAT, headers={}, body=body(stream=True, **fields), scenario=scenario)
        events = [event async for event in opened.chunks()]
        assert events[-1] == b"data: [DONE]\n\n"
        return [json.loads(e[len(b"data: ") :]) for e in events[:-1]], opened.extras

    return asyncio.run(run())


def text_of(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])


def test_an_answer_is_an_openai_completion_with_its_token_record():
    engine = Scripted()
    answer, extras = ask(engine)
    assert answer["id"] == "chatcmpl-test-1" and answer["object"] == "chat.completion"
    assert answer["model"] == "scripted"
    [choice] = answer["choices"]
    assert choice["message"] == {"role": "assistant", "content": "the base answer"}
    assert choice["finish_reason"] == "stop"
    assert answer["usage"] == {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4}
    assert extras == {
        "engine": "scripted",
        "prompt_ids": [2],
        "response_ids": [0, 1, 2],
        "logprobs": [-0.123457] * 3,
        "temperature": 1.0,
        "weight_version": 0,
    }
    again, _ = ask(engine, model="asked-for")
    assert again["id"] == "chatcmpl-test-2" and again["model"] == "asked-for"


def test_a_stream_sends_the_same_answer_piece_by_piece_then_the_finish_and_usage():
    engine = Scripted()
    answer, extras = ask(engine)
    chunks, streamed = stream(engine, stream_options={"include_usage": True})
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [c["choices"][0]["delta"] for c in chunks[1:4]] == [
        {"content": "the"},
        {"content": " base"},
        {"content": " answer"},
    ]
    assert chunks[4]["choices"] == [{"index": 0, "delta": {}, "finish_reason": "stop"}]
    assert chunks[5]["choices"] == [] and chunks[5]["usage"] == answer["usage"]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert text_of(chunks) == answer["choices"][0]["message"]["content"]
    assert streamed == extras
    without_usage, _ = stream(engine)
    assert "usage" not in without_usage[-1]


def test_an_answer_that_fails_mid_stream_ends_the_stream_with_its_error():
    engine = Scripted()
    engine.fail = UpstreamUnavailable("the model broke")

    async def run() -> list[bytes]:
        opened = await engine.stream(CHAT, headers={}, body=body(stream=True))
        events = []
        with pytest.raises(UpstreamUnavailable, match="the model broke"):
            async for event in opened.chunks():
                events.append(event)
        return events

    events = asyncio.run(run())
    assert len(events) == 2  # the role, the one piece sent before the failure


def test_the_models_route_lists_the_one_model_and_other_routes_are_404s_naming_the_engine():
    engine = Scripted()
    listing = asyncio.run(engine.request("GET", "/v1/models", headers={}))
    assert json.loads(listing.body)["data"] == [
        {"id": "scripted", "object": "model", "created": 0, "owned_by": "reef"}
    ]
    with pytest.raises(
        UpstreamRejected, match="the scripted model does not serve POST /v1/embeddings"
    ) as refused:
        asyncio.run(engine.request("POST", "/v1/embeddings", headers={}, body=b"{}"))
    assert refused.value.status == 404
    with pytest.raises(UpstreamRejected, match="does not serve GET /v1/chat/completions"):
        asyncio.run(engine.request("GET", CHAT, headers={}))
    with pytest.raises(UpstreamRejected, match="does not serve POST /v1/responses"):
        asyncio.run(engine.stream("/v1/responses", headers={}, body=b"{}"))


@pytest.mark.parametrize(
    ("sent", "field", "message"),
    [
        (b"{", "body", "not valid JSON"),
        (b"[]", "body", "must be a JSON object"),
        (body(max_tokens=0), "max_tokens", "positive whole number"),
        (body(max_tokens=True), "max_tokens", "positive whole number"),
        (body(temperature=0.1), "temperature", "the scripted model samples at a temperature from 0.5 to 2"),
        (body(temperature=2.5), "temperature", "from 0.5 to 2"),
        (body(n=2), "n", "the scripted model answers one choice per request"),
        (body(seed="x"), "seed", "whole number"),
    ],
)
def test_a_request_the_engine_cannot_take_is_refused_before_anything_streams(sent, field, message):
    engine = Scripted()
    for call in (
        engine.request("POST", CHAT, headers={}, body=sent),
        engine.stream(CHAT, headers={}, body=sent),
    ):
        with pytest.raises(InvalidInput, match=message) as refused:
            asyncio.run(call)
        assert refused.value.field == field


def test_max_tokens_is_capped_at_the_engines_most_and_defaults_to_its_default():
    engine = Scripted()
    assert engine._parse(body(max_tokens=1000))["max_tokens"] == 32
    assert engine._parse(body(max_completion_tokens=3, max_tokens=9))["max_tokens"] == 3
    assert engine._parse(body())["max_tokens"] == 8


def test_a_swap_serves_the_scenario_from_the_next_answer_and_leaves_the_others():
    engine = Scripted()
    assert engine.version("a") == 0
    assert engine.serve("a", "a release", 3) >= 0
    assert engine.version("a") == 3 and engine.version("b") == 0 and engine.version(None) == 0
    answer, extras = ask(engine, "a")
    assert answer["choices"][0]["message"]["content"] == "a release" and extras["weight_version"] == 3
    answer, extras = ask(engine, "b")
    assert answer["choices"][0]["message"]["content"] == "the base answer" and extras["weight_version"] == 0


def test_a_swap_that_fails_leaves_what_was_served():
    engine = Scripted()
    engine.serve("a", "first", 1)

    def refuse(old: Served) -> Served:
        raise InvalidInput("does not fit")

    with pytest.raises(InvalidInput):
        engine._swap("a", refuse)
    assert engine.version("a") == 1


def test_a_swap_waits_for_the_answer_in_flight():
    engine = Scripted()
    engine._lock.acquire()  # an answer decoding
    swapped = threading.Event()
    seconds: list[float] = []

    def swap() -> None:
        seconds.append(engine.serve("a", "new", 2))
        swapped.set()

    threading.Thread(target=swap).start()
    time.sleep(0.05)
    assert not swapped.is_set() and engine.version("a") == 0
    engine._lock.release()
    assert swapped.wait(5)
    assert engine.version("a") == 2 and seconds[0] >= 0.05
