"""Reading what every route reads: a JSON object body, and the scenario header."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from reef_core.errors import InvalidInput
from reef_core.ids import validate_scenario_name

__all__ = ["json_body", "scenario_header"]


def scenario_header(request: web.Request) -> str:
    raw = request.headers.get("x-reef-scenario", "").strip()
    if not raw:
        raise InvalidInput("the x-reef-scenario header is required", field="x-reef-scenario")
    return validate_scenario_name(raw, field="x-reef-scenario")


async def json_body(request: web.Request) -> tuple[bytes, dict[str, Any]]:
    raw = await request.read()
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise InvalidInput(f"the request body is not valid JSON: {exc}", field="body") from None
    if not isinstance(body, dict):
        raise InvalidInput("the request body must be a JSON object", field="body")
    return raw, body
