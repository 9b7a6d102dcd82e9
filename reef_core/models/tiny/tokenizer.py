"""The byte tokenizer and the chat prompt format of the tiny model.

Ids 0-255 are the UTF-8 bytes of the text; three specials follow: ``BOS`` starts every
sequence, ``EOS`` ends a bot reply (generation stops there), ``PAD`` fills ragged batches and
is never a training target.  A byte vocabulary needs no vocabulary file, never meets an
unknown word, and lets any client text through unchanged.

The prompt format is the corpus's (``corpus.py``)::

    User: hi
    Bot: Hello there.
    User: what do you think about the river?
    Bot:

The reply is generated right after the final ``Bot:`` cue, so it starts with a space
(" Sure, the river is calm today.") and ends with ``EOS``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from reef_core.errors import InvalidInput

__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "VOCAB_SIZE",
    "decode",
    "encode",
    "prompt_ids",
    "render_chat",
]

BOS = 256
EOS = 257
PAD = 258
VOCAB_SIZE = 259

#: who speaks on a line of the prompt, by chat role
_SPEAKER = {"user": "User", "assistant": "Bot"}
#: roles that are accepted but left out: the corpus has no system prompts or tool output, so
#: they would only spend the character budget on text the model has never learned to read
_SKIPPED_ROLES = frozenset({"system", "developer", "tool"})
_CUE = "Bot:"
_WHITESPACE = re.compile(r"\s+")
_MIN_CHARS = 16


def encode(text: str) -> list[int]:
    """The UTF-8 bytes of ``text`` as ids (no specials added)."""
    return list(text.encode("utf-8"))


def decode(ids: Iterable[int]) -> str:
    """Text from ids: specials are dropped, broken UTF-8 becomes U+FFFD.

    A sampled reply may stop in the middle of a multi-byte character; ``errors="replace"``
    keeps decoding total instead of raising on model output.
    """
    return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


def _content_text(content: Any, field: str) -> str:
    """The text of an OpenAI message ``content``: a string, or the text parts of a list."""
    if content is None:  # an assistant turn that only called tools
        return ""
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        pieces = []
        for i, part in enumerate(content):
            if not isinstance(part, Mapping):
                raise InvalidInput("a content part must be an object", field=f"{field}[{i}]")
            if part.get("type") == "text":
                value = part.get("text")
                if not isinstance(value, str):
                    raise InvalidInput("a text part needs a string 'text'", field=f"{field}[{i}].text")
                pieces.append(value)
        text = " ".join(pieces)
    else:
        raise InvalidInput("content must be a string or a list of parts", field=field)
    # one line per turn: a newline inside a message would forge a "\nBot:" cue of its own
    return _WHITESPACE.sub(" ", text).strip()


def _turn_lines(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    if not isinstance(messages, Sequence) or isinstance(messages, str):
        raise InvalidInput("messages must be a list of chat messages", field="messages")
    lines = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InvalidInput("a message must be an object", field=f"messages[{i}]")
        role = message.get("role")
        if role in _SKIPPED_ROLES:
            continue
        if role not in _SPEAKER:
            raise InvalidInput(f"unknown role {role!r}", field=f"messages[{i}].role")
        text = _content_text(message.get("content"), f"messages[{i}].content")
        lines.append(f"{_SPEAKER[role]}: {text}".rstrip())
    if not lines:
        raise InvalidInput("messages need at least one user or assistant turn", field="messages")
    return lines


def render_chat(messages: Sequence[Mapping[str, Any]], *, max_chars: int = 180) -> str:
    """The prompt for ``messages``: one line per turn, then the ``Bot:`` cue.

    Only the latest turns that fit in ``max_chars`` (cue included) are kept, so that the
    prompt plus a reply fits the model's context.  If even the last turn is too long, its
    *end* is kept (the question usually comes last) behind its speaker label.
    """
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < _MIN_CHARS:
        raise InvalidInput(f"max_chars must be an integer >= {_MIN_CHARS}", field="max_chars")
    lines = _turn_lines(messages)
    kept: list[str] = []
    used = len(_CUE)
    for line in reversed(lines):
        if used + len(line) + 1 > max_chars:
            break
        kept.append(line)
        used += len(line) + 1
    if not kept:
        label, _, text = lines[-1].partition(": ")
        room = max_chars - len(_CUE) - len(label) - 3
        kept.append(f"{label}: {text[-room:].lstrip()}".rstrip())
    return "\n".join([*reversed(kept), _CUE])


def prompt_ids(messages: Sequence[Mapping[str, Any]], max_len: int, *, max_chars: int = 180) -> list[int]:
    """``[BOS] + encode(render_chat(messages))``, at most ``max_len`` ids.

    Pass ``max_len`` = context length minus the tokens reserved for the reply.  Overflow is
    cut from the left (the oldest text), and ``BOS`` stays first, as in training.
    """
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 2:
        raise InvalidInput("max_len must be an integer >= 2", field="max_len")
    ids = encode(render_chat(messages, max_chars=max_chars))
    return [BOS, *ids[-(max_len - 1) :]]
