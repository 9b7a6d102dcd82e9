"""What every handler reaches through the app: settings, open scenarios, the upstream."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from reef_core.config import Settings
from reef_core.daemon.learners import Learners
from reef_core.daemon.registry import OpenScenarios
from reef_core.daemon.reports import KeyedDesk, ReportDesk
from reef_core.upstream.seam import Answerer

__all__ = [
    "DAEMON",
    "Answered",
    "Daemon",
    "Handler",
    "answer",
    "daemon_of",
    "request_key",
    "route_of",
    "scenario_of",
]


@dataclass
class Daemon:
    settings: Settings
    scenarios: OpenScenarios
    upstream: Answerer  # an HTTP upstream, or the embedded engine behind the same seam
    reports: ReportDesk
    asks: KeyedDesk
    records: KeyedDesk  # records imported under the client's own ids (records_routes.py)
    learners: Learners
    upstream_format: str = "openai"
    engine: Any = None  # the embedded model engine, when it serves
    inference_in_flight: int = 0  # requests on the inference routes being answered now
    started: float = field(default_factory=time.time)


DAEMON = web.AppKey("reef.daemon", Daemon)


def daemon_of(request: web.Request) -> Daemon:
    return request.app[DAEMON]


def request_key(name: str, kind: type) -> Any:
    """A key for a value a middleware and a handler share on the request: aiohttp's
    ``RequestKey`` where it has them (3.12 on), else the plain string older ones take."""
    maker = getattr(web, "RequestKey", None)
    return maker(name, kind) if maker is not None else name


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def route_of(request: web.Request) -> str:
    """The request's route as the app declares it (``/v1/chat/completions``,
    ``/reef/scenarios/{name}/releases``): a bounded name for metrics and spans."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def scenario_of(request: web.Request) -> str | None:
    """The scenario a request names (its header, else its path), cut to 64 characters."""
    scenario = request.headers.get("x-reef-scenario") or request.match_info.get("scenario")
    return scenario[:64] if scenario else None


class Answered:
    """The status a client got from a middleware's handler (:func:`answer`): 500 until known."""

    status = 500


async def answer(request: web.Request, handler: Handler, answered: Answered) -> web.StreamResponse:
    """``handler``'s answer to ``request``, its status (or that of the HTTP error it raised) in
    ``answered``, so a middleware's ``finally`` reads what the client got."""
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        answered.status = exc.status
        raise
    answered.status = response.status
    return response
