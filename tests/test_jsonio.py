"""reef_core.jsonio gives the json module's answers, whichever library did the work."""

from __future__ import annotations

import json
import math

import pytest

from reef_core import jsonio


def same(a: object, b: object) -> bool:
    """Equal values of equal types all the way down (NaN equal to NaN)."""
    if type(a) is not type(b) and not (isinstance(a, float) and isinstance(b, float)):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)  # type: ignore[union-attr]
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b


TEXTS = [
    '{"model":"m","messages":[{"role":"user","content":"caf\\u00e9 é 🦀"}],"n":1.50,"t":true}',
    '{"a": 9223372036854775807, "b": -9223372036854775808, "c": 18446744073709551615}',
    '{"big": 123456789012345678901234567890}',  # orjson would read a float
    '{"neg": -9223372036854775809}',
    '{"digits in a string": "12345678901234567890123"}',
    "[NaN, Infinity, -Infinity, 1e400, -1e400, 1e-400, -0.0]",
    '"\\ud800 lone surrogate"',
    '{"a": 1, "a": 2}',
    '  [1, 2.5e3, "\\n\\t\\"", null]  ',
]


@pytest.mark.parametrize("text", TEXTS)
def test_loads_reads_what_json_reads(text):
    for data in (text, text.encode()):
        assert same(jsonio.loads(data), json.loads(data))


def test_loads_takes_the_encodings_json_takes():
    text = '{"a": "é"}'
    for data in (text.encode("utf-16"), text.encode("utf-8-sig"), bytearray(text.encode())):
        assert jsonio.loads(data) == {"a": "é"}


@pytest.mark.parametrize("bad", ["", "{", '{"a": 1,}', "[1] 2", "nul", '{"a" 1}', "\ufeff{}"])
def test_loads_refuses_what_json_refuses_with_its_message(bad):
    with pytest.raises(ValueError) as expected:
        json.loads(bad)
    with pytest.raises(ValueError) as got:
        jsonio.loads(bad)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("text", TEXTS[:-3])
def test_what_was_read_is_written_back_as_json_writes_it(text):
    compact = json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
    # a float may be spelt differently (1e+16 / 1e16); it reads back the same
    assert same(json.loads(jsonio.dumps(jsonio.loads(text))), json.loads(compact))
    if "NaN" in text or "big" in text or "neg" in text:  # json's own spelling, not orjson's null
        assert jsonio.dumps(jsonio.loads(text)).decode() == compact


def test_dumps_writes_what_orjson_refuses_as_json_does():
    assert jsonio.dumps({1: "a", "b": 2**70}) == b'{"1":"a","b":1180591620717411303424}'
    assert jsonio.dumps({"x": float("nan")}) == b'{"x":null}'  # computed, not read: valid JSON
    assert jsonio.dumps({"x": jsonio.NonFinite("nan")}) == b'{"x":NaN}'
    with pytest.raises(TypeError):
        jsonio.dumps({"x": object()})
    with pytest.raises(UnicodeEncodeError):
        jsonio.dumps({"x": "\ud800"})


def test_dumps_is_compact_utf8():
    assert jsonio.dumps({"a": ["é", "\n", 1.5, None]}) == '{"a":["é","\\n",1.5,null]}'.encode()


def test_nesting_past_the_limit_is_a_value_error_whichever_parser_reads_it():
    def nested(depth: int) -> bytes:
        return b"[" * depth + b"]" * depth

    assert jsonio.loads(nested(128), max_depth=128) is not None
    for text in (nested(129), b"[NaN," + nested(200) + b"]", nested(5000)):
        with pytest.raises(jsonio.TooDeep, match="deeper than 128 levels"):
            jsonio.loads(text, max_depth=128)
    # without a limit, text deeper than the parsers go is still a ValueError, not a RecursionError
    with pytest.raises(ValueError):
        jsonio.loads(nested(100_000))
    # objects count like arrays; brackets inside strings are text
    assert jsonio.loads(b'{"a": {"b": "[[[[[[[["}}', max_depth=2) == {"a": {"b": "[[[[[[[["}}
    with pytest.raises(jsonio.TooDeep):
        jsonio.loads(b'{"a": {"b": []}}', max_depth=2)
