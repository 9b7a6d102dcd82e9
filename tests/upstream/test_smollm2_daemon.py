"""``reef serve --inference.model-path builtin:smollm2``: the real model through the official SDKs,
recorded with its token ids and log-probs; and a model path reef cannot serve, refused at start.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from tests.daemon.conftest import RunningReef
from tests.upstream.smollm2 import model_cache, smollm2

__all__ = ["model_cache", "smollm2"]

SCENARIO = "smol"
QUESTION = "What is the capital of France?"
ANSWER = "The capital of France is Paris."


@pytest.fixture(scope="module")
def reef(tmp_path_factory: pytest.TempPathFactory, model_cache: Path, smollm2) -> Iterator[RunningReef]:
    """One daemon serving SmolLM2 for the module (the model cache already holds its conversion)."""
    daemon = RunningReef(
        tmp_path_factory.mktemp("smol-reef"),
        "--inference.model-path",
        "builtin:smollm2",
        "--inference.model-cache",
        str(model_cache),
    ).start(timeout=120)
    yield daemon
    daemon.stop()


def openai_client(reef: RunningReef) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{reef.url}/v1",
        api_key="k",
        max_retries=0,
        timeout=120,
        default_headers={"x-reef-scenario": SCENARIO},
    )


def anthropic_client(reef: RunningReef) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=reef.url,
        api_key="k",
        max_retries=0,
        timeout=120,
        default_headers={"x-reef-scenario": SCENARIO},
    )


def recorded(reef: RunningReef, receipt: str) -> dict:
    return reef.reader(SCENARIO).data.get(receipt).data


@pytest.mark.slow
def test_the_openai_sdk_gets_answers_recorded_with_their_tokens(reef: RunningReef):
    client = openai_client(reef)
    raw = client.chat.completions.with_raw_response.create(
        model="builtin:smollm2",
        messages=[{"role": "user", "content": QUESTION}],
        temperature=0,
        max_tokens=24,
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == ANSWER
    record = recorded(reef, raw.headers["x-reef-agent-record-id"])
    tokens = record["tokens"]
    assert tokens["engine"] == "transformers" and tokens["weight_version"] == 0
    assert len(tokens["response_ids"]) == len(tokens["logprobs"]) == completion.usage.completion_tokens
    assert record["response"]["choices"][0]["message"]["content"] == ANSWER

    pieces = []
    with client.chat.completions.create(
        model="builtin:smollm2",
        messages=[{"role": "user", "content": QUESTION}],
        temperature=0,
        max_tokens=24,
        stream=True,
    ) as events:
        for chunk in events:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
    assert "".join(pieces) == ANSWER and len(pieces) > 3

    def sampled(seed: int) -> str:
        return (
            client.chat.completions.create(
                model="builtin:smollm2",
                messages=[{"role": "user", "content": "Write one sentence about the sea."}],
                temperature=0.9,
                max_tokens=24,
                seed=seed,
            )
            .choices[0]
            .message.content
            or ""
        )

    assert sampled(11) == sampled(11)


@pytest.mark.slow
def test_the_anthropic_sdk_is_translated_to_the_local_model(reef: RunningReef):
    client = anthropic_client(reef)
    raw = client.messages.with_raw_response.create(
        model="builtin:smollm2",
        max_tokens=24,
        messages=[{"role": "user", "content": QUESTION}],
        extra_body={"temperature": 0},  # this SDK no longer takes temperature as an argument
    )
    message = raw.parse()
    assert message.content[0].text == ANSWER and message.stop_reason == "end_turn"
    assert "response_ids" in recorded(reef, raw.headers["x-reef-agent-record-id"])["tokens"]
    with client.messages.stream(
        model="builtin:smollm2",
        max_tokens=24,
        messages=[{"role": "user", "content": QUESTION}],
        extra_body={"temperature": 0},  # this SDK no longer takes temperature as an argument
    ) as events:
        assert "".join(events.text_stream) == ANSWER


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda tmp: str(tmp / "nowhere" / "model.gguf"), "no model at"),
        (lambda tmp: _dir_without_config(tmp), "not a model"),
        (lambda tmp: _corrupt_gguf(tmp), "corrupt"),
    ],
)
def test_a_model_reef_cannot_serve_is_refused_at_start_naming_the_path(tmp_path: Path, make, said: str):
    path = make(tmp_path)
    run = subprocess.run(
        [
            str(Path(sys.executable).parent / "reef"),
            "serve",
            "--storage.state-dir",
            str(tmp_path / "state"),
            "--reef.port",
            "0",
            "--inference.model-path",
            path,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    assert path in run.stderr and said in run.stderr.lower()
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").rglob("*.git"))


def _dir_without_config(tmp: Path) -> str:
    folder = tmp / "just-a-folder"
    folder.mkdir()
    (folder / "notes.txt").write_text("no model here\n")
    return str(folder)


def _corrupt_gguf(tmp: Path) -> str:
    path = tmp / "broken.gguf"
    path.write_bytes(b"not a gguf file at all" * 100)
    return str(path)
