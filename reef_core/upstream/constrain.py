"""``response_format`` honoured by reef's own models: constrained decoding, token by token.

A request's ``response_format`` (``{"type": "json_schema", "json_schema": {"name", "schema",
"strict"?}}``, ``{"type": "json_object"}``, or ``{"type": "text"}``, the default) is checked and
compiled by :func:`parse` into a :class:`Format`; an engine's :class:`Vocabulary` (its model's
tokens) makes a :class:`Matcher` of it for the answer, and at each decoding step :class:`Masks`
sets every token the matcher cannot take next to ``-inf`` in that row's logits, for the rows of a
batch together (a row without a matcher is left alone), before the row samples.  So the text
is, token by token, a prefix of a document the schema accepts, and the end-of-turn token is
allowed only once the document is complete: an answer that ends with it (``finish_reason``
``stop``) is JSON the schema validates.  One cut short by ``max_tokens`` ends ``length`` with
the prefix it reached, which is not valid JSON; nor is one cut by a stop sequence the client
asked for.  JSON is written compact (no whitespace between tokens), which keeps an answer
short and on one line.

**Errors.**  A malformed ``response_format``, a schema that uses a feature the library cannot
honour (``not``, ``uniqueItems``, ``if``/``then``, an unknown ``format``, a remote ``$ref``, a
look-around in a ``pattern``...) or that nothing satisfies, and a missing library are answered
as an upstream's 400 (:class:`~reef_core.errors.UpstreamRejected`, an OpenAI error body with
``param: response_format``) whose message names the feature: the request is never answered
unconstrained as if it had been honoured, and reef's own callers that retry a schema an
upstream refused with 400 (``reef_core.daemon.model_calls``) do the same here.

**Why llguidance** (rather than xgrammar, the other maintained library on PyPI): both install
on this CPU-only torch 2.13 / Python 3.11 setup and both take a byte-level vocabulary (the
embedded model's) as well as a Hugging Face fast tokenizer.  llguidance is one 3 MB abi3 wheel
with no dependencies at all, whereas xgrammar declares torch, transformers, triton and
apache-tvm-ffi: too heavy to go where the embedded model goes.  llguidance refuses the schema
keywords it does not implement, naming them, where xgrammar 0.2.9 compiled ``not``,
``uniqueItems`` and an unknown ``format`` silently and would have constrained to a looser
schema than asked.  Its speed is more than enough: on SmolLM2's 49k-token vocabulary one mask
takes about 20 µs and 16 rows' masks, computed on its own threads with the GIL dropped, about
0.4 ms, against a forward pass of tens of milliseconds (``bench/constrained.py``); building the
vocabulary takes about 0.3 s, once per engine, at its first constrained request.

llguidance is in the ``model`` and ``smollm2`` extras (``scripts/setup.sh`` installs them).
It and torch are imported inside the functions that need them, so the engine base parses
requests without either, and without llguidance installed only a ``response_format`` is
refused (with the pip command that installs it).
"""

from __future__ import annotations

import importlib.util
import json
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from reef_core.errors import UpstreamRejected

__all__ = ["FIELD", "Format", "Masks", "Matcher", "Vocabulary", "parse", "rejected"]

FIELD = "response_format"
#: OpenAI's rule for ``json_schema.name``
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_INSTALL = (
    "pip install llguidance (it comes with reef[model] and reef[smollm2]; scripts/setup.sh installs them)"
)
#: compact JSON, whatever the schema's own ``x-guidance`` says; never lenient: a keyword the
#: library does not implement is a 400, not a constraint looser than the one asked for
_OPTIONS = {"whitespace_flexible": False, "lenient": False}
#: the most of a library message a 400 quotes
_MESSAGE_CHARS = 300


@dataclass(frozen=True)
class Format:
    """A checked ``response_format``: its kind (``json_schema`` or ``json_object``), the schema's
    name (``None`` for ``json_object``) and the grammar llguidance compiled from it."""

    kind: str
    name: str | None
    grammar: str


