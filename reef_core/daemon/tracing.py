"""OpenTelemetry traces, opt-in: ``ops.otlp-endpoint`` (an OTLP/HTTP collector, e.g.
``http://127.0.0.1:4318``), with the SDK from the ``otel`` extra (``pip install 'reef[otel]'``).

What is traced:

- **Each request**: one server span (``POST /v1/chat/completions``: the route's pattern, its
  method, status and scenario), with children on the inference routes for ``parse`` (the body
  read and checked), ``upstream`` (the request to the upstream until its answer's last byte;
  a stream's relay to the client happens within it, as the chunks arrive), ``relay`` (the
  answer translated and sent, for a plain answer) and ``record`` (the commit).  The trace id goes
  into the record (``trace_id``), so a span leads to its commit and a commit to its spans.
- **Each learning step**: a ``learning step`` span (scenario, step, verdict) with a child per
  check (its name, passed).  The worker times the step and each check; the spans are made when
  the step settles, with those times: a check's span ends where the next begins, the last at the
  step's end (the checks run one after another at the end of a step).

Spans leave in batches from the SDK's own thread (``BatchSpanProcessor``), so a slow or
unreachable collector never slows or fails a request: its queue is bounded and drops spans when
full.  Export failures are logged once a minute at most, here; the SDK's own exporter loggers
are quieted, or a down collector would log every batch.

Without ``ops.otlp-endpoint`` nothing here runs: :data:`OFF` makes no span and costs one
attribute check per call.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, cast

from aiohttp import web

from reef_core.daemon.context import Answered, Handler, answer, request_key, route_of, scenario_of
from reef_core.errors import ConfigError

__all__ = ["OFF", "TRACING", "Tracing", "span", "trace_id", "tracing_middleware"]

log = logging.getLogger(__name__)

#: seconds between two log lines about spans that could not be exported
LOG_EVERY_S = 60.0
_SPAN: Any = request_key("reef.span", object)  # the request's server span


class Tracing:
    """The tracer of one daemon, or none (:data:`OFF`)."""

    def __init__(self, endpoint: str | None, *, service: str = "reef") -> None:
        self.endpoint = endpoint
        self.tracer: Any = None
        self._provider: Any = None
        if not endpoint:
            return
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            raise ConfigError(
                f"ops.otlp-endpoint needs OpenTelemetry's SDK ({exc.name} is missing): "
                "pip install 'reef[otel]'",
                field="ops.otlp_endpoint",
            ) from exc
        for name in ("opentelemetry.exporter.otlp.proto.http", "opentelemetry.sdk.trace.export"):
            logging.getLogger(name).setLevel(logging.CRITICAL)  # _Exporter says it, once a minute
        exporter = _Exporter(OTLPSpanExporter(endpoint=f"{endpoint.rstrip('/')}/v1/traces", timeout=5))
        self._provider = TracerProvider(resource=Resource.create({"service.name": service}))
        # _Exporter is a SpanExporter by shape (the SDK is imported here only, when tracing is on)
        self._provider.add_span_processor(BatchSpanProcessor(cast(Any, exporter), max_queue_size=4096))
        self.tracer = self._provider.get_tracer("reef")

    @property
    def on(self) -> bool:
        return self.tracer is not None

    def step(self, scenario: str, outcome: Any) -> None:
        """The spans of one settled learning step (``StepOutcome``), from its recorded times."""
        if self.tracer is None:
            return
        end = int(outcome.finished_at * 1e9)
        start = end - int(outcome.seconds * 1e9)
        attributes = {"reef.scenario": scenario, "reef.step": outcome.step, "reef.verdict": outcome.verdict}
        root = self.tracer.start_span("learning step", start_time=start, attributes=attributes)
        from opentelemetry import trace

        context = trace.set_span_in_context(root)
        check_end = end
        for check in reversed(outcome.checks):
            check_start = max(start, check_end - int(check.seconds * 1e9))
            child = self.tracer.start_span(
                f"check {check.name}",
                context=context,
                start_time=check_start,
                attributes={"reef.check": check.name, "reef.passed": check.passed},
            )
            child.end(end_time=check_end)
            check_end = check_start
        root.end(end_time=end)

    def shutdown(self) -> None:
        if self._provider is not None:
            self._provider.shutdown()


OFF = Tracing(None)
TRACING = web.AppKey("reef.tracing", Tracing)


class _Exporter:
    """The OTLP exporter, its failures logged once a minute at most (with how many batches)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self._failed = 0
        self._logged_at: float | None = None

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            result = self.inner.export(spans)
        except Exception as exc:  # the SDK's exporter should not raise; if it does, say so the same way
            result, reason = SpanExportResult.FAILURE, str(exc)
        else:
            reason = ""
        if result != SpanExportResult.SUCCESS:
            self._note(len(spans), reason)
        return result

    def _note(self, spans: int, reason: str) -> None:
        now = time.monotonic()
        with self._lock:
            self._failed += spans
            if self._logged_at is not None and now - self._logged_at < LOG_EVERY_S:
                return
            failed, self._failed, self._logged_at = self._failed, 0, now
        log.warning(
            "traces: %d spans could not be sent to the OTLP endpoint%s (said once a minute at most)",
            failed,
            f": {reason}" if reason else "",
        )

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


def tracing_middleware(tracing: Tracing) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Each request's server span (only when tracing is on: else the app has no such middleware)."""
    from opentelemetry.trace import SpanKind, Status, StatusCode

    @web.middleware
    async def traced(request: web.Request, handler: Handler):
        route = route_of(request)
        attributes = {"http.request.method": request.method, "http.route": route}
        scenario = scenario_of(request)
        if scenario:
            attributes["reef.scenario"] = scenario
        with tracing.tracer.start_as_current_span(
            f"{request.method} {route}", kind=SpanKind.SERVER, attributes=attributes
        ) as server:
            request[_SPAN] = server
            answered = Answered()
            try:
                return await answer(request, handler, answered)
            finally:
                server.set_attribute("http.response.status_code", answered.status)
                if answered.status >= 500:
                    server.set_status(Status(StatusCode.ERROR))

    return traced


@contextlib.contextmanager
def span(request: web.Request, name: str) -> Iterator[None]:
    """A child span of the request's, named ``name``; nothing when tracing is off."""
    tracing = request.app.get(TRACING)
    if tracing is None or tracing.tracer is None or _SPAN not in request:
        yield
        return
    with tracing.tracer.start_as_current_span(name):
        yield


def trace_id(request: web.Request) -> str | None:
    """The request's trace id (32 hex digits), or None when tracing is off."""
    server = request.get(_SPAN)
    if server is None:
        return None
    return f"{server.get_span_context().trace_id:032x}"
