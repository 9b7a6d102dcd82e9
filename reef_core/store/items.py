"""An item as the data branch keeps it: its kind and body checked, then one line of JSON.

The writer (``writer.py``) stamps each item with its id, kind and creation time, so a body may
not set those (:func:`check_item`), and serialises it in the caller's thread, so bad input fails
at once and never reaches the repository (:class:`Serialiser`).  A body may carry a
:class:`RawJSON` value, written into the item as it is.  :class:`GroupItem` and
:data:`GroupEntry` are what a group of items is made of (``GroupCommitWriter.submit_group``).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from reef_core import jsonio
from reef_core.errors import InvalidInput
from reef_core.ids import KINDS

__all__ = [
    "GroupEntry",
    "GroupItem",
    "RawJSON",
    "Serialiser",
    "check_item",
]

_RESERVED = ("id", "kind", "created_at")  # the fields the store sets in every item
# what stands for a RawJSON value while the rest of an item is serialised (after a NUL, which
# JSON writes as \u0000); the random part keeps anything a client sent from looking like it
_RAW_MARK = f"reef-raw-{secrets.token_hex(8)}-"


@dataclass(frozen=True)
class GroupItem:
    """One item of a group (:meth:`GroupCommitWriter.submit_group`)."""

    kind: str
    body: Mapping[str, Any]
    summary: str = ""
    trailers: Mapping[str, str] | None = None


#: an item of a group, or a function of the ids issued to the group's items before it
GroupEntry = GroupItem | Callable[[list[str]], GroupItem]


class RawJSON(bytes):
    """A value already serialised: one JSON value, UTF-8, on one line.  In an item's body it
    is written into the item as it is, not parsed and serialised again (the daemon stores a
    request as the client sent it: 1.2 ms saved on a 180 KB request).  The caller vouches for
    it; the store checks only that it is one line."""


def check_item(kind: str, body: Mapping[str, Any]) -> None:
    """Refuse an unknown kind, or a body that sets a field the store sets."""
    if kind not in KINDS:
        raise InvalidInput(f"unknown item kind {kind!r}", field="kind")
    clash = [key for key in _RESERVED if key in body]
    if clash:
        raise InvalidInput(f"field {clash[0]!r} is set by the store", field=clash[0])


class Serialiser:
    """Serialises items, with :class:`RawJSON` values spliced in.  One per writer, used under
    its submit lock (it keeps the raw values of the item at hand)."""

    def __init__(self) -> None:
        self._raw: list[bytes] = []
        self._encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=self._stand_in)

    def __call__(self, document: dict[str, Any]) -> bytes:
        fast = jsonio.dumps_or_none(document, default=_fragment)
        if fast is not None:
            return fast
        # json writes it (see reef_core.jsonio), the raw values spliced in by stand-ins
        self._raw.clear()
        payload = self._encoder.encode(document).encode()
        for n, value in enumerate(self._raw):
            # the first occurrence is the stand-in itself: nothing a client sent can spell it
            payload = payload.replace(f'"\\u0000{_RAW_MARK}{n}"'.encode(), value, 1)
        return payload

    def _stand_in(self, value: object) -> str:
        self._raw.append(_checked(value))
        return f"\0{_RAW_MARK}{len(self._raw) - 1}"


def _checked(value: object) -> RawJSON:
    if not isinstance(value, RawJSON):
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
    if b"\n" in value or b"\r" in value:
        raise InvalidInput("raw JSON must be on one line", field="body")
    return value


def _fragment(value: object) -> orjson.Fragment:
    return orjson.Fragment(bytes(_checked(value)))  # a Fragment takes exactly bytes, no subclass
