"""Where a quote really is in a session, and whether the person's words support an instruction.

A usage step's reflector reads transcripts full of text anyone could have written (tool output,
files, web pages, the harness's own reminders) and may believe it.  So nothing it says about
sources is taken on its word: every quote is looked up here, and an instruction becomes
publishable without a person only when the person's own words carry it.

**Places.**  A session's text comes from five places: ``user`` (what the person typed),
``feedback`` (what the person wrote in a report), ``tool`` (tool output: files, commands, pages),
``agent`` (the model's own words) and ``harness`` (text the harness injected into user-role
messages: Claude Code's reminders, CLAUDE.md contents, hook context).  Only ``user`` and
``feedback`` are the person's (:data:`TRUSTED`).  A quote found in tool output or harness text
is theirs wherever else it also occurs: text that is both in the person's message and in tool
output is tool text (a person pasting a log does not make the log theirs; an attacker whose
text the person quoted does not gain the person's voice), and a feedback text copied from tool
output is tool text too.  The agent's own words are the one place that does not win: an agent
echoes what the person asked, and whatever it echoes from a tool is in that tool output as well,
so a quote in the person's words and the agent's is the person's (:data:`RANK`).

**Phrases, not fragments.**  Matching is by whole words (lowercase letters and digits), so a
quote is found only as a run of whole words.  Only a quote of at least :data:`PHRASE_WORDS`
words can vouch for anything: "fix" or "the" are in every session.

**Support.**  An instruction is supported by a set of trusted phrases when every one of its
content words (:func:`content`: the words left after function words and a few harmless
intensifiers such as "always") occurs among the content words of the phrases that share any
content with it.  Light stemming lets "tests"/"test" and "saying"/"say" match.  Negations
("never", "not", "don't", "skip", "stop", "avoid", "without") are content: "never run the
tests" is not supported by "always run the tests".  This is deliberately strict: a lesson the
reflector words in new terms is not dropped, it waits for a person, who sees which words the
person never said (:func:`unsupported`).  No model decides support: a model that believed the
tool output once would believe it again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

__all__ = [
    "PHRASE_WORDS",
    "RANK",
    "TRUSTED",
    "content",
    "is_phrase",
    "least_trusted",
    "occurs",
    "supported",
    "unsupported",
    "words",
]

TRUSTED = frozenset({"user", "feedback"})
#: the places in the order a quote found in several takes them: anything tool output or the
#: harness also holds is theirs; the agent's words come last, since an agent echoes the person
#: ("you asked me to run the tests") and what it echoes from a tool is in the tool output too
RANK = ("tool", "harness", "feedback", "user", "agent")
#: the fewest words of a quote that can vouch for an instruction
PHRASE_WORDS = 3
_WORD = re.compile(r"[a-z0-9]+")

#: words that carry no instruction of their own (negations are *not* here: they carry meaning)
_FUNCTION = frozenset(
    """
    a about above after again all also always am an and any are as at be been before being both
    but by can could did do does doing done each else ever every first for from further had has
    have having he her here hers him his how i if in into is it its itself just let me more
    most must my now of off on once only or other our ours out over own please same shall she
    should so some such than that the their theirs them then there these they this those
    through to too under until up upon us very was we were what whenever when where which while
    who whom why will with would you your yours yourself now going make sure way
    """.split()
)
#: meaning-bearing words that look like function words: they must be the person's own
NEGATIONS = frozenset(
    "never not no nor dont doesnt didnt isnt wont cannot cant without skip stop avoid instead".split()
)


def words(text: str) -> list[str]:
    """The words of ``text``: runs of lowercase letters and digits."""
    return _WORD.findall(text.lower().replace("\u2019", "'").replace("'", ""))


def occurs(quote: Sequence[str], text: Sequence[str]) -> bool:
    """Whether the word list ``quote`` is a contiguous run of the word list ``text``."""
    n = len(quote)
    if n == 0 or n > len(text):
        return False
    first = quote[0]
    return any(text[i] == first and list(text[i : i + n]) == list(quote) for i in range(len(text) - n + 1))


def least_trusted(found: Iterable[str]) -> str | None:
    """The least trusted of the places ``found`` (None when empty)."""
    seen = set(found)
    return next((place for place in RANK if place in seen), None)


def is_phrase(quote: str) -> bool:
    """A quote long enough to vouch for an instruction (at least :data:`PHRASE_WORDS` words)."""
    return len(words(quote)) >= PHRASE_WORDS


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word[-1] == word[-2]:
        word = word[:-1]  # running -> runn -> run
    return word


def content(text: str) -> set[str]:
    """The stemmed content words of ``text`` (negations kept)."""
    return {_stem(w) for w in words(text) if w not in _FUNCTION or w in NEGATIONS}


def unsupported(instruction: str, phrases: Iterable[str]) -> list[str]:
    """The content words of ``instruction`` that the trusted ``phrases`` do not carry, in the
    order they appear (empty: supported).  A phrase counts only if it is a phrase
    (:func:`is_phrase`) and shares a content word with the instruction."""
    wanted = content(instruction)
    carried: set[str] = set()
    for phrase in phrases:
        if not is_phrase(phrase):
            continue
        words_of = content(phrase)
        if words_of & wanted:
            carried |= words_of
    missing, seen = [], set()
    for word in words(instruction):
        stem = _stem(word)
        if stem in wanted and stem not in carried and stem not in seen:
            seen.add(stem)
            missing.append(word)
    return missing


def supported(instruction: str, phrases: Iterable[str]) -> bool:
    """Whether the person's ``phrases`` carry every content word of ``instruction`` (an
    instruction with no content word at all is not supported: it says nothing the person said)."""
    return bool(content(instruction)) and not unsupported(instruction, phrases)
