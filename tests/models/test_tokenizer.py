"""The byte tokenizer and the chat prompt format."""

from __future__ import annotations

import pytest

from reef_core.errors import InvalidInput
from reef_core.models.tiny import BOS, EOS, PAD, VOCAB_SIZE, decode, encode, prompt_ids, render_chat


def test_specials_follow_the_bytes():
    assert (BOS, EOS, PAD, VOCAB_SIZE) == (256, 257, 258, 259)


@pytest.mark.parametrize("text", ["", "hello", "héllo wörld", "日本語 🐟 mixed\n\ttabs"])
def test_round_trip(text: str):
    ids = encode(text)
    assert all(0 <= i < 256 for i in ids)
    assert decode(ids) == text


def test_decode_drops_specials_and_repairs_broken_utf8():
    assert decode([BOS, *encode("hi"), EOS, PAD]) == "hi"
    fish = encode("🐟")
    assert decode([*encode("a"), *fish[:2]]) == "a\ufffd"


def test_render_single_turn():
    assert render_chat([{"role": "user", "content": "hi"}]) == "User: hi\nBot:"


def test_render_roles_parts_and_whitespace():
    messages = [
        {"role": "system", "content": "you are helpful"},
        {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url"}]},
        {"role": "assistant", "content": "Sure, it is\n\na  cat."},
        {"role": "tool", "content": "ignored"},
        {"role": "user", "content": [{"type": "text", "text": "and"}, {"type": "text", "text": "then?"}]},
    ]
    assert render_chat(messages) == "User: look\nBot: Sure, it is a cat.\nUser: and then?\nBot:"


def test_render_keeps_the_latest_turns_within_budget():
    messages = []
    for i in range(30):
        messages += [
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": f"answer {i}"},
        ]
    messages.append({"role": "user", "content": "last one?"})
    text = render_chat(messages, max_chars=60)
    assert len(text) <= 60
    assert text.endswith("User: last one?\nBot:")
    assert text.startswith(("User:", "Bot:"))
    assert "question 0" not in text


def test_render_keeps_the_end_of_an_overlong_message():
    text = render_chat([{"role": "user", "content": "x" * 500 + " the real question?"}], max_chars=50)
    assert len(text) <= 50
    assert text.startswith("User: ")
    assert text.endswith("the real question?\nBot:")


@pytest.mark.parametrize(
    ("messages", "field"),
    [
        ([], "messages"),
        ([{"role": "system", "content": "only a system prompt"}], "messages"),
        ([{"role": "wizard", "content": "hi"}], "messages[0].role"),
        ([{"role": "user", "content": 5}], "messages[0].content"),
        (["hi"], "messages[0]"),
    ],
)
def test_render_rejects_bad_messages(messages, field):
    with pytest.raises(InvalidInput) as err:
        render_chat(messages)
    assert err.value.field == field


def test_prompt_ids_start_with_bos_and_trim_from_the_left():
    messages = [{"role": "user", "content": "what do you think about the river?"}]
    ids = prompt_ids(messages, 256)
    assert ids == [BOS, *encode("User: what do you think about the river?\nBot:")]
    short = prompt_ids(messages, 10)
    assert len(short) == 10
    assert short[0] == BOS
    assert decode(short) == "User: what do you think about the river?\nBot:"[-9:]
    with pytest.raises(InvalidInput):
        prompt_ids(messages, 1)
