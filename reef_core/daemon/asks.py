"""Asks: plain-language requests to change the harness, screened before anything is stored.

An ask is data for the proposer, never instructions to it; what could smuggle a secret into
a release or steer the model (credential shapes, instruction-override phrases, chat-template
tokens) is refused with the rule's name, without echoing the text back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reef_core.daemon.parsing import known_fields
from reef_core.errors import InvalidInput
from reef_core.release.screens import screen_text

__all__ = ["MAX_ASK_CHARS", "AskInput", "parse_ask", "refuse_screened"]

MAX_ASK_CHARS = 4000
_FIELDS = {"text", "session", "release_id", "agent_record_id", "harness"}


@dataclass(frozen=True)
class AskInput:
    text: str
    session: str | None
    release_id: str | None
    harness: str | None
    key: str | None

    def content(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "session": self.session,
            "release_id": self.release_id,
            "harness": self.harness,
        }

    def summary(self) -> str:
        flat = " ".join(self.text.split())
        return '"' + (flat if len(flat) <= 100 else flat[:99] + "…") + '"'


def refuse_screened(texts: list[str], what: str, *, field: str) -> None:
    """Raise naming the screen rules any of ``texts`` hits (never echoing the text)."""
    hits = [hit for text in texts for hit in screen_text(text)]
    if hits:
        rules = ", ".join(sorted({hit.rule for hit in hits}))
        raise InvalidInput(
            f"{what} was refused by the screen ({rules}); nothing was stored. "
            "Rephrase it without credentials, instruction overrides or chat-template tokens",
            field=field,
        )


def _optional_str(body: dict[str, Any], name: str, limit: int) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= limit:
        raise InvalidInput(f"{name} must be a string of 1-{limit} characters", field=name)
    return value


def parse_ask(body: Any) -> AskInput:
    body = known_fields(body, _FIELDS, "an ask")
    text = body.get("text")
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput(
            "text must be a non-empty string: what should the agent do differently?", field="text"
        )
    if len(text) > MAX_ASK_CHARS:
        raise InvalidInput(
            f"text is {len(text)} characters; an ask holds at most {MAX_ASK_CHARS}", field="text"
        )
    refuse_screened([text], "the ask", field="text")
    release_id = _optional_str(body, "release_id", 40)
    return AskInput(
        text=text.strip(),
        session=_optional_str(body, "session", 200),
        release_id=release_id,
        harness=_optional_str(body, "harness", 40),
        key=_optional_str(body, "agent_record_id", 200),
    )
