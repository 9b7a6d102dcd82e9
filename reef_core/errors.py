"""One error tree for the whole library.

    ReefError                 anything reef raises on purpose
    ├── ConfigError           a setting is unknown, malformed or unreadable (names the key)
    ├── InvalidInput          a value from outside fails validation (names the field)
    ├── NotFound              a scenario, item, release or candidate that does not exist
    ├── ConflictError         a compare-and-swap lost: someone else moved the ref first
    │   └── ScenarioLocked    another process already writes this scenario
    └── StoreError            the repository could not be read or written

The daemon maps these to HTTP statuses in one table and the CLI to exit codes in one place;
everything else stays in domain terms.  Third-party errors (pygit2, OSError) are translated
where they occur, with ``raise … from exc`` so the cause is never lost.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ConflictError",
    "InvalidInput",
    "NotFound",
    "ReefError",
    "ScenarioLocked",
    "StoreError",
]


class ReefError(Exception):
    """Base of every error reef raises on purpose."""

    #: a short machine-readable code, used in HTTP error bodies and ``--json`` output
    code = "reef_error"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class ConfigError(ReefError):
    code = "config_error"


class InvalidInput(ReefError):
    code = "invalid_input"


class NotFound(ReefError):
    code = "not_found"


class ConflictError(ReefError):
    code = "conflict"


class ScenarioLocked(ConflictError):
    code = "scenario_locked"


class StoreError(ReefError):
    code = "store_error"
