"""How a recipe talks to the served model: one synchronous call, unrecorded.

A recipe runs on its worker thread; the daemon lends it a :class:`ModelCaller` that sends
a chat request through reef's own upstream client (translated to the upstream's format,
with reef's key) without recording it, and hands back the answer's text.
:class:`CountingModel` enforces a per-step budget of calls.

Every caller is a :class:`ModelCaller`: recipes call :meth:`ModelCaller.complete`, the one
signature of a model call, and each kind of caller (the daemon's upstream, the budget, a
bench's scripted model) answers the :class:`ModelCall` it is handed in :meth:`ModelCaller.answer`.

``schema`` asks for structured output: ``{"name": <identifier>, "schema": <JSON schema>}``.
The answer is then JSON text meant to match it, but an upstream that refuses schemas is
asked without one, so a recipe still parses (and checks) what comes back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reef_core.errors import ReefError

__all__ = ["BudgetExhausted", "CountingModel", "ModelCall", "ModelCaller"]


@dataclass(frozen=True)
class ModelCall:
    """One call to the served model, as :meth:`ModelCaller.complete` was given it."""

    messages: Sequence[Mapping[str, str]]
    system: str | None = None
    max_tokens: int = 4096
    timeout: float = 300.0
    schema: dict[str, Any] | None = None


class ModelCaller(ABC):
    """The served model as a recipe calls it (see the module docstring)."""

    def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        system: str | None = None,
        max_tokens: int = 4096,
        timeout: float = 300.0,
        schema: dict[str, Any] | None = None,
    ) -> str:
        """The answer's text to ``messages`` (after ``system``), within ``timeout`` seconds."""
        return self.answer(ModelCall(messages, system, max_tokens, timeout, schema))

    @abstractmethod
    def answer(self, call: ModelCall) -> str:
        """The answer's text to ``call``."""


class BudgetExhausted(ReefError):
    code = "budget_exhausted"


class CountingModel(ModelCaller):
    """A :class:`ModelCaller` that refuses the call past ``limit``; counts what was used."""

    def __init__(self, model: ModelCaller, limit: int) -> None:
        self.model = model
        self.limit = limit
        self.calls = 0

    def answer(self, call: ModelCall) -> str:
        if self.calls >= self.limit:
            raise BudgetExhausted(f"the step used its {self.limit} model calls")
        self.calls += 1
        return self.model.complete(
            call.messages,
            system=call.system,
            max_tokens=call.max_tokens,
            timeout=call.timeout,
            schema=call.schema,
        )
