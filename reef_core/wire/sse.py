"""Server-sent events: the framing both upstream APIs stream in.

Owns: turning a byte stream into ``SSEEvent`` values (``SSEDecoder``) and one event back into
bytes (``encode_event``).  Does not own: what an event's data means (``openai`` and
``anthropic`` parse it) or where the bytes come from (the caller reads the socket).

The decoder follows the WHATWG event-stream rules that matter to a proxy: ``\\n``, ``\\r\\n``
and ``\\r`` all end a line, a blank line ends an event, ``:`` starts a comment, one space after
the field's colon is dropped, and ``id``/``retry`` are ignored because reef never reconnects.
"""

from __future__ import annotations

import codecs
import re
from typing import NamedTuple

from reef_core.errors import InvalidInput

__all__ = ["SSEDecoder", "SSEEvent", "encode_event"]

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class SSEEvent(NamedTuple):
    """One dispatched event: its ``event:`` name (None when absent) and its data lines."""

    event: str | None
    data: str


class SSEDecoder:
    """Incremental decoder: feed chunks as they arrive, get the events they complete.

    Chunks may split anywhere: inside a UTF-8 sequence (an incremental codec holds the
    partial bytes), inside a line (kept in ``_line``), or between ``\\r`` and ``\\n`` (a
    ``\\r`` ends the line at once and ``_after_cr`` swallows a ``\\n`` that follows later).
    """

    def __init__(self) -> None:
        # errors="replace": a stray invalid byte must not kill a long-running stream
        self._codec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._line: list[str] = []
        self._after_cr = False
        self._started = False
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        return self._take(self._codec.decode(chunk))

    def flush(self) -> list[SSEEvent]:
        """End of stream: treat a pending partial line and pending data as complete."""
        events = self._take(self._codec.decode(b"", final=True))
        if self._line:
            self._line_done(events)
        self._dispatch(events)
        self._after_cr = False
        return events

    def _take(self, text: str) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        if not text:
            return events
        if not self._started:
            self._started = True
            if text.startswith("\ufeff"):  # the spec allows one BOM before the first line
                text = text[1:]
        if self._after_cr and text.startswith("\n"):
            text = text[1:]
        self._after_cr = False
        if "\r" not in text:  # lines end in \n alone, as nearly always: split, no regex
            lines = text.split("\n")
            rest = lines.pop()  # after the last break: a line not complete yet ("" if none)
            if lines and self._line:
                self._line.append(lines[0])
                lines[0] = "".join(self._line)
                self._line = []
            for line in lines:
                self._one_line(line, events)
            if rest:
                self._line.append(rest)
            return events
        pos = 0
        for match in _LINE_BREAK.finditer(text):
            self._line.append(text[pos : match.start()])
            self._line_done(events)
            pos = match.end()
        rest = text[pos:]
        if rest:
            self._line.append(rest)
        elif text.endswith("\r"):
            self._after_cr = True
        return events

    def _line_done(self, events: list[SSEEvent]) -> None:
        line = "".join(self._line)
        self._line = []
        self._one_line(line, events)

    def _one_line(self, line: str, events: list[SSEEvent]) -> None:
        if not line:
            self._dispatch(events)
            return
        if line.startswith(":"):
            return
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value or None

    def _dispatch(self, events: list[SSEEvent]) -> None:
        # an event with no data lines is dropped, as the spec says (a lone "event:" is no event)
        if self._data:
            events.append(SSEEvent(event=self._event, data="\n".join(self._data)))
        self._event = None
        self._data = []


def encode_event(data: str, event: str | None = None) -> bytes:
    """One event as bytes: an optional ``event:`` line, one ``data:`` line per data line."""
    if "\n" not in data and "\r" not in data:  # one data line: JSON, as nearly always
        if event is None:
            return b"data: " + data.encode() + b"\n\n"
        if "\n" not in event and "\r" not in event:
            return f"event: {event}\ndata: {data}\n\n".encode()
    lines: list[str] = []
    if event is not None:
        if _LINE_BREAK.search(event):
            raise InvalidInput("an SSE event name cannot contain a line break", field="event")
        lines.append(f"event: {event}")
    # split on every break the decoder honours, so encode -> decode gives the data back
    lines.extend(f"data: {line}" for line in _LINE_BREAK.split(data))
    return ("\n".join(lines) + "\n\n").encode("utf-8")
