"""``GET /metrics``: the daemon's counters in Prometheus's text format (prometheus_client's).

One registry per daemon (not prometheus_client's global one: two daemons in one process, as in
the tests, count apart).  Behind the same auth as every route but ``/healthz``: a scraper sends
the token (``authorization: Bearer …`` in its scrape config).

| metric | kind | what |
|---|---|---|
| ``reef_http_requests_total`` | counter | by ``route`` (its pattern: ``/s/{scenario}/…``) and ``status`` |
| ``reef_added_latency_seconds`` | histogram | by ``route``: an inference request's time in reef, |
|                                |           | its upstream's time taken out |
| ``reef_upstream_latency_seconds`` | histogram | by ``route``: to the upstream answer's last byte |
| ``reef_records_written_total`` | counter | exchanges committed with their receipt (``scenario``: opt-in) |
| ``reef_learning_steps_total`` | counter | by ``verdict``: selected, pending, canary, rejected, skipped |
| ``reef_learning_step_seconds`` | histogram | a learning step, from its batch to its verdict |
| ``reef_syncs_total`` | counter | by ``outcome``: ok, conflict, unreachable, auth, failed (one a remote) |
| ``reef_sync_lag_seconds`` | gauge | the longest time since a scenario last synced ``ok`` (0: none yet) |
| ``reef_group_commit_size`` | histogram | items per group commit (one pack each) |
| ``reef_repacks_total`` | counter | background repacks of a data branch's packs into one |
| ``reef_writer_queue_depth`` | gauge | items submitted and not yet written, all open scenarios |
| ``reef_open_scenarios`` | gauge | scenarios open for writing now |
| ``reef_disk_full`` | gauge | 1 while writes fail for lack of space |

Label cardinality stays bounded: routes are the daemon's own patterns (an unknown path counts as
``unmatched``), statuses are HTTP's, and no metric has a scenario label unless an operator opts
in with ``ops.metrics-scenario-label`` (a deployment with a few scenarios may want them; one with
thousands would make every scrape that long).

The timing comes from the metrics middleware, the outermost (outside the error table), so every
answer is counted with the status its client got; "added" is the handler's time less what the
inference route spent waiting on its upstream (:func:`note_upstream`), so it leaves out what
aiohttp did before the handler (reading the request line and headers), which
``bench/proxy.py`` measures from outside.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from reef_core.daemon.context import Answered, Handler, answer, request_key, route_of

__all__ = ["METRICS", "Metrics", "metrics_middleware", "note_upstream", "routes"]

routes = web.RouteTableDef()

#: where the inference route leaves the seconds it waited on its upstream, for the middleware
_UPSTREAM_S: Any = request_key("reef.upstream_s", float)
#: added latency is fractions of a millisecond to a few; the upstream's is seconds to minutes
_ADDED_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
_UPSTREAM_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_STEP_BUCKETS = (0.1, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
#: a step's verdict is its first word ("rejected: reviewer" counts as rejected): a bounded label
VERDICTS = ("selected", "pending", "canary", "rejected", "skipped")
SYNC_OUTCOMES = ("ok", "conflict", "unreachable", "auth", "failed")


class Metrics:
    """The daemon's metrics: counters the handlers bump, gauges read at each scrape."""

    def __init__(
        self,
        *,
        enabled: bool = True,
        scenario_label: bool = False,
        gauges: Callable[[], dict[str, float]] | None = None,
    ):
        self.enabled = enabled  # off (``ops.metrics = false``): nothing is counted or served
        self.registry = CollectorRegistry(auto_describe=True)
        self.scenario_label = scenario_label
        self.requests = Counter(
            "reef_http_requests",
            "HTTP requests answered, by route pattern and status",
            ["route", "status"],
            registry=self.registry,
        )
        self.added = Histogram(
            "reef_added_latency_seconds",
            "An inference request's time in reef, its upstream's time taken out",
            ["route"],
            buckets=_ADDED_BUCKETS,
            registry=self.registry,
        )
        self.upstream = Histogram(
            "reef_upstream_latency_seconds",
            "An inference request's time waiting on its upstream, to the answer's last byte",
            ["route"],
            buckets=_UPSTREAM_BUCKETS,
            registry=self.registry,
        )
        self.records = Counter(
            "reef_records_written",
            "Exchanges committed to a data branch (each acknowledged with its receipt)",
            ["scenario"] if scenario_label else [],
            registry=self.registry,
        )
        self.steps = Counter(
            "reef_learning_steps",
            "Learning steps settled, by verdict",
            ["verdict"],
            registry=self.registry,
        )
        self.step_seconds = Histogram(
            "reef_learning_step_seconds",
            "A learning step's time, from its batch to its verdict",
            buckets=_STEP_BUCKETS,
            registry=self.registry,
        )
        self.syncs = Counter(
            "reef_syncs",
            "Syncs of a scenario with one git remote, by outcome",
            ["outcome"],
            registry=self.registry,
        )
        self.batches = Histogram(
            "reef_group_commit_size",
            "Items per group commit (each commit group is one pack)",
            buckets=_BATCH_BUCKETS,
            registry=self.registry,
        )
        self.repacks = Counter(
            "reef_repacks", "Background repacks of a data branch's packs", registry=self.registry
        )
        if gauges is not None:
            self.registry.register(_Gauges(gauges))

    def recorded(self, scenario: str) -> None:
        """One exchange committed in ``scenario``."""
        if self.enabled:
            (self.records.labels(scenario) if self.scenario_label else self.records).inc()

    def batched(self, items: int, size: int) -> None:
        """A group commit of ``items`` (``size`` bytes) was written (the writer's thread)."""
        if self.enabled:
            self.batches.observe(items)

    def repacked(self) -> None:
        if self.enabled:
            self.repacks.inc()

    def stepped(self, verdict: str, seconds: float) -> None:
        """A learning step settled with ``verdict`` after ``seconds``."""
        if self.enabled:
            word = verdict.split(":", 1)[0].strip().lower()
            self.steps.labels(word if word in VERDICTS else "other").inc()
            self.step_seconds.observe(seconds)

    def synced(self, outcome: str) -> None:
        """One sync with one remote ended ``outcome``."""
        if self.enabled:
            self.syncs.labels(outcome if outcome in SYNC_OUTCOMES else "failed").inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _Gauges(Collector):
    """Gauges read when scraped (the daemon's state now): ``name -> value`` from ``read``."""

    _HELP: ClassVar[dict[str, str]] = {
        "reef_open_scenarios": "Scenarios open for writing now",
        "reef_disk_full": "1 while writes to the state directory fail for lack of space",
        "reef_sync_lag_seconds": "The longest time since an open scenario with remotes last synced ok",
        "reef_writer_queue_depth": "Items submitted and not yet written, over every open scenario",
    }

    def __init__(self, read: Callable[[], dict[str, float]]) -> None:
        self.read = read

    def collect(self) -> Any:
        for name, value in self.read().items():
            yield GaugeMetricFamily(name, self._HELP.get(name, name), value=value)

    def describe(self) -> Any:
        return [GaugeMetricFamily(name, text) for name, text in self._HELP.items()]


METRICS = web.AppKey("reef.metrics", Metrics)


def note_upstream(request: web.Request, seconds: float) -> None:
    """The inference route waited ``seconds`` on its upstream (added up over retries)."""
    request[_UPSTREAM_S] = request.get(_UPSTREAM_S, 0.0) + seconds


def metrics_middleware(metrics: Metrics) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def count(request: web.Request, handler: Handler):
        started = time.perf_counter()
        answered = Answered()
        try:
            return await answer(request, handler, answered)
        finally:
            route = route_of(request)
            metrics.requests.labels(route, str(answered.status)).inc()
            waited = request.get(_UPSTREAM_S)
            if waited is not None:
                metrics.upstream.labels(route).observe(waited)
                metrics.added.labels(route).observe(max(0.0, time.perf_counter() - started - waited))

    return count


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    # rendering takes about 1.6 ms on a slow 2-core VM: off the event loop, which keeps answering
    body = await asyncio.to_thread(request.app[METRICS].exposition)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
