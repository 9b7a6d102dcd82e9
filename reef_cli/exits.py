"""The one place where reef's errors become exit codes and readable lines.

0 ok · 1 failure · 2 usage (bad input, bad configuration) · 3 conflict
"""

from __future__ import annotations

from reef_core.errors import ConfigError, ConflictError, InvalidInput, ReefError

__all__ = [
    "CONFLICT",
    "FAILURE",
    "OK",
    "USAGE",
    "exit_code",
]

OK, FAILURE, USAGE, CONFLICT = 0, 1, 2, 3


def exit_code(error: BaseException) -> int:
    if isinstance(error, ConflictError):
        return CONFLICT
    if isinstance(error, (InvalidInput, ConfigError)):
        return USAGE
    if isinstance(error, ReefError):
        return FAILURE
    return FAILURE
