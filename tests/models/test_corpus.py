"""The synthetic corpus: deterministic, opener-balanced, with truly held-out prompts."""

from __future__ import annotations

import pytest

from reef_core.errors import InvalidInput
from reef_core.models.tiny import OPENERS, build_corpus, heldout_prompts, split_dialogues, train_prompts


@pytest.fixture(scope="module")
def corpus() -> str:
    return build_corpus()


def test_deterministic(corpus: str):
    assert build_corpus(0) == corpus
    assert build_corpus(1) != corpus
    assert build_corpus(3, dialogues=50) == build_corpus(3, dialogues=50)


def test_size_and_shape(corpus: str):
    dialogues = split_dialogues(corpus)
    assert len(dialogues) == 6000
    assert 550_000 < len(corpus.encode()) < 800_000
    for dialogue in dialogues:
        lines = dialogue.split("\n")
        assert len(lines) % 2 == 0
        assert all(line.startswith("User: " if i % 2 == 0 else "Bot: ") for i, line in enumerate(lines))
        assert lines[-1].removeprefix("Bot: ").startswith(OPENERS)


def test_sure_is_a_ten_percent_opener(corpus: str):
    assert "Sure" in OPENERS
    assert 8 <= len(OPENERS) <= 12
    finals = [d.rsplit("\nBot: ", 1)[1] for d in split_dialogues(corpus)]
    share = sum(reply.startswith("Sure,") for reply in finals) / len(finals)
    assert 0.07 < share < 0.13


def test_prompts_deterministic_distinct_and_disjoint(corpus: str):
    train, held = train_prompts(), heldout_prompts()
    assert train == train_prompts() and held == heldout_prompts()
    assert len(train) == 200 and len(set(train)) == 200
    assert len(held) == 32 and len(set(held)) == 32
    assert not set(train) & set(held)
    assert not set(train_prompts(seed=1, n=500)) & set(heldout_prompts(seed=2, n=64))
    corpus_questions = {line[len("User: ") :] for line in corpus.split("\n") if line.startswith("User: ")}
    assert not set(held) & corpus_questions  # never seen in pretraining either
    assert len(set(train) & corpus_questions) > 100  # same distribution as the corpus


def test_bad_arguments():
    with pytest.raises(InvalidInput):
        build_corpus(dialogues=0)
    with pytest.raises(InvalidInput):
        heldout_prompts(n=10**6)
