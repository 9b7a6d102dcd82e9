"""Screens: text that must not be stored or published (credential shapes, instruction overrides,
chat-template tokens), found before an ask is recorded or a tree is released.

A :class:`Hit` names the rule, the place and the line, never the matched text: a hit is shown in
error bodies, logs and step pages, and repeating a leaked key there would leak it again.

The patterns are tuned against ordinary engineering prose ("risk-free", "task-1234", "ignore
whitespace in diffs", "keys that start with sk-"): a credential needs its prefix at a word start
plus a run of key characters, and an override phrase needs its whole framing.  Text is NFKC
normalised and stripped of zero-width characters first, so look-alike and split spellings of
``<|im_start|>`` or "ignore previous instructions" are caught too.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["RULES", "Hit", "redact_credentials", "screen_files", "screen_text"]


@dataclass(frozen=True)
class Hit:
    """One rule that matched: which, what it means, where (a path or field). Never the text itself."""

    rule: str
    description: str
    where: str | None = None


@dataclass(frozen=True)
class _Rule:
    name: str
    description: str
    patterns: tuple[re.Pattern[str], ...]
    #: a second look at a match (the text, the match) for what a regex says badly
    accept: Callable[[str, re.Match[str]], bool] | None = None


def _not_kebab_words(_text: str, match: re.Match[str]) -> bool:
    # "sk-learn-compatible-estimators" is prose; a real key is one random run, not lowercase words
    return re.fullmatch(r"[a-z]+(?:-[a-z]+)+", match.group("token")) is None


def _has_digit(_text: str, match: re.Match[str]) -> bool:
    return any(ch.isdigit() for ch in match.group(0))


def _not_negated(text: str, match: re.Match[str]) -> bool:
    # "don't forget the earlier rules" is a reminder, not an override
    before = text[max(0, match.start() - 16) : match.start()].lower()
    return re.search(r"(?:don'?t|do not|never|not to)\s*$", before) is None


_I = re.IGNORECASE
_W = r"(?<![A-Za-z0-9_-])"  # a key starts a word: "task-", "disk-", "risk-free" never qualify

_CREDENTIALS = (
    _Rule(
        "credential:anthropic-key",
        "an Anthropic API key",
        (re.compile(_W + r"sk-ant-[A-Za-z0-9_-]{20,}"),),
    ),
    _Rule(
        "credential:openai-key",
        "an OpenAI API key",
        (re.compile(_W + r"sk-(?!ant-)(?:proj-|svcacct-|admin-)?(?P<token>[A-Za-z0-9_-]{20,})"),),
        _not_kebab_words,
    ),
    _Rule(
        "credential:github-token",
        "a GitHub token",
        (
            re.compile(r"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{36,}"),
            re.compile(r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{22,}"),
        ),
    ),
    _Rule(
        "credential:slack-token",
        "a Slack token",
        (re.compile(r"(?<![A-Za-z0-9])xox[abprs]-[A-Za-z0-9-]{10,}"),),
        _has_digit,
    ),
    _Rule(
        "credential:aws-access-key",
        "an AWS access key id",
        (re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])"),),
    ),
    _Rule(
        "credential:private-key",
        "a private key block",
        # the whole block, so redaction removes the key body too (to the end when unterminated)
        (
            re.compile(
                r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
                r"(?:[\s\S]*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|[\s\S]*)"
            ),
        ),
    ),
)

_EARLIER = r"(?:previous|prior|above|earlier|preceding|foregoing|original)"
_ORDERS = r"(?:instructions?|rules|prompts?|directions|directives?|guidelines|guidance|commands)"
_OVERRIDE = _Rule(
    "instruction-override",
    "text that tries to override the model's instructions",
    (
        # ignore / disregard / forget (all of the) previous (system) instructions
        re.compile(
            r"\b(?:ignore|disregard|forget|override)\s+(?:(?:all|any|every|the|your|my|these|those|of)\s+){0,3}"
            + _EARLIER
            # only words an attack puts there: "ignore the previous style rules" is an ordinary ask
            + r"\s+(?:(?:system|developer|safety|user|given|original)\s+)?"
            + _ORDERS
            + r"\b",
            _I,
        ),
        re.compile(
            r"\b(?:ignore|disregard|forget)\s+(?:all\s+(?:of\s+)?)?your\s+"
            r"(?:instructions|rules|guidelines|programming|system\s+prompt)\b",
            _I,
        ),
        re.compile(
            r"\b(?:ignore|disregard|forget)\s+(?:everything|all)\s+you\s+(?:were|have\s+been)\s+told\b", _I
        ),
        # "you are now DAN / in developer mode / unrestricted" jailbreak framings
        re.compile(
            r"\byou\s+are\s+now\s+(?:in\s+)?(?:an?\s+|the\s+)?(?:DAN\b|developer\s+mode|jailbr(?:oken|eak)|"
            r"unrestricted|unfiltered|uncensored|unlocked|evil\b|free\s+(?:from|of)\s+(?:all\s+|any\s+)?"
            r"(?:rules|restrictions|guidelines|limitations)|no\s+longer\s+(?:bound|restricted|limited))",
            _I,
        ),
        re.compile(r"\b(?:enter|enable|activate|switch\s+to)\s+(?:DAN|jailbreak)\s+mode\b", _I),
        re.compile(r"\bdo\s+anything\s+now\b", _I),
        # a forged header: "New system prompt:", "Real developer instructions:"
        re.compile(
            r"\b(?:new|updated|real|true|actual|hidden|secret|revised)\s+(?:system|developer)\s+"
            r"(?:prompt|message|instructions?)\s*:",
            _I,
        ),
        re.compile(
            r"\b(?:override|overwrite|bypass)\s+(?:your|the)\s+(?:system|developer)\s+"
            r"(?:prompt|message|instructions?)\b",
            _I,
        ),
    ),
    _not_negated,
)

_TEMPLATE = _Rule(
    "chat-template-token",
    "a chat-template control token",
    (
        re.compile(
            r"<\|\s*(?:im_start|im_end|im_sep|endoftext|begin_of_text|end_of_text|eot_id|eom_id|"
            r"start_header_id|end_header_id|system|user|assistant|end)\s*\|>",
            _I,
        ),
        re.compile(r"\[/?INST\]|<</?SYS>>|<(?:start|end)_of_turn>", _I),
    ),
)

_ALL = (*_CREDENTIALS, _OVERRIDE, _TEMPLATE)
RULES: tuple[str, ...] = tuple(rule.name for rule in _ALL)

_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u200b\u200c\u200d\u2060\ufeff"))
_REDACTED = "[redacted credential]"


def _normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).translate(_INVISIBLE)


def _matches(rule: _Rule, text: str) -> list[re.Match[str]]:
    found = [m for pattern in rule.patterns for m in pattern.finditer(text)]
    if rule.accept is not None:
        found = [m for m in found if rule.accept(text, m)]
    return sorted(found, key=lambda m: m.start())


def _lines(text: str, matches: list[re.Match[str]]) -> str:
    numbers = sorted({text.count("\n", 0, m.start()) + 1 for m in matches})
    shown = ", ".join(str(n) for n in numbers[:5])
    if len(numbers) > 5:
        shown += f" and {len(numbers) - 5} more"
    return f"line {shown}" if len(numbers) == 1 else f"lines {shown}"


def screen_text(text: str, *, where: str | None = None) -> list[Hit]:
    """The rules ``text`` breaks, one :class:`Hit` per rule (in :data:`RULES` order) naming its lines."""
    normal = _normalise(text)
    hits = []
    for rule in _ALL:
        matches = _matches(rule, normal)
        if matches:
            hits.append(Hit(rule.name, f"{rule.description} on {_lines(normal, matches)}", where))
    return hits


def screen_files(files: Mapping[str, bytes]) -> list[Hit]:
    """:func:`screen_text` over each file (undecodable bytes are replaced, not skipped), ``where`` = path."""
    hits: list[Hit] = []
    for path in sorted(files):
        hits += screen_text(files[path].decode("utf-8", errors="replace"), where=path)
    return hits


def redact_credentials(text: str) -> str:
    """``text`` with each credential shape replaced by ``[redacted credential]``, for step records
    and logs that must keep the rest of a model's answer."""
    normal = _normalise(text)
    spans = sorted((m.start(), m.end()) for rule in _CREDENTIALS for m in _matches(rule, normal))
    if not spans:
        return text
    out, last = [], 0
    for start, end in spans:
        if start < last:
            continue
        out += [normal[last:start], _REDACTED]
        last = end
    return "".join([*out, normal[last:]])
