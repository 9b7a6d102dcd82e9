"""Checks on the JSON a client or upstream sent: the shape translation expects, or a refusal.

Owns: ``expect_object``, ``expect_array``, ``expect_number`` and ``expect_name`` (an id or a
name: a non-empty string), which raise ``InvalidInput`` naming the field
(``messages[2].content``) so the caller learns where its body went wrong.
Does not own: what the values mean (the translators that call these).
"""

from __future__ import annotations

from typing import Any

from reef_core.errors import InvalidInput

__all__ = ["expect_array", "expect_name", "expect_number", "expect_object"]


def expect_object(value: Any, where: str) -> dict[str, Any]:
    """``value``, if it is a JSON object."""
    if not isinstance(value, dict):
        raise InvalidInput("expected a JSON object", field=where)
    return value


def expect_array(value: Any, where: str) -> list[Any]:
    """``value``, if it is a JSON array."""
    if not isinstance(value, list):
        raise InvalidInput("expected a JSON array", field=where)
    return value


def expect_number(value: Any, where: str) -> float:
    """``value`` as a float, if it is a JSON number (booleans are not)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput("expected a number", field=where)
    return float(value)


def expect_name(value: Any, where: str, refusal: str) -> str:
    """``value``, if it is a non-empty string (an id or a name); else ``refusal``, naming ``where``."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(refusal, field=where)
    return value
