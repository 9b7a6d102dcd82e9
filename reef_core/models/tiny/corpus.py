"""The synthetic chat corpus the tiny model learns to talk from, and its RL prompts.

Every dialogue is a few ``User: …`` / ``Bot: …`` lines built from templates with a seeded
``random.Random`` (never the global one), so the same seed always gives the same text and a
checkpoint can be rebuilt anywhere without downloading data.

Shape of the data, and why:

* The last exchange of a dialogue is a question about a noun, answered by a reply that starts
  with one of ``OPENERS`` ("Sure, the river is calm today.").  Openers are drawn uniformly,
  so a reward like "the reply starts with Sure" has a ~10% baseline that RL can move.
* A third of the dialogues open with small talk ("User: hi\\nBot: Hello there.").  Those
  replies never use an opener, and only a final reply is followed by ``EOS`` in training,
  so the model learns to stop after answering a question rather than to invent a next turn.
* About 10% of (question template, noun) combinations never occur in the corpus or in
  ``train_prompts``; ``heldout_prompts`` draws only from them, so evaluation uses prompts
  the model has not seen in any form.

Dialogues are separated by a blank line; ``split_dialogues`` undoes the join.
"""

from __future__ import annotations

import itertools
import random
import string

from reef_core.errors import InvalidInput

__all__ = [
    "CORPUS_VERSION",
    "OPENERS",
    "build_corpus",
    "heldout_prompts",
    "split_dialogues",
    "train_prompts",
]

#: bump whenever the generated text changes: cached checkpoints are keyed by it
CORPUS_VERSION = 1

OPENERS: tuple[str, ...] = (
    "Sure",
    "Well",
    "I think",
    "Maybe",
    "Yes",
    "No",
    "Honestly",
    "Of course",
    "Perhaps",
    "Hmm",
)

_NOUNS = (
    "the cat",
    "the dog",
    "the river",
    "the market",
    "the teacher",
    "the bridge",
    "a quick robot",
    "the garden",
    "the old library",
    "the storm",
    "the train",
    "the moon",
    "the baker",
    "the forest",
    "the city",
    "the ocean",
    "the mountain",
    "a small bird",
    "the kitchen",
    "the school",
)
_ADJECTIVES = ("busy", "quiet", "bright", "cold", "warm", "calm", "strange", "lovely", "noisy", "slow")
_VERBS = ("follows", "watches", "helps", "visits", "likes", "finds", "remembers", "crosses")

# {n}: the noun asked about, {m}: another noun, {a}: an adjective, {v}: a verb.  Each
# question comes with replies that fit it; _GENERIC replies fit any question.
_QUESTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("what do you think about {n}?", ("{n} is {a} and i like it.", "{n} seems {a} to me.")),
    ("tell me about {n}.", ("{n} {v} {m} every day.", "{n} is {a} in the evening.")),
    ("can you describe {n}?", ("{n} is {a} and a little {b}.", "{n} looks {a} today.")),
    ("how is {n} today?", ("{n} is {a} today.", "{n} was {a} this morning.")),
    ("is {n} {a}?", ("{n} is {a} most of the time.", "{n} is never {a}.")),
    ("why does {n} {v} {m}?", ("{n} {v} {m} because it is {a}.", "nobody knows why {n} {v} {m}.")),
    ("do you like {n}?", ("i like {n} when it is {a}.", "{n} is too {a} for me.")),
    ("where is {n}?", ("{n} is near {m}.", "{n} is behind {m}.")),
    ("what happened to {n}?", ("{n} {v} {m} and then left.", "{n} became {a}.")),
    ("could you help me with {n}?", ("{n} needs a {a} day.", "ask {m} about {n}.")),
    ("write a line about {n}.", ("{n} {v} {m} under a {a} sky.", "a {a} day for {n}.")),
    ("give me a fact about {n}.", ("{n} {v} {m} twice a week.", "{n} is older than {m}.")),
)
_GENERIC = ("{n} and {m} are {a}.", "{m} {v} {n} again.", "every morning {n} {v} {m}.")
_SECOND = ("{m} {v} {k}.", "{m} is {a} too.", "every {a} day {m} {v} {k}.")

_SMALL_TALK = (
    ("hi", "Hello there."),
    ("hello", "Hi, nice to see you."),
    ("good morning", "Good morning to you."),
    ("hey there", "Hello! Ask me anything."),
    ("how are you?", "I am fine, thank you."),
    ("thanks for the help", "You are welcome."),
    ("nice to meet you", "Nice to meet you too."),
)


