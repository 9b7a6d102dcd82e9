"""One error tree for the whole library.

    ReefError                 anything reef raises on purpose
    ├── ConfigError           a setting is unknown, malformed or unreadable (names the key)
    ├── InvalidInput          a value from outside fails validation (names the field)
    ├── NotFound              a scenario, item, release or candidate that does not exist
    ├── ConflictError         a compare-and-swap lost: someone else moved the ref first
    │   └── ScenarioLocked    another process already writes this scenario
    ├── Unauthorized          a request without a valid token
    ├── PayloadTooLarge       a request body over the configured limit
    ├── ForeignRequest        a browser's request from another site (Host or Origin not ours)
    ├── UnsupportedMediaType  a body that is not JSON sent to a JSON route
    ├── LimitReached          a configured cap (scenarios) would be passed: the setting named
    ├── StoreError            the repository could not be read or written
    │   ├── DiskFull          the file system under the state directory has no room left
    │   ├── OutOfFiles        the process is at its open-file limit: try again shortly (503)
    │   └── RemoteError       a git remote could not be reached or refused us (URL redacted)
    └── UpstreamError         the model endpoint failed us
        ├── UpstreamRejected  it answered 4xx (status and body kept, relayed to the caller)
        ├── UpstreamUnavailable  connection refused or reset, 5xx, no upstream configured
        │   ├── EngineExited  a managed SGLang server ended or never got ready (log tail kept)
        │   └── UpstreamTooLarge  its answer ran past inference.max-answer-bytes
        ├── UpstreamTimeout   it did not answer in time
        ├── WeightSwapError   an SGLang hot-swap did not take effect (the failed stage named)
        └── TokenCaptureError  SGLang answered without the token ids and logprobs asked for

Each class names its HTTP status (``http_status``), which the daemon answers with and the
client reads back; the CLI maps them to exit codes in one place;
everything else stays in domain terms.  Third-party errors (pygit2, OSError) are translated
where they occur, with ``raise … from exc`` so the cause is never lost.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ConflictError",
    "DiskFull",
    "EngineExited",
    "ForeignRequest",
    "InvalidInput",
    "LimitReached",
    "NotFound",
    "OutOfFiles",
    "PayloadTooLarge",
    "ReefError",
    "RemoteError",
    "ScenarioLocked",
    "StoreError",
    "TokenCaptureError",
    "Unauthorized",
    "UnsupportedMediaType",
    "UpstreamError",
    "UpstreamRejected",
    "UpstreamTimeout",
    "UpstreamTooLarge",
    "UpstreamUnavailable",
    "WeightSwapError",
]


class ReefError(Exception):
    """Base of every error reef raises on purpose."""

    #: a short machine-readable code, used in HTTP error bodies and ``--json`` output
    code = "reef_error"
    #: what the daemon answers with when this reaches a route
    http_status = 500

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class ConfigError(ReefError):
    code = "config_error"
    http_status = 400


class InvalidInput(ReefError):
    code = "invalid_input"
    http_status = 400


class NotFound(ReefError):
    code = "not_found"
    http_status = 404


class ConflictError(ReefError):
    code = "conflict"
    http_status = 409


class ScenarioLocked(ConflictError):
    code = "scenario_locked"
    http_status = 503


class Unauthorized(ReefError):
    code = "unauthorized"
    http_status = 401


class PayloadTooLarge(ReefError):
    code = "payload_too_large"
    http_status = 413


class ForeignRequest(ReefError):
    """A request a web page sent (403): its ``Host`` is no name of this daemon (DNS rebinding)
    or its ``Origin`` is another site's; the message names the setting that would allow it."""

    code = "foreign_request"
    http_status = 403


class UnsupportedMediaType(ReefError):
    """A body sent to a JSON route without a JSON ``Content-Type`` (415)."""

    code = "unsupported_media_type"
    http_status = 415


class LimitReached(ReefError):
    """A configured cap would be passed (403); the message names the setting that raises it."""

    code = "limit_reached"
    http_status = 403


class StoreError(ReefError):
    code = "store_error"


class DiskFull(StoreError):
    """No space left under the state directory (507, Insufficient Storage): nothing was
    stored, and writes resume by themselves once space is freed."""

    code = "disk_full"
    http_status = 507

    def __init__(self, message: str, *, free_bytes: int | None, state_dir: str) -> None:
        super().__init__(message)
        self.free_bytes = free_bytes
        self.state_dir = state_dir


class OutOfFiles(StoreError):
    """The process is at (or too near) its open-file limit (503, with ``Retry-After``): nothing
    was stored, and the same request succeeds once descriptors are free again."""

    code = "out_of_files"
    http_status = 503

    def __init__(self, message: str, *, retry_after: float = 1.0, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.retry_after = retry_after


class RemoteError(StoreError):
    """A scenario's git remote was unreachable, refused our credentials or failed (502); the
    message names the remote, its URL without any password."""

    code = "remote_error"
    http_status = 502


class UpstreamError(ReefError):
    code = "upstream_error"


class UpstreamRejected(UpstreamError):
    """The upstream refused the request (4xx); its status and body are relayed."""

    code = "upstream_rejected"

    def __init__(self, message: str, *, status: int, body: bytes, content_type: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        self.content_type = content_type


class UpstreamUnavailable(UpstreamError):
    code = "upstream_unavailable"
    http_status = 502


class UpstreamTooLarge(UpstreamUnavailable):
    """The upstream's answer ran past ``inference.max-answer-bytes`` (502): it was not read on."""

    code = "upstream_too_large"


class UpstreamTimeout(UpstreamError):
    code = "upstream_timeout"
    http_status = 504


class EngineExited(UpstreamUnavailable):
    """The managed SGLang server process ended (or never got ready); the log tail says why."""

    code = "engine_exited"

    def __init__(self, message: str, *, returncode: int | None, log_tail: str) -> None:
        super().__init__(message)
        self.returncode = returncode
        self.log_tail = log_tail


class WeightSwapError(UpstreamError):
    """An SGLang hot-swap did not take effect; ``stage`` names the step that failed."""

    code = "weight_swap_failed"

    def __init__(self, message: str, *, stage: str, server_message: str = "") -> None:
        super().__init__(message)
        self.stage = stage
        self.server_message = server_message


class TokenCaptureError(UpstreamError):
    """SGLang answered, but without the token ids and logprobs reef asked for."""

    code = "token_capture_failed"
