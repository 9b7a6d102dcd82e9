"""The one table from reef's errors to HTTP, applied as middleware.

Every error leaves in the caller's own envelope: Anthropic's for ``/v1/messages…``, OpenAI's
for the other ``/v1`` routes and for reef's own routes (with ``param`` naming the field).
An error reef did not expect is logged with its traceback and answered with a plain 500
that leaks nothing.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable

from aiohttp import web

from reef_core.errors import (
    DiskFull,
    PayloadTooLarge,
    ReefError,
    UpstreamRejected,
)
from reef_core.wire import anthropic as anthropic_wire
from reef_core.wire import openai as openai_wire

__all__ = ["error_middleware", "error_response", "status_of"]

log = logging.getLogger(__name__)

# the error "type" each envelope uses for a status
_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "invalid_request_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "api_error",
    507: "api_error",
}


def status_of(error: ReefError) -> int:
    return error.status if isinstance(error, UpstreamRejected) else error.http_status


_SCOPED = re.compile(r"^/s/[^/]*")  # the /s/<scenario> an inference route may sit under


def _is_anthropic(request: web.Request) -> bool:
    """An Anthropic route (also under ``/s/<scenario>/``): its errors take Anthropic's shape."""
    return _SCOPED.sub("", request.path, count=1).startswith("/v1/messages")


def error_response(
    request: web.Request, status: int, message: str, *, field: str | None = None, code: str | None = None
) -> web.Response:
    if _is_anthropic(request):
        body = anthropic_wire.error_body(message, _ANTHROPIC_TYPES.get(status, "api_error"))
    else:
        body = openai_wire.error_body(
            message,
            _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error"),
            code=code,
            param=field,
        )
    return web.json_response(body, status=status)


def _relay_rejection(request: web.Request, error: UpstreamRejected) -> web.Response:
    """A 4xx from the upstream: its own body when the caller speaks the same format, else its
    message re-wrapped in the caller's envelope (same status)."""
    try:
        parsed = json.loads(error.body)
    except ValueError:
        parsed = None
    speaks_anthropic = isinstance(parsed, dict) and parsed.get("type") == "error"
    speaks_openai = (
        isinstance(parsed, dict) and isinstance(parsed.get("error"), dict) and not speaks_anthropic
    )
    if (speaks_anthropic and _is_anthropic(request)) or (speaks_openai and not _is_anthropic(request)):
        return web.Response(body=error.body, status=error.status, content_type="application/json")
    message = error.message
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        message = str(parsed["error"].get("message") or message)
    return error_response(request, error.status, message)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except UpstreamRejected as exc:
        return _relay_rejection(request, exc)
    except ReefError as exc:
        status = status_of(exc)
        if status >= 500 and not isinstance(exc, DiskFull):  # that one the store logs once a minute
            log.warning("%s %s -> %d: %s", request.method, request.path, status, exc.message)
        return error_response(request, status, exc.message, field=exc.field, code=exc.code)
    except web.HTTPRequestEntityTooLarge as exc:
        return error_response(
            request, 413, f"request body too large: {exc.text or 'over the limit'}", code=PayloadTooLarge.code
        )
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(request, exc.status, exc.reason, code="http_error")
    except Exception:
        log.exception("unexpected error on %s %s", request.method, request.path)
        return error_response(request, 500, "internal error in reef (see the daemon's log)", code="internal")