def rejected(message: str) -> UpstreamRejected:
    """The 400 for a ``response_format`` that cannot be honoured, as an upstream would answer it."""
    error = {"message": message, "type": "invalid_request_error", "param": FIELD, "code": None}
    return UpstreamRejected(
        message, status=400, body=json.dumps({"error": error}).encode(), content_type="application/json"
    )


def parse(value: Any) -> Format | None:
    """The ``response_format`` of a request, checked and compiled; ``None`` for plain text
    (absent, ``null`` or ``{"type": "text"}``).  Raises :func:`rejected`."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise rejected(f"{FIELD} must be an object with a type (text, json_object or json_schema)")
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return Format("json_object", None, _compile({"type": "object"}))
    if kind != "json_schema":
        raise rejected(f"{FIELD}.type must be text, json_object or json_schema, not {kind!r}")
    spec = value.get("json_schema")
    if not isinstance(spec, dict):
        raise rejected(f"{FIELD}.json_schema must be an object with a name and a schema")
    name = spec.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise rejected(f"{FIELD}.json_schema.name must be 1-64 letters, digits, '_' or '-'")
    schema = spec.get("schema", {})  # optional in OpenAI's API: then any JSON value
    if not isinstance(schema, dict):
        raise rejected(f"{FIELD}.json_schema.schema must be a JSON Schema object")
    if not isinstance(spec.get("strict", False), bool):
        raise rejected(f"{FIELD}.json_schema.strict must be true or false")
    # strict or not, the schema is honoured in full: constrained decoding has no looser mode
    return Format("json_schema", name, _compile(schema))


def _llguidance() -> Any:
    if importlib.util.find_spec("llguidance") is None:
        raise rejected(f"{FIELD} needs the llguidance package, which is not installed: {_INSTALL}")
    import llguidance

    return llguidance


def _compile(schema: dict[str, Any]) -> str:
    llg = _llguidance()
    try:
        grammar: str = llg.LLMatcher.grammar_from_json_schema(schema, overrides=_OPTIONS)
    except (ValueError, TypeError) as exc:
        raise rejected(f"{FIELD}'s schema cannot be read: {_said(str(exc))}") from exc
    failed, messages = llg.LLMatcher.validate_grammar_with_warnings(grammar)
    if failed:
        raise rejected(f"{FIELD}'s schema cannot be honoured: {_said(messages[0])}")
    return grammar


def _said(message: str) -> str:
    """A library message on one line, without the parser state its runtime errors append."""
    said = " ".join(message.split("<state>")[0].split()) or "no reason given"
    return said if len(said) <= _MESSAGE_CHARS else said[: _MESSAGE_CHARS - 1] + "…"


class Vocabulary:
    """A model's tokens as the library reads them, built once per engine (a model's logits past
    the tokenizer's last token are never allowed)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer  # llguidance.LLTokenizer
        self._executor: Any = None
        self._executor_lock = threading.Lock()

    @classmethod
    def of_bytes(cls, *, eos: int, specials: Iterable[int], size: int) -> Vocabulary:
        """A byte-level vocabulary of ``size`` tokens: ids 0-255 are the bytes, ``specials``
        (``eos`` among them) are not text."""
        llg = _llguidance()
        return cls(llg.LLTokenizer(llg.TokenizerWrapper(_Bytes(eos, sorted(specials), size))))

    @classmethod
    def of_tokenizer(cls, tokenizer: Any, *, eos: Iterable[int]) -> Vocabulary:
        """A Hugging Face fast tokenizer's vocabulary, ending at any of the ``eos`` tokens."""
        _llguidance()
        from llguidance.hf import from_tokenizer

        try:
            return cls(from_tokenizer(tokenizer, eos_token=sorted(eos)))
        except ValueError as exc:  # a slow (Python) tokenizer: the library reads fast ones only
            raise rejected(f"{FIELD} cannot be honoured with this model's tokenizer: {exc}") from exc

    def matcher(self, form: Format) -> Matcher:
        """A fresh matcher for one answer in ``form``."""
        llg = _llguidance()
        inner = llg.LLMatcher(self._tokenizer, form.grammar, log_level=0)
        if inner.is_error():
            raise rejected(f"{FIELD}'s schema cannot be honoured: {_said(inner.get_error())}")
        return Matcher(inner)

    @property
    def words(self) -> int:
        """32-bit words in one row's bitmask."""
        return (int(self._tokenizer.vocab_size) + 31) // 32

    def executor(self) -> Any:
        """The library's thread pool that computes a batch's masks together (one per vocabulary)."""
        with self._executor_lock:
            if self._executor is None:
                self._executor = _llguidance().LLExecutor()
            return self._executor


