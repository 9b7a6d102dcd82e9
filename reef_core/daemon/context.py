"""What every handler reaches through the app: settings, open scenarios, the upstream."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from reef_core.config import Settings
from reef_core.daemon.learners import Learners
from reef_core.daemon.registry import OpenScenarios
from reef_core.daemon.reports import KeyedDesk, ReportDesk
from reef_core.upstream.seam import Answerer

__all__ = ["DAEMON", "Daemon", "daemon_of", "request_key"]


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
