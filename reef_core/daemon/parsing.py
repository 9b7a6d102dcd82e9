"""Reading what every route reads: a JSON object body, and the scenario header."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from reef_core import jsonio
from reef_core.errors import InvalidInput, PayloadTooLarge, UnsupportedMediaType
from reef_core.ids import validate_scenario_name

__all__ = [
    "MAX_JSON_DEPTH",
    "inference_scenario",
    "json_body",
    "known_fields",
    "scenario_header",
    "scenario_of_read",
]


#: the nesting limit of JSON bodies (``reef.max-json-depth``), set by ``build_app``
MAX_JSON_DEPTH = web.AppKey("reef.max_json_depth", int)


def scenario_header(request: web.Request) -> str:
    raw = request.headers.get("x-reef-scenario", "").strip()
    if not raw:
        raise InvalidInput("the x-reef-scenario header is required", field="x-reef-scenario")
    return validate_scenario_name(raw, field="x-reef-scenario")


def inference_scenario(request: web.Request, default: str | None) -> str:
    """The scenario of an inference request: the ``x-reef-scenario`` header, else the
    ``/s/<scenario>/`` its URL starts with (a client that can set only a base URL), else
    ``default`` (``reef.default-scenario``).  The header beats the path, the path the default."""
    if request.headers.get("x-reef-scenario", "").strip():
        return scenario_header(request)
    named = request.match_info.get("scenario")
    if named is not None:
        return validate_scenario_name(named, field="scenario")
    if default:
        return default
    raise InvalidInput(
        "name the scenario: the x-reef-scenario header, a base URL with /s/<scenario> in it "
        "(http://127.0.0.1:8900/s/myproject/v1), or reef.default-scenario",
        field="x-reef-scenario",
    )


def scenario_of_read(request: web.Request) -> str:
    """The scenario of a read: the header, or ``?scenario=`` (browsers and ``curl | sh`` links
    cannot send headers)."""
    if "x-reef-scenario" in request.headers:
        return scenario_header(request)
    value = request.query.get("scenario")
    if not value:
        raise InvalidInput("name the scenario: the x-reef-scenario header or ?scenario=", field="scenario")
    return validate_scenario_name(value, field="scenario")


async def json_body(
    request: web.Request, *, max_bytes: int | None = None, extra_depth: int = 0
) -> tuple[bytes, dict[str, Any]]:
    """Every JSON body reef reads comes through here: one content type (JSON's), one size limit
    (aiohttp's, or a route's own ``max_bytes``), one nesting limit (``reef.max-json-depth``, plus
    ``extra_depth`` on a route that wraps bodies in its own envelope)."""
    _json_typed(request)
    if max_bytes is not None and (request.content_length or 0) > max_bytes:
        raise _too_large(request.content_length or 0, max_bytes, request.path)
    raw = await request.read()
    if max_bytes is not None and len(raw) > max_bytes:
        raise _too_large(len(raw), max_bytes, request.path)
    limit = request.app[MAX_JSON_DEPTH] + extra_depth
    try:
        body = jsonio.loads(raw, max_depth=limit)
    except jsonio.TooDeep:
        raise InvalidInput(
            f"the request body nests arrays and objects deeper than {limit} levels "
            "(the limit is reef.max-json-depth)",
            field="body",
        ) from None
    except ValueError as exc:
        raise InvalidInput(f"the request body is not valid JSON: {exc}", field="body") from None
    if not isinstance(body, dict):
        raise InvalidInput("the request body must be a JSON object", field="body")
    return raw, body


def _json_typed(request: web.Request) -> None:
    """A 415 unless the body says it is JSON (``application/json`` or ``application/*+json``,
    any parameters).  A web page's ``fetch(…, {mode: "no-cors"})`` may send only ``text/plain``,
    a form or no type, so this keeps every JSON route out of a page's reach; every client of
    reef (SDKs, reef's own, the launchers and hooks) says JSON."""
    sent = request.headers.get("Content-Type")
    kind = request.content_type.lower()  # aiohttp's: the media type without parameters
    if sent is not None and (
        kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))
    ):
        return
    said = f"Content-Type {sent.split(';')[0].strip()!r}" if sent and sent.strip() else "no Content-Type"
    raise UnsupportedMediaType(
        f"{request.path} takes a JSON body sent as Content-Type: application/json; this one came with "
        f"{said} (curl: add -H 'content-type: application/json')",
        field="content-type",
    )


def _too_large(size: int, limit: int, path: str) -> PayloadTooLarge:
    return PayloadTooLarge(f"the body is {size} bytes; {path} takes at most {limit} bytes", field="body")


def known_fields(body: Any, known: frozenset[str] | set[str], what: str) -> dict[str, Any]:
    """``body`` as a JSON object with only ``known`` fields; else an error naming the first
    unknown one (``what``: "an ask", "a report")."""
    if not isinstance(body, dict):
        raise InvalidInput(f"{what} must be a JSON object", field="body")
    unknown = sorted(set(body) - known)
    if unknown:
        raise InvalidInput(
            f"unknown {what.split()[-1]} field {unknown[0]!r} (known: {', '.join(sorted(known))})",
            field=unknown[0],
        )
    return body