class _Bytes:
    """What ``llguidance.TokenizerWrapper`` reads of a byte-level tokenizer."""

    def __init__(self, eos: int, specials: Sequence[int], size: int) -> None:
        self.eos_token_id = eos
        self.bos_token_id = None
        self.special_token_ids = list(specials)
        # a special token is 0xFF followed by its name (0xFF never starts UTF-8 text)
        named = {t: b"\xff<special_%d>" % t for t in specials}
        self.tokens = [named.get(t, bytes([t]) if t < 256 else b"\xff<unused_%d>" % t) for t in range(size)]

    def __call__(self, text: str | bytes) -> list[int]:
        return list(text.encode() if isinstance(text, str) else text)


class Matcher:
    """Where one answer stands in its grammar; it follows each token the answer takes."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner  # llguidance.LLMatcher

    def advance(self, token: int) -> None:
        """Take ``token`` (never an end-of-turn token: the answer ends there)."""
        if not self._inner.consume_token(token):
            # the mask allowed only what the grammar takes, so this is a bug, not the model's fault
            raise RuntimeError(f"constrained decoding lost its place: {_said(self._inner.get_error())}")

    @property
    def complete(self) -> bool:
        """Whether the text so far is a whole document of the format."""
        return bool(self._inner.is_accepting())


class Masks:
    """The allowed next tokens of a batch's constrained rows, computed together and applied to
    the logits in place.  This module imports no torch (the daemon runs without it): the masks'
    tensors are made through the methods of the logits tensor they are applied to."""

    def __init__(self, vocabulary: Vocabulary, rows: int) -> None:
        self._vocabulary = vocabulary
        self._rows = rows
        self._bits: Any = None  # [rows, words] int32 on the CPU, where the library writes
        self._shifts: Any = None  # 0..31, int32

    def apply(self, logits: Any, matchers: Sequence[Matcher | None]) -> None:
        """Set to ``-inf`` the logits (a ``[rows, vocabulary]`` tensor) of the tokens each row's
        matcher cannot take next; rows whose matcher is ``None`` are left as they are."""
        live = [(m._inner, i) for i, m in enumerate(matchers) if m is not None]
        if not live:
            return
        if self._bits is None:
            cpu = logits.new_empty(0, device="cpu")
            self._bits = cpu.new_full((self._rows, self._vocabulary.words), -1).int().contiguous()
            self._shifts = cpu.new_tensor(range(32)).int()
        bits = self._bits
        # fills row i of the bitmask for each (matcher, i), on the library's threads, GIL dropped
        self._vocabulary.executor().unsafe_compute_mask_ptr(
            live, bits.data_ptr(), bits.shape[1] * 4, bits.shape[0]
        )
        index = bits.new_tensor([i for _, i in live]).long()
        allowed = ((bits[index].unsqueeze(-1) >> self._shifts) & 1).bool().flatten(1)
        size = logits.shape[-1]
        if allowed.shape[1] < size:  # the model has more logits than the tokenizer has tokens
            padded = allowed.new_zeros((allowed.shape[0], size))
            padded[:, : allowed.shape[1]] = allowed
            allowed = padded
        allowed = allowed[:, :size].to(logits.device)
        index = index.to(logits.device)
        logits[index] = logits[index].masked_fill(~allowed, float("-inf"))
