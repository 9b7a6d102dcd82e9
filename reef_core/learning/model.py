"""How a recipe talks to the served model: one synchronous call, unrecorded.

A recipe runs on its worker thread; the daemon lends it a :class:`ModelCaller` that sends
a chat request through reef's own upstream client (translated to the upstream's format,
with reef's key) without recording it, and hands back the answer's text.
:class:`CountingModel` enforces a per-step budget of calls.

``schema`` asks for structured output: ``{"name": <identifier>, "schema": <JSON schema>}``.
The answer is then JSON text meant to match it, but an upstream that refuses schemas is
asked without one, so a recipe still parses (and checks) what comes back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from reef_core.errors import ReefError

__all__ = ["BudgetExhausted", "CountingModel", "ModelCaller"]


class ModelCaller(Protocol):
    def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        system: str | None = None,
        max_tokens: int = 4096,
        timeout: float = 300.0,
        schema: dict[str, Any] | None = None,
    ) -> str: ...


class BudgetExhausted(ReefError):
    code = "budget_exhausted"


class CountingModel:
    """A :class:`ModelCaller` that refuses the call past ``limit``; counts what was used."""

    def __init__(self, model: ModelCaller, limit: int) -> None:
        self.model = model
        self.limit = limit
        self.calls = 0

    def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        system: str | None = None,
        max_tokens: int = 4096,
        timeout: float = 300.0,
        schema: dict[str, Any] | None = None,
    ) -> str:
        if self.calls >= self.limit:
            raise BudgetExhausted(f"the step used its {self.limit} model calls")
        self.calls += 1
        return self.model.complete(
            messages, system=system, max_tokens=max_tokens, timeout=timeout, schema=schema
        )