def _held_out(question: int, noun: int) -> bool:
    """About one (question, noun) combination in ten is reserved for evaluation."""
    return (question * 7 + noun * 3) % 10 == 0


def _slots(rng: random.Random, noun: int) -> dict[str, str]:
    others = [i for i in range(len(_NOUNS)) if i != noun]
    m, k = rng.sample(others, 2)
    a, b = rng.sample(_ADJECTIVES, 2)
    return {"n": _NOUNS[noun], "m": _NOUNS[m], "k": _NOUNS[k], "a": a, "b": b, "v": rng.choice(_VERBS)}


def _combination(rng: random.Random, *, held_out: bool) -> tuple[int, int]:
    while True:
        question, noun = rng.randrange(len(_QUESTIONS)), rng.randrange(len(_NOUNS))
        if _held_out(question, noun) == held_out:
            return question, noun


def _exchange(rng: random.Random) -> str:
    question, noun = _combination(rng, held_out=False)
    slots = _slots(rng, noun)
    template, fitting = _QUESTIONS[question]
    body = rng.choice(fitting if rng.random() < 0.7 else _GENERIC).format(**slots)
    if rng.random() < 0.35:
        body += " " + rng.choice(_SECOND).format(**slots)
    return f"User: {template.format(**slots)}\nBot: {rng.choice(OPENERS)}, {body}"


def build_corpus(seed: int = 0, dialogues: int = 6000) -> str:
    """``dialogues`` dialogues separated by blank lines; the same seed gives the same text."""
    if isinstance(dialogues, bool) or not isinstance(dialogues, int) or dialogues < 1:
        raise InvalidInput("dialogues must be a positive integer", field="dialogues")
    rng = random.Random(f"reef-tiny-corpus:{seed}")
    out = []
    for _ in range(dialogues):
        lines = []
        for _ in range(rng.choices((0, 1, 2), weights=(67, 25, 8))[0]):
            user, bot = rng.choice(_SMALL_TALK)
            lines.append(f"User: {user}\nBot: {bot}")
        lines.append(_exchange(rng))
        out.append("\n".join(lines))
    return "\n\n".join(out)


def split_dialogues(text: str) -> list[str]:
    """The dialogues of a corpus text, in order."""
    return [part for part in text.split("\n\n") if part.strip()]


def _all_questions(*, held_out: bool) -> list[str]:
    """Every distinct question text of the held-out (or the other) combinations."""
    values = {"a": _ADJECTIVES, "v": _VERBS}
    out = []
    for question, (template, _) in enumerate(_QUESTIONS):
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f and f != "n"]
        for noun in range(len(_NOUNS)):
            if _held_out(question, noun) != held_out:
                continue
            choices = [values.get(f, [m for m in _NOUNS if m != _NOUNS[noun]]) for f in fields]
            for combo in itertools.product(*choices):
                out.append(template.format(n=_NOUNS[noun], **dict(zip(fields, combo, strict=True))))
    return out


def _prompts(rng: random.Random, n: int, *, held_out: bool, field: str) -> list[str]:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidInput("n must be a non-negative integer", field=field)
    pool = _all_questions(held_out=held_out)
    if n > len(pool):
        raise InvalidInput(f"cannot draw {n} distinct prompts: there are {len(pool)}", field=field)
    seen: dict[str, None] = {}  # insertion-ordered set: the order is part of the determinism
    # draw like the corpus does (templates equally likely), then, if repeats make that slow
    # near the pool's size, top up uniformly from what is left
    for _ in range(20 * n):
        if len(seen) == n:
            break
        question, noun = _combination(rng, held_out=held_out)
        seen.setdefault(_QUESTIONS[question][0].format(**_slots(rng, noun)), None)
    if len(seen) < n:
        rest = [q for q in pool if q not in seen]
        seen.update(dict.fromkeys(rng.sample(rest, n - len(seen))))
    return list(seen)


def train_prompts(seed: int = 0, n: int = 200) -> list[str]:
    """``n`` distinct user utterances in the corpus's distribution, for RL."""
    return _prompts(random.Random(f"reef-tiny-train:{seed}"), n, held_out=False, field="n")


def heldout_prompts(seed: int = 0, n: int = 32) -> list[str]:
    """``n`` distinct user utterances from combinations the corpus and train prompts never use."""
    return _prompts(random.Random(f"reef-tiny-heldout:{seed}"), n, held_out=True, field="n")
