from __future__ import annotations

import pytest

from reef_core.errors import InvalidInput
from reef_core.wire.sse import SSEDecoder, SSEEvent, encode_event

# A stream mixing every line ending, a comment, ignored fields, multi-line data and multi-byte
# UTF-8 (2- and 4-byte sequences), so that some split lands inside each of them.
STREAM = (
    b": keep-alive comment\n\n"
    b'event: message_start\ndata: {"a": 1}\n\n'
    b'event: content_block_delta\r\ndata: {"text": "h\xc3\xa9llo \xf0\x9f\x90\x9f"}\r\n\r\n'
    b"id: 7\nretry: 100\ndata: line one\ndata:line two\n\n"
    b"data: cr only\r\r"
    b"event: ping\n: a comment inside an event\ndata\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    SSEEvent("message_start", '{"a": 1}'),
    SSEEvent("content_block_delta", '{"text": "héllo 🐟"}'),
    SSEEvent(None, "line one\nline two"),
    SSEEvent(None, "cr only"),
    SSEEvent("ping", ""),
    SSEEvent(None, "[DONE]"),
]


def _decode(*chunks: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    return events + decoder.flush()


def test_whole_stream_decodes():
    assert _decode(STREAM) == EXPECTED


def test_a_split_at_any_byte_gives_the_same_events():
    for cut in range(1, len(STREAM)):
        assert _decode(STREAM[:cut], STREAM[cut:]) == EXPECTED, f"split at byte {cut}"


def test_any_two_splits_give_the_same_events():
    # a chunk with only \n line ends takes a faster path than one with \r: every mix of the
    # two, with a line carried over from one chunk into the next
    for first in range(1, len(STREAM), 3):
        for second in range(first + 1, len(STREAM), 2):
            chunks = STREAM[:first], STREAM[first:second], STREAM[second:]
            assert _decode(*chunks) == EXPECTED, f"split at bytes {first} and {second}"


def test_byte_by_byte_gives_the_same_events():
    assert _decode(*(STREAM[i : i + 1] for i in range(len(STREAM)))) == EXPECTED


def test_crlf_split_between_cr_and_lf_is_one_line_break_not_two():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\r") == []
    assert decoder.feed(b"\n") == []  # the LF completes the CRLF; it is not a blank line
    assert decoder.feed(b"\r\n") == [SSEEvent(None, "x")]


def test_events_are_returned_as_soon_as_their_blank_line_arrives():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\ndata: b\n") == [SSEEvent(None, "a")]
    assert decoder.feed(b"\n") == [SSEEvent(None, "b")]
    assert decoder.flush() == []


def test_flush_emits_pending_data_without_a_trailing_blank_line():
    decoder = SSEDecoder()
    assert decoder.feed(b"event: tail\ndata: partial") == []
    assert decoder.flush() == [SSEEvent("tail", "partial")]
    assert decoder.flush() == []


def test_flush_drops_a_lone_event_line_and_comments():
    decoder = SSEDecoder()
    assert decoder.feed(b": only a comment\nevent: nothing\n") == []
    assert decoder.flush() == []


def test_leading_bom_is_ignored_and_invalid_utf8_does_not_raise():
    assert _decode(b"\xef\xbb\xbfdata: a\n\n") == [SSEEvent(None, "a")]
    assert _decode(b"data: \xff\n\n") == [SSEEvent(None, "\ufffd")]


def test_encode_event_writes_one_data_line_per_line():
    assert encode_event('{"type":"message_stop"}', "message_stop") == (
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    assert encode_event("one\ntwo") == b"data: one\ndata: two\n\n"
    assert encode_event("") == b"data: \n\n"


@pytest.mark.parametrize("data", ["plain", "a\nb", "a\r\nb\rc", "", "\n", "ünï 🐟", " leading space"])
def test_encode_then_decode_round_trips(data: str):
    expected = data.replace("\r\n", "\n").replace("\r", "\n")
    assert _decode(encode_event(data, "x")) == [SSEEvent("x", expected)]


def test_an_event_name_with_a_line_break_is_refused():
    with pytest.raises(InvalidInput) as info:
        encode_event("{}", "bad\nname")
    assert info.value.field == "event"
