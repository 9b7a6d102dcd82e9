"""The daemon's log lines: plain text (the default), or one JSON object a line for a collector.

``--log-format json`` (``ops.log-format``): every line is ``{"time", "level", "logger",
"message"}``, and a line written while a request is answered also carries that request's
``request_id`` (its ``x-request-id`` header, else one made here and sent back in the same
header), its ``scenario`` (the header's, else the one in its ``/s/<scenario>/`` path) and, once
the exchange is committed, its ``receipt``.  Each request ends with one ``request`` line:
method, path (without the query: a page key travels there), status and milliseconds.  In text
mode no line per request is written, as before.

Nothing secret reaches a line: no header but ``x-request-id`` is read, and messages are the
daemon's own (tokens are never logged, see ``auth``).  The context is a :class:`ContextVar`, so
it follows a request's task and the threads ``asyncio.to_thread`` starts for it, and nothing else.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from reef_core.daemon.context import Answered, Handler, answer, scenario_of

__all__ = [
    "FORMATS",
    "REQUEST_ID_HEADER",
    "JsonFormatter",
    "configure",
    "context_middleware",
    "note_receipt",
    "request_id",
]

FORMATS = ("text", "json")
REQUEST_ID_HEADER = "x-request-id"
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_CONTEXT: ContextVar[dict[str, str] | None] = ContextVar("reef_request", default=None)
log = logging.getLogger("reef.request")


class JsonFormatter(logging.Formatter):
    """One JSON object a line: the record's fields, then the request's context."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(_CONTEXT.get() or {})
        line.update(getattr(record, "reef", None) or {})
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure(log_format: str) -> None:
    """The root logger's one handler, on stderr, in ``log_format`` (:data:`FORMATS`)."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def request_id() -> str:
    """The id of the request being answered ("" outside one)."""
    return (_CONTEXT.get() or {}).get("request_id", "")


def note_receipt(receipt: str) -> None:
    """The exchange being answered was committed as ``receipt`` (for its log lines)."""
    context = _CONTEXT.get()
    if context is not None:
        context["receipt"] = receipt


def context_middleware(*, access_lines: bool) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Each request's log context; with ``access_lines``, its ``request`` line at the end."""

    @web.middleware
    async def within(request: web.Request, handler: Handler):
        given = request.headers.get(REQUEST_ID_HEADER, "")
        request_id = given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex[:16]
        context = {"request_id": request_id}
        scenario = scenario_of(request)
        if scenario:
            context["scenario"] = scenario
        token = _CONTEXT.set(context)
        started = time.perf_counter()
        answered = Answered()
        try:
            response = await answer(request, handler, answered)
            if not response.prepared:
                response.headers[REQUEST_ID_HEADER] = request_id
            return response
        finally:
            if access_lines:
                took = round((time.perf_counter() - started) * 1000, 2)
                status = answered.status
                detail = {"method": request.method, "path": request.path, "status": status, "ms": took}
                log.info("%s %s %d", request.method, request.path, status, extra={"reef": detail})
            _CONTEXT.reset(token)

    return within
